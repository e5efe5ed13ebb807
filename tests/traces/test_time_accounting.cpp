// time_by_operation and receive_costs on hand-made traces, and their place in compare_traces.
// Two ranks, stage r on rank r:
// - mb 0: rank 0 posts SEND_F at 10; rank 1's RECV_F runs [20,25]: it began after the post,
//   so the data was sent before it ("ready"), its own cost 5 us.
// - mb 1: rank 1's RECV_F begins at 30, rank 0 posts at 40, the receive ends at 47: it
//   waited; the message took 47 - 40 = 7 us.
// - mb 0 backward: rank 1 posts SEND_B at 50; rank 0's RECV_B runs [60,63]: ready, 3 us.
// - a RECV_B of mb 1 on rank 0 with no send anywhere: unmatched.
#include <catch2/catch.hpp>

#include <cmath>

#include "pipescope/traces/compare.hpp"
#include "pipescope/traces/time_accounting.hpp"

using namespace pipescope::traces;

namespace {

void add(Trace& t, int rank, Lane lane, const std::string& name, int stage, int mb, double start, double end,
         int peer = -1) {
  TraceEvent e;
  e.rank = rank;
  e.lane = static_cast<int>(lane);
  e.name = name;
  e.kind = event_kind_from_name(e.name);  // as a reader would parse it
  e.stage = stage;
  e.micro_batch = mb;
  e.ts_us = start;
  e.dur_us = end - start;
  e.peer_rank = peer;
  t.events.push_back(e);
}

Trace two_rank_accounting_trace() {
  Trace t;
  add(t, 0, Lane::Compute, "F", 0, 0, 0, 10);
  add(t, 0, Lane::Send, "SEND_F", 0, 0, 10, 25, 1);
  add(t, 1, Lane::Recv, "RECV_F", 1, 0, 20, 25, 0);
  add(t, 0, Lane::Compute, "F", 0, 1, 30, 40);
  add(t, 0, Lane::Send, "SEND_F", 0, 1, 40, 47, 1);
  add(t, 1, Lane::Recv, "RECV_F", 1, 1, 30, 47, 0);
  add(t, 1, Lane::Send, "SEND_B", 1, 0, 50, 63, 0);
  add(t, 0, Lane::Recv, "RECV_B", 0, 0, 60, 63, 1);
  add(t, 0, Lane::Recv, "RECV_B", 0, 1, 70, 71, 1);
  return t;
}

}  // namespace

TEST_CASE("time_by_operation sums each rank's events by name, in rank and name order", "[compare]") {
  const auto times = time_by_operation(two_rank_accounting_trace());
  REQUIRE(times.size() == 5);
  CHECK((times[0].rank == 0 && times[0].name == "F" && times[0].count == 2 && times[0].total_us == 20));
  CHECK((times[1].rank == 0 && times[1].name == "RECV_B" && times[1].count == 2 && times[1].total_us == 4));
  CHECK((times[2].rank == 0 && times[2].name == "SEND_F" && times[2].total_us == 22));
  CHECK((times[3].rank == 1 && times[3].name == "RECV_F" && times[3].count == 2 && times[3].total_us == 22));
  CHECK((times[4].rank == 1 && times[4].name == "SEND_B" && times[4].total_us == 13));
  CHECK(time_by_operation(Trace{}).empty());
}

TEST_CASE("receive_costs tells receives whose data was sent before them from those that waited", "[compare]") {
  const ReceiveCosts r = receive_costs(two_rank_accounting_trace());
  CHECK(r.ready == 2);
  CHECK(r.ready_total_us == 8);
  CHECK(r.ready_mean_us() == 4);
  CHECK(r.waited == 1);
  CHECK(r.waited_mean_us() == 7);  // from the post, not from the receive's start
  CHECK(r.unmatched == 1);
  // A send to another stage than the receiver's neighbour is not its send.
  Trace skewed = two_rank_accounting_trace();
  for (auto& e : skewed.events)
    if (e.name == "SEND_B") e.stage = 3;
  CHECK(receive_costs(skewed).unmatched == 2);
  const ReceiveCosts none = receive_costs(Trace{});
  CHECK((none.ready == 0 && none.waited == 0 && std::isnan(none.ready_mean_us()) && std::isnan(none.waited_mean_us())));
}

TEST_CASE("receive_costs matches any numbering of stages and micro-batches", "[compare]") {
  // 2,000 transfers, each to a stage of its own and with micro-batch 3,999: far more table than
  // a trace of 4,000 events may have; the sends beyond it are matched all the same. Plus one with
  // a negative micro-batch.
  Trace t;
  for (int i = 0; i < 2000; ++i) {
    add(t, 0, Lane::Send, "SEND_F", i, 3999, 10.0 * i, 10.0 * i + 5, 1);
    add(t, 1, Lane::Recv, "RECV_F", i + 1, 3999, 10.0 * i + 1, 10.0 * i + 3, 0);
  }
  add(t, 0, Lane::Send, "SEND_B", 1, -7, 0, 5, 1);
  add(t, 1, Lane::Recv, "RECV_B", 0, -7, 2, 3, 0);
  const ReceiveCosts r = receive_costs(t);
  CHECK(r.ready == 2001);
  CHECK(r.unmatched == 0);
  CHECK(r.ready_mean_us() == Approx(2.0).epsilon(0.01));
}

TEST_CASE("compare_traces sets each rank's time by operation and the receives side by side", "[compare]") {
  Trace predicted = two_rank_accounting_trace();
  Trace measured = two_rank_accounting_trace();
  // Measured: rank 1's ready receive took 25 us instead of 5, and rank 0 ran a LOAD the
  // prediction does not have.
  for (auto& e : measured.events)
    if (e.name == "RECV_F" && e.micro_batch == 0) e.dur_us = 25;
  add(measured, 0, Lane::Compute, "LOAD", 0, 0, -5, 0);
  const Comparison c = compare_traces(predicted, measured);
  REQUIRE(c.operation_times.size() == 6);
  const OperationTimeComparison& load = c.operation_times[1];
  CHECK((load.rank == 0 && load.name == "LOAD" && load.predicted_count == 0 && load.measured_count == 1));
  CHECK(load.measured_total_us == 5);
  const OperationTimeComparison& recv = c.operation_times[4];
  CHECK((recv.rank == 1 && recv.name == "RECV_F" && recv.predicted_total_us == 22 && recv.measured_total_us == 42));
  CHECK(recv.difference_us() == -20);
  CHECK(c.receives_predicted.ready_mean_us() == 4);
  CHECK(c.receives_measured.ready_mean_us() == 14);
  const auto j = comparison_to_json(c, predicted, measured);
  CHECK(j["operation_times"].size() == 6);
  CHECK(j["operation_times"][1]["measured_total_us"] == 5);
  CHECK(j["receives"]["measured"]["ready_mean_us"] == 14);
  CHECK(j["receives"]["predicted"]["unmatched"] == 1);
  const auto empty = comparison_to_json(compare_traces(Trace{}, Trace{}), Trace{}, Trace{});
  CHECK(empty["receives"]["measured"]["ready_mean_us"].is_null());
}
