// The typed kind of a trace event (traces/event_kind.hpp), parsed once from its name.
// Every kind's name parses back to it, and the reserved all-to-all kinds of MoE layers are
// ALL_TO_ALL_DISPATCH_F, ALL_TO_ALL_COMBINE_F, ALL_TO_ALL_DISPATCH_B, ALL_TO_ALL_COMBINE_B on
// the collectives lane. A name that is no kind ("aten::mm", "f", "SEND_X", "F ", "") is Other.
// Each op of core makes the kind whose name is its torch action type (op_action_type).
// Reading a trace gives each event the kind of its name: F, SEND_F, RECV_B, OPTIMIZER, and
// Other for "ProfilerStep#3"; the name stays as written.
#include <catch2/catch.hpp>

#include "pipescope/traces/event_kind.hpp"
#include "pipescope/traces/trace_io.hpp"

using namespace pipescope;
using namespace pipescope::traces;

TEST_CASE("event_kind: every kind's name parses back to the kind") {
  int named = 0;
  for (int i = 1; i <= static_cast<int>(EventKind::AllToAllCombineBackward); ++i) {
    const auto kind = static_cast<EventKind>(i);
    INFO("kind " << i << " named " << event_kind_name(kind));
    REQUIRE_FALSE(event_kind_name(kind).empty());
    REQUIRE(event_kind_from_name(event_kind_name(kind)) == kind);
    ++named;
  }
  REQUIRE(named == 24);
  REQUIRE(event_kind_name(EventKind::Other).empty());
}

TEST_CASE("event_kind: names that are no kind are Other") {
  for (const char* name : {"", "f", "F ", "SEND_X", "SEND_", "RECV", "REDUCE_SOMETHING", "aten::mm", "ProfilerStep#3",
                           "ALL_TO_ALL", "TP_"})
    REQUIRE(event_kind_from_name(name) == EventKind::Other);
  REQUIRE(event_kind_category(EventKind::Other) == "other");
  REQUIRE(event_kind_lane(EventKind::Other) == Lane::Compute);
}

TEST_CASE("event_kind: the all-to-all kinds of MoE layers take a lane of their own") {
  REQUIRE(event_kind_from_name("ALL_TO_ALL_DISPATCH_F") == EventKind::AllToAllDispatchForward);
  REQUIRE(event_kind_from_name("ALL_TO_ALL_COMBINE_F") == EventKind::AllToAllCombineForward);
  REQUIRE(event_kind_from_name("ALL_TO_ALL_DISPATCH_B") == EventKind::AllToAllDispatchBackward);
  REQUIRE(event_kind_from_name("ALL_TO_ALL_COMBINE_B") == EventKind::AllToAllCombineBackward);
  for (const auto kind : {EventKind::AllToAllDispatchForward, EventKind::AllToAllCombineForward,
                          EventKind::AllToAllDispatchBackward, EventKind::AllToAllCombineBackward}) {
    REQUIRE(is_all_to_all(kind));
    REQUIRE_FALSE(is_transfer(kind));
    REQUIRE(event_kind_lane(kind) == Lane::AllToAll);
    REQUIRE(event_kind_category(kind) == "collective");
  }
  REQUIRE_FALSE(is_all_to_all(EventKind::SendActivation));
}

TEST_CASE("event_kind: lanes, categories and transfer directions") {
  REQUIRE(event_kind_lane(EventKind::SendActivation) == Lane::Send);
  REQUIRE(event_kind_lane(EventKind::SendGrad) == Lane::Send);
  REQUIRE(event_kind_lane(EventKind::RecvActivation) == Lane::Recv);
  REQUIRE(event_kind_lane(EventKind::RecvGrad) == Lane::Recv);
  REQUIRE(event_kind_lane(EventKind::ReduceGrad) == Lane::Collective);
  REQUIRE(event_kind_lane(EventKind::Forward) == Lane::Compute);
  REQUIRE(event_kind_lane(EventKind::WaitSendActivation) == Lane::Compute);
  REQUIRE(event_kind_category(EventKind::Load) == "compute");
  REQUIRE(event_kind_category(EventKind::BackwardWeight) == "compute");
  REQUIRE(event_kind_category(EventKind::RecvGrad) == "p2p");
  REQUIRE(event_kind_category(EventKind::Optimizer) == "collective");
  REQUIRE(event_kind_category(EventKind::ReduceTied) == "collective");
  REQUIRE(event_kind_category(EventKind::WaitReduceGrad) == "wait");
  REQUIRE(event_kind_category(EventKind::Unshard) == "sharding");
  REQUIRE(carries_activation(EventKind::SendActivation));
  REQUIRE(carries_activation(EventKind::RecvActivation));
  REQUIRE_FALSE(carries_activation(EventKind::SendGrad));
  REQUIRE_FALSE(carries_activation(EventKind::RecvGrad));
  REQUIRE(is_send(EventKind::SendGrad));
  REQUIRE_FALSE(is_send(EventKind::RecvGrad));
  REQUIRE(is_receive(EventKind::RecvActivation));
  REQUIRE_FALSE(is_transfer(EventKind::WaitSendActivation));
}

TEST_CASE("event_kind: each op makes the kind named by its action type") {
  for (int i = 0; i < kNumOps; ++i) {
    const auto op = static_cast<Op>(i);
    INFO(op_name(op));
    const EventKind kind = event_kind_of(op);
    REQUIRE(kind != EventKind::Other);
    REQUIRE(event_kind_name(kind) == op_action_type(op));
  }
}

TEST_CASE("event_kind: a read trace's events carry the kind of their names") {
  const Trace t = parse_trace(R"({"traceEvents": [
    {"ph": "X", "name": "F", "pid": 0, "tid": 0, "ts": 0, "dur": 5},
    {"ph": "X", "name": "SEND_F", "pid": 0, "tid": 1, "ts": 5, "dur": 1},
    {"ph": "X", "name": "RECV_B", "pid": 0, "tid": 2, "ts": 6, "dur": 1},
    {"ph": "B", "name": "OPTIMIZER", "pid": 0, "tid": 3, "ts": 7},
    {"ph": "E", "pid": 0, "tid": 3, "ts": 9},
    {"ph": "X", "name": "ProfilerStep#3", "pid": 0, "tid": 0, "ts": 0, "dur": 9}]})",
                              "kinds.json");
  REQUIRE(t.events.size() == 5);
  REQUIRE(t.events[0].kind == EventKind::Forward);
  REQUIRE(t.events[1].kind == EventKind::SendActivation);
  REQUIRE(t.events[2].kind == EventKind::RecvGrad);
  // A begin-end slice is added at its end.
  REQUIRE(t.events[3].name == "OPTIMIZER");
  REQUIRE(t.events[3].kind == EventKind::Optimizer);
  REQUIRE(t.events[4].name == "ProfilerStep#3");
  REQUIRE(t.events[4].kind == EventKind::Other);
}
