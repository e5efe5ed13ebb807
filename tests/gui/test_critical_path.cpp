// The critical path (critical_path.hpp). A hand-made run of two ranks: rank 0 runs F [0,100]
// then SEND_F [100,110] to rank 1, whose RECV_F was posted at 20 and ends at 110, then rank
// 1's F [110,210]. The path ends with rank 1's F, steps back to the receive, crosses to the
// send it waited for (the send started 80 us after the post), and ends at rank 0's F at 0:
// F@0, SEND_F@0, RECV_F@1, F@1. On the synthetic 1F1B iteration (4 ranks, 8 micro-batches)
// the predicted path ends with rank 0's last B, then the optimizer, starts with rank 0's F0
// at 0 and crosses every rank.
#include <catch2/catch.hpp>

#include <set>

#include "pipescope/gui/critical_path.hpp"
#include "pipescope/gui/timeline_model.hpp"
#include "pipeline_trace_fixture.hpp"
#include "pipescope/traces/synthetic.hpp"

using namespace pipescope::gui;
using namespace pipescope::traces;
using pipeline_trace_fixture::predicted_and_slow_measured_1f1b;

namespace {

void add_path_test_event(Trace& t, const char* name, int rank, Lane lane, int peer, double start, double end) {
  TraceEvent e;
  e.name = name;
  e.kind = event_kind_from_name(e.name);
  e.rank = rank;
  e.lane = static_cast<int>(lane);
  e.stage = rank;
  e.micro_batch = 0;
  e.peer_rank = peer;
  e.ts_us = start;
  e.dur_us = end - start;
  t.events.push_back(e);
}

}  // namespace

TEST_CASE("the path crosses from a receive that waited to the send it waited for", "[critical_path]") {
  Trace t;
  t.meta.num_ranks = 2;
  add_path_test_event(t, "F", 0, Lane::Compute, -1, 0, 100);
  add_path_test_event(t, "SEND_F", 0, Lane::Send, 1, 100, 110);
  add_path_test_event(t, "RECV_F", 1, Lane::Recv, 0, 20, 110);
  add_path_test_event(t, "F", 1, Lane::Compute, -1, 110, 210);
  TimelineModel model;
  model.set_traces(t);
  const auto wait = model.receive_wait(0, 2);
  REQUIRE(wait.has_value());
  CHECK(wait->waited_for_send_us == Approx(80));
  CHECK(critical_path_of(model, 0) == std::vector<std::size_t>{0, 1, 2, 3});
  CHECK(model.critical_path(0) == critical_path_of(model, 0));
}

TEST_CASE("a trace without events has an empty path", "[critical_path]") {
  Trace t;
  t.meta.num_ranks = 1;
  TimelineModel model;
  model.set_traces(t);
  CHECK(critical_path_of(model, 0).empty());
}

TEST_CASE("critical path of the predicted 1F1B iteration", "[critical_path]") {
  TimelineModel model;
  model.set_traces(predicted_and_slow_measured_1f1b().first);
  const auto path = model.critical_path(0);
  REQUIRE(path.size() >= 8);
  const auto& events = model.trace(0).events;
  const auto& first = events[path.front()];
  REQUIRE(first.name == "F");
  REQUIRE(first.rank == 0);
  REQUIRE(first.micro_batch == 0);
  REQUIRE(first.ts_us == 0);
  const auto& last = events[path.back()];
  REQUIRE(last.name == "OPTIMIZER");
  REQUIRE(last.end_us() == Approx(model.end_us()));
  REQUIRE(events[path[path.size() - 2]].name == "B");
  // Consecutive events touch: each starts when its predecessor ends, or is fed by a transfer.
  for (std::size_t i = 1; i < path.size(); ++i) {
    const auto &a = events[path[i - 1]], &b = events[path[i]];
    INFO(a.name << a.micro_batch << "@" << a.rank << " -> " << b.name << b.micro_batch << "@" << b.rank);
    REQUIRE(b.ts_us >= a.ts_us - 1e-9);
    REQUIRE(b.ts_us <= a.end_us() + 1e-6);
  }
  // The path crosses all ranks (the warm-up forwards go down the pipeline).
  std::set<int> ranks;
  for (auto i : path) ranks.insert(events[i].rank);
  REQUIRE(ranks.size() == 4);
}
