// GPipe and 1F1B, hand-checked for p=4, m=8, with the unit-time model of
// test_generators_support.hpp (F = 1 slot, BackwardPass = 1 slot, so F + B + W = 2 slots):
// - gpipe: rank r runs rF0..rF7 then rB0..rB7; makespan (m + p - 1)(F+B+W) = 11 * 2 = 22
//   slots; every rank idles 6 of 22 slots, the bubble fraction (p-1)/(m+p-1) = 3/11; it
//   holds all m = 8 micro-batches of activations.
// - 1f1b: rank r runs p-1-r warm-up forwards, then F/B pairs, then the drain; makespan
//   also 22, bubble 3/11; rank r holds at most p - r micro-batches (4, 3, 2, 1).
//   m < p runs as Megatron-Core runs it, with min(p - 1 - r, m) warm-up forwards (the same
//   2(m + p - 1) slots, min(p - r, m) micro-batches held); any --chunks other than 1 is refused.
#include <algorithm>

#include "test_generators_support.hpp"

using namespace pipescope;
using namespace test_support;

TEST_CASE("gpipe p=4 m=8: all forwards, then all backwards", "[generators]") {
  const ComputeOrder order = gpipe_order(params(4, 8));
  CHECK(order.name == "gpipe");
  CHECK(order_text(order, 0) == "0F0 0F1 0F2 0F3 0F4 0F5 0F6 0F7 0B0 0B1 0B2 0B3 0B4 0B5 0B6 0B7");
  CHECK(order_text(order, 3) == "3F0 3F1 3F2 3F3 3F4 3F5 3F6 3F7 3B0 3B1 3B2 3B3 3B4 3B5 3B6 3B7");
  check_order_invariants(order, {0, 1, 2, 3});

  const Schedule grid = unit_grid(order);
  REQUIRE(grid.programs[0].size() == 22u);  // (m + p - 1) * 2
  for (int r = 0; r < 4; ++r) {
    int idle = 0;
    for (const Step& step : grid.programs[r]) idle += step.empty() ? 1 : 0;
    CHECK(idle == 6);  // 6 / 22 = (p - 1) / (m + p - 1)
    CHECK(peak_activations(order.per_rank[r]) == 8);
  }
  // Rank 3 starts in slot 3 and rank 0 ends 3 slots after rank 3's last backward.
  CHECK(program_text(grid.programs[3])[3] == "3F0");
  CHECK(program_text(grid.programs[0])[21] == "0B7");
}

TEST_CASE("1f1b p=4 m=8: warm-up, one forward one backward, drain", "[generators]") {
  const ComputeOrder order = one_f_one_b_order(params(4, 8));
  CHECK(order.name == "1f1b");
  CHECK(order_text(order, 0) == "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7");
  CHECK(order_text(order, 1) == "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 1F7 1B5 1B6 1B7");
  CHECK(order_text(order, 2) == "2F0 2F1 2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4 2F6 2B5 2F7 2B6 2B7");
  CHECK(order_text(order, 3) == "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7");
  check_order_invariants(order, {0, 1, 2, 3});
  CHECK(unit_makespan(order) == 22);
  for (int r = 0; r < 4; ++r) CHECK(peak_activations(order.per_rank[r]) == 4 - r);
}

TEST_CASE("1f1b and gpipe makespans over a grid", "[generators]") {
  // Unit model: both take 2(m + p - 1) slots whatever p and m.
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 12; ++m) {
      INFO("p=" << p << " m=" << m);
      CHECK(unit_makespan(gpipe_order(params(p, m))) == 2 * (m + p - 1));
      const ComputeOrder order = one_f_one_b_order(params(p, m));
      check_order_invariants(order, loop_placement(p, 1));
      CHECK(unit_makespan(order) == 2 * (m + p - 1));
      for (int r = 0; r < p; ++r) CHECK(peak_activations(order.per_rank[r]) == std::min(p - r, m));
    }
}

TEST_CASE("1f1b and gpipe refuse what they cannot honour, saying why", "[generators]") {
  CHECK(refusal([] { one_f_one_b_order(params(4, 3)); }).empty());  // Megatron runs m < p
  CHECK_THAT(refusal([] { one_f_one_b_order(params(4, 8, 2, true)); }),
             Catch::Contains("one stage per rank") && Catch::Contains("--chunks 2"));
  CHECK_THAT(refusal([] { gpipe_order(params(2, 4, 3, true)); }), Catch::StartsWith("gpipe: "));
  CHECK_THAT(refusal([] { gpipe_order(params(0, 4)); }), Catch::Contains("--stages must be at least 1"));
  CHECK_THAT(refusal([] { gpipe_order(params(2, 0)); }), Catch::Contains("--micro-batches must be at least 1"));
  CHECK(refusal([] { gpipe_order(params(2, 4, 1, true)); }).empty());  // --chunks 1 is fine
}
