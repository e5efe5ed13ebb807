// Looping schedules (loop placement: with p ranks and v chunks, rank r holds stages r, r+p,
// ...), hand-checked for p=4, v=2, m=8, in the unit model of test_generators_support.hpp with
// one slot per chunk forward and one per chunk backward (chunk costs F/v, (B+W)/v):
// - interleaved-1f1b (Megatron): rank 0 warms up with (p-1)*2 + (v-1)*p = 10 forwards, in
//   groups of p micro-batches per chunk, backwards in reverse chunk order. Makespan
//   2vm + 2(p-1) = 38 slots: m(F+B+W) + (p-1)(F+B+W)/v, bubble (p-1)/(vm+p-1) = 3/19 per
//   rank. Rank 0 holds vp + p - 1 = 11 chunk activations = p(1 + (p-1)/(pv)) = 5.5 models'.
//   A last micro-batch group of 1..p-1 (m % G, G = p by default) and --chunks 1 are refused
//   with the reason; without --chunks, v = 2 (tests/core/test_megatron.cpp: every other case).
// - looped-bfs (torch): each local stage forwards all micro-batches, backwards run in
//   reverse stage and reverse micro-batch order; also 2vm + 2(p-1) slots when m >= p.
#include "test_generators_support.hpp"

using namespace pipescope;
using namespace test_support;

TEST_CASE("interleaved-1f1b p=4 v=2 m=8 follows Megatron's order", "[generators]") {
  const ComputeOrder order = interleaved_1f1b_order(params(4, 8, 2, true));
  CHECK(order.num_stages == 8);
  CHECK(order_text(order, 0) ==
        "0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5 "              // warm-up: 10 forwards
        "0F6 4B0 0F7 4B1 4F4 4B2 4F5 4B3 4F6 0B0 4F7 0B1 "      // steady: 6 pairs
        "0B2 0B3 4B4 4B5 4B6 4B7 0B4 0B5 0B6 0B7");             // drain
  CHECK(order_text(order, 3) ==
        "3F0 3F1 3F2 3F3 "
        "7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3F4 3B0 3F5 3B1 3F6 3B2 3F7 3B3 "
        "7F4 7B4 7F5 7B5 7F6 7B6 7F7 7B7 "
        "3B4 3B5 3B6 3B7");
  check_order_invariants(order, loop_placement(4, 2));

  const Schedule grid = unit_grid(order);
  REQUIRE(grid.programs[0].size() == 38u);
  for (int r = 0; r < 4; ++r) {
    int idle = 0;
    for (const Step& step : grid.programs[r]) idle += step.empty() ? 1 : 0;
    CHECK(idle == 6);  // 6 / 38 = (p - 1) / (vm + p - 1)
  }
  CHECK(peak_activations(order.per_rank[0]) == 11);

  // Without --chunks the schedule uses 2 chunks.
  CHECK(interleaved_1f1b_order(params(4, 8)).per_rank == order.per_rank);
}

TEST_CASE("interleaved-1f1b over a grid", "[generators]") {
  for (int v = 2; v <= 4; ++v)
    for (int p = 1; p <= 6; ++p)
      for (int m = p; m <= 12; m += p) {
        INFO("p=" << p << " v=" << v << " m=" << m);
        const ComputeOrder order = interleaved_1f1b_order(params(p, m, v, true));
        check_order_invariants(order, loop_placement(p, v));
        CHECK(unit_makespan(order) == 2 * v * m + 2 * (p - 1));
        if (m > p) CHECK(peak_activations(order.per_rank[0]) == std::min(v * p + p - 1, v * m));
      }
}

TEST_CASE("interleaved-1f1b refuses what Megatron cannot run, saying why", "[generators]") {
  CHECK_THAT(refusal([] { interleaved_1f1b_order(params(4, 6, 2, true)); }),
             Catch::StartsWith("interleaved-1f1b: ") && Catch::Contains("--micro-batches 6 in groups of 4 leaves a remainder of 2") &&
                 Catch::Contains("0 or at least --stages (4)"));
  CHECK_THAT(refusal([] { interleaved_1f1b_order(params(4, 8, 1, true)); }),
             Catch::Contains("--chunks of at least 2") && Catch::Contains("1f1b"));
}

TEST_CASE("looped-bfs p=4 v=2 m=8 runs stages breadth-first", "[generators]") {
  const ComputeOrder order = looped_bfs_order(params(4, 8, 2, true));
  CHECK(order_text(order, 1) ==
        "1F0 1F1 1F2 1F3 1F4 1F5 1F6 1F7 5F0 5F1 5F2 5F3 5F4 5F5 5F6 5F7 "
        "5B7 5B6 5B5 5B4 5B3 5B2 5B1 5B0 1B7 1B6 1B5 1B4 1B3 1B2 1B1 1B0");
  check_order_invariants(order, loop_placement(4, 2));
  CHECK(unit_makespan(order) == 38);
  for (int r = 0; r < 4; ++r) CHECK(peak_activations(order.per_rank[r]) == 16);  // v * m
}

TEST_CASE("looped-bfs over a grid, including one chunk", "[generators]") {
  for (int v = 1; v <= 4; ++v)
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 9; ++m) {
        INFO("p=" << p << " v=" << v << " m=" << m);
        const ComputeOrder order = looped_bfs_order(params(p, m, v, true));
        check_order_invariants(order, loop_placement(p, v));
        // With m < p a micro-batch comes back to rank 0 for its next chunk before the
        // rank has work for it, so the closed form holds for m >= p only.
        if (m >= p) CHECK(unit_makespan(order) == 2 * v * m + 2 * (p - 1));
      }
}
