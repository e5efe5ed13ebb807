// make_1f1b_trace: 4 ranks, 8 micro-batches, F 100 us, B 200 us, free transfers and a free
// optimizer give the 1F1B list schedule: iteration (m + p - 1)(F + B) = 11 * 300 = 3300 us and
// a bubble of (p - 1) / (m + p - 1) = 3/11 on every rank (ANCHORS.md). Peak memory is held
// activations: rank 0 holds p = 4 micro-batches, rank 3 one. With transfers of 10 us there is
// one send/receive pair and one flow per micro-batch and neighbour pair in each direction.
#include <catch2/catch.hpp>

#include "pipescope/traces/compare.hpp"
#include "pipescope/traces/synthetic.hpp"

using namespace pipescope::traces;

TEST_CASE("a synthetic 1F1B trace has the textbook iteration time and bubble", "[synthetic]") {
  SyntheticPipeline pp;
  pp.transfer_us = 0;
  pp.optimizer_us = 0;
  pp.activation_bytes = 1000;
  const Trace t = make_1f1b_trace(pp);
  REQUIRE(iteration_time_us(t) == Approx(3300));
  for (int r = 0; r < 4; ++r) REQUIRE(bubble_fraction(t, r, 3300) == Approx(3.0 / 11));
  REQUIRE(peak_memory_bytes(t, 0) == 4000);
  REQUIRE(peak_memory_bytes(t, 3) == 1000);
}

TEST_CASE("transfers, flows and jitter of a synthetic trace", "[synthetic]") {
  SyntheticPipeline pp;
  const Trace exact = make_1f1b_trace(pp);
  // 4 ranks x 8 micro-batches x (F + B) + 3 neighbour pairs x 8 x 2 directions x (send + recv) + 4 optimizer steps.
  REQUIRE(exact.events.size() == 64 + 96 + 4);
  REQUIRE(exact.flows.size() == 48);
  pp.jitter = 0.1;
  pp.slow_rank = 2;
  pp.slow_factor = 1.5;
  pp.source = "measured";
  const Trace jittered = make_1f1b_trace(pp);
  const Comparison c = compare_traces(exact, jittered);
  REQUIRE(c.matched.size() == exact.events.size());
  REQUIRE(c.iteration_time_error < 0);  // the slow rank makes the measured run longer
  REQUIRE(c.op_duration_mape > 0.05);
}
