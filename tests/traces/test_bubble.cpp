// The one bubble definition (traces/bubble.hpp) on a hand-made two-rank trace where loads and
// the optimizer cost time (iteration 0..60 us, the span of the events):
//   rank 0: LOAD [0,5] and F [5,15] on the compute lane, SEND_F [15,20] on the send lane,
//           B [30,50] on the compute lane, OPTIMIZER [50,60] on the collectives lane;
//   rank 1: RECV_F [15,20], F [20,30], B [30,50] on the compute lane, OPTIMIZER [50,60].
// Busy is the compute lane only, so the load counts and the optimizer does not:
// rank 0 busy 5 + 10 + 20 = 35 us, bubble 25/60; rank 1 busy 30 us, bubble 30/60 = 0.5.
// compare's per-rank bubble is the same number. Overlapping busy ranges count once
// ([0,10] and [5,15]: 15 us); an empty iteration has no bubble; the share is clamped to [0, 1].
#include <catch2/catch.hpp>

#include "pipescope/traces/bubble.hpp"
#include "pipescope/traces/compare.hpp"

using namespace pipescope::traces;

namespace {

void add(Trace& t, int rank, Lane lane, const std::string& name, double start, double end) {
  TraceEvent e;
  e.rank = rank;
  e.lane = static_cast<int>(lane);
  e.name = name;
  e.kind = event_kind_from_name(e.name);  // as a reader would parse it
  e.stage = rank;
  e.micro_batch = name == "OPTIMIZER" ? -1 : 0;
  e.ts_us = start;
  e.dur_us = end - start;
  t.events.push_back(e);
}

Trace loads_and_optimizer() {
  Trace t;
  t.meta.source = "predicted";
  t.meta.num_ranks = 2;
  add(t, 0, Lane::Compute, "LOAD", 0, 5);
  add(t, 0, Lane::Compute, "F", 5, 15);
  add(t, 0, Lane::Send, "SEND_F", 15, 20);
  add(t, 0, Lane::Compute, "B", 30, 50);
  add(t, 0, Lane::Collective, "OPTIMIZER", 50, 60);
  add(t, 1, Lane::Recv, "RECV_F", 15, 20);
  add(t, 1, Lane::Compute, "F", 20, 30);
  add(t, 1, Lane::Compute, "B", 30, 50);
  add(t, 1, Lane::Collective, "OPTIMIZER", 50, 60);
  return t;
}

}  // namespace

TEST_CASE("the compute lane alone is busy", "[bubble]") {
  CHECK(counts_as_busy(Lane::Compute));
  CHECK_FALSE(counts_as_busy(Lane::Send));
  CHECK_FALSE(counts_as_busy(Lane::Recv));
  CHECK_FALSE(counts_as_busy(Lane::Collective));
}

TEST_CASE("loads are busy, the optimizer and transfers are not", "[bubble]") {
  const Trace t = loads_and_optimizer();
  REQUIRE(iteration_time_us(t) == Approx(60));
  CHECK(busy_time_us(t, 0) == Approx(35));
  CHECK(busy_time_us(t, 1) == Approx(30));
  CHECK(bubble_fraction_of(busy_time_us(t, 0), 60) == Approx(25.0 / 60));
  CHECK(bubble_fraction_of(busy_time_us(t, 1), 60) == Approx(0.5));
  // compare reads the same definition.
  const Comparison c = compare_traces(t, t);
  REQUIRE(c.ranks.size() == 2);
  CHECK(c.ranks[0].bubble_fraction_predicted == Approx(25.0 / 60));
  CHECK(c.ranks[1].bubble_fraction_measured == Approx(0.5));
  CHECK(c.bubble_fraction_predicted == Approx((25.0 / 60 + 0.5) / 2));
}

TEST_CASE("busy ranges in start order count overlaps once", "[bubble]") {
  BusyTime busy;
  busy.add(0, 10);
  busy.add(5, 15);
  busy.add(12, 14);  // inside what is covered
  busy.add(20, 21);
  CHECK(busy.total_us() == Approx(16));
}

TEST_CASE("the bubble share is clamped and defined for an empty iteration", "[bubble]") {
  CHECK(bubble_fraction_of(0, 0) == 0);
  CHECK(bubble_fraction_of(5, 0) == 0);
  CHECK(bubble_fraction_of(0, 10) == 1);
  CHECK(bubble_fraction_of(12, 10) == 0);
  CHECK(bubble_fraction_of(2.5, 10) == Approx(0.75));
}
