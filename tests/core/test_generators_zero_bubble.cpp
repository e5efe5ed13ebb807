// Split-backward schedules, in the unit model of test_generators_support.hpp with F, I
// (BackwardInput) and W (BackwardWeight) one slot each, so F = B = W = 1 in ANCHORS.md:
// - zb-h1 p=4 m=8: makespan m(F+B+W) + (p-1)(F+B-W) = 24 + 3 = 27; rank r holds at most
//   p - r micro-batches of activations (1F1B's memory), at most p from F to W (rank 0 runs the
//   paper's F, then I W F after its warm-up, so at most one weight pass waits there; the last
//   rank defers up to p), and defers at most p weight passes. Over the grid (m >= p) the makespan is
//   always 3m + p - 1.
// - zb-h2 p=4 m=8: (p-1)(F+B-2W) = 0 bubble inside every rank's busy span once m >= 2p - 1
//   (the last rank still starts p - 1 slots late, so the makespan is also 3m + p - 1);
//   rank r holds at most 2(p - r) - 1 micro-batches, rank 0 exactly 2p - 1 = 7.
// - zbv (V placement, p=2 m=4 hand-derived from torch's construction): 6 chunk-slots per
//   micro-batch per rank, makespan 6m + p - 1 and no idle slot inside a rank's span once
//   m >= 2p - 1 (the ZB README's "ZBV bubble 0"); --chunks other than 2 refused.
// - dualpipev (p=2 m=4 hand-derived): overlapped F&B pairs; rank 0 never waits, so the
//   makespan is rank 0's instruction count; m < 2p and --chunks 3 refused with the reason.
#include "test_generators_support.hpp"

using namespace pipescope;
using namespace test_support;

namespace {

int max_pending_weights(const std::vector<Instruction>& ops) {
  int pending = 0, peak = 0;
  for (const Instruction& instr : ops) {
    if (instr.op == Op::BackwardInput) peak = std::max(peak, ++pending);
    if (instr.op == Op::BackwardWeight) --pending;
  }
  return peak;
}

// Micro-batches between their F and their W.
int max_held(const std::vector<Instruction>& ops) {
  int held = 0, peak = 0;
  for (const Instruction& instr : ops) {
    if (instr.op == Op::ForwardPass) peak = std::max(peak, ++held);
    if (instr.op == Op::BackwardWeight) --held;
  }
  return peak;
}

}  // namespace

TEST_CASE("zb-h1 p=4 m=8: 1F1B memory, bubble (p-1)(F+B-W)", "[generators]") {
  const ComputeOrder order = zb_h1_order(params(4, 8));
  CHECK(order_text(order, 0) ==
        "0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 0F7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7");
  CHECK(order_text(order, 3) ==
        "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 3F6 3I6 3W3 3F7 3I7 3W4 3W5 3W6 3W7");
  check_order_invariants(order, {0, 1, 2, 3});
  const Schedule grid = unit_grid(order);
  CHECK(grid.programs[0].size() == 27u);  // 3m + (p - 1)(1 + 1 - 1)
  // Rank 0 waits p - 1 = 3 slots for its first gradient, and never again.
  CHECK(idle_inside_span(grid.programs[0]) == 3);
  for (int r = 0; r < 4; ++r) {
    CHECK(peak_activations(order.per_rank[r]) == 4 - r);
    CHECK(max_pending_weights(order.per_rank[r]) <= 4);
    CHECK(max_held(order.per_rank[r]) <= 4);
  }
  CHECK(max_pending_weights(order.per_rank[0]) == 1);
  CHECK(max_pending_weights(order.per_rank[3]) == 4);  // between an I and its next F, 4 W wait
}

TEST_CASE("zb-h2 p=4 m=8: no bubble inside any rank's span", "[generators]") {
  const ComputeOrder order = zb_h2_order(params(4, 8));
  CHECK(order_text(order, 0) ==
        "0F0 0F1 0F2 0F3 0F4 0F5 0F6 0I0 0F7 0I1 0W0 0I2 0W1 0I3 0W2 0I4 0W3 0I5 0W4 0I6 0W5 0W6 0I7 0W7");
  check_order_invariants(order, {0, 1, 2, 3});
  const Schedule grid = unit_grid(order);
  CHECK(grid.programs[0].size() == 27u);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(idle_inside_span(grid.programs[r]) == 0);
    CHECK(program_text(grid.programs[r])[r] == std::to_string(r) + "F0");  // starts as early as it can
    CHECK(peak_activations(order.per_rank[r]) == 2 * (4 - r) - 1);
  }
}

TEST_CASE("zero-bubble H1 and H2 over a grid", "[generators]") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      INFO("p=" << p << " m=" << m);
      const ComputeOrder h1 = zb_h1_order(params(p, m));
      const ComputeOrder h2 = zb_h2_order(params(p, m));
      check_order_invariants(h1, loop_placement(p, 1));
      check_order_invariants(h2, loop_placement(p, 1));
      for (int r = 0; r < p; ++r) {
        CHECK(op_counts(h1.per_rank[r])[Op::BackwardInput] == m);
        CHECK(op_counts(h1.per_rank[r])[Op::BackwardWeight] == m);
        CHECK(peak_activations(h1.per_rank[r]) <= p - r);
        CHECK(peak_activations(h2.per_rank[r]) <= 2 * (p - r) - 1);
        CHECK(max_pending_weights(h1.per_rank[r]) <= p);
        CHECK(max_held(h1.per_rank[r]) <= p);
      }
      if (m >= p) CHECK(unit_makespan(h1) == 3 * m + p - 1);
      if (m >= 2 * p - 1) {
        const Schedule grid = unit_grid(h2);
        CHECK(grid.programs[0].size() == static_cast<std::size_t>(3 * m + p - 1));
        for (int r = 0; r < p; ++r) CHECK(idle_inside_span(grid.programs[r]) == 0);
      }
    }
}

TEST_CASE("zbv p=2 m=4 follows torch's ZBV construction", "[generators]") {
  const ComputeOrder order = zbv_order(params(2, 4));
  CHECK(order.stage_to_rank == std::vector<int>{0, 1, 1, 0});
  CHECK(order_text(order, 0) ==
        "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 0I2 0W2 0I3 0W3");
  CHECK(order_text(order, 1) ==
        "1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 2I3 1I3 1W2 2W3 1W3");
  check_order_invariants(order, v_placement(2));
  CHECK(unit_makespan(order) == 6 * 4 + 1);
}

TEST_CASE("zbv over a grid: no bubble inside the span once m >= 2p - 1", "[generators]") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      INFO("p=" << p << " m=" << m);
      const ComputeOrder order = zbv_order(params(p, m, 2, true));
      check_order_invariants(order, v_placement(p));
      if (m >= 2 * p - 1) {
        const Schedule grid = unit_grid(order);
        CHECK(grid.programs[0].size() == static_cast<std::size_t>(6 * m + p - 1));
        for (int r = 0; r < p; ++r) CHECK(idle_inside_span(grid.programs[r]) == 0);
      }
    }
  CHECK_THAT(refusal([] { zbv_order(params(4, 8, 3, true)); }),
             Catch::StartsWith("zbv: ") && Catch::Contains("exactly 2 stages per rank") &&
                 Catch::Contains("--chunks 3"));
}

TEST_CASE("dualpipev p=2 m=4 follows torch's DualPipeV construction", "[generators]") {
  const ComputeOrder order = dualpipev_order(params(2, 4));
  CHECK(order_text(order, 0) == "0F0 0F1 0F2 3F0 3I0 3W0 3F1 0F3 3B1 3F2 0B0 3B2 3F3 0B1 3B3 0I2 0W2 0I3 0W3");
  CHECK(order_text(order, 1) == "1F0 2F0 1F1 2F1 1F2 2B0 2F2 1B0 1F3 2B1 2F3 1B1 2B2 1B2 2I3 1I3 2W3 1W3");
  check_order_invariants(order, v_placement(2));
}

TEST_CASE("dualpipev over a grid, and its refusals", "[generators]") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 2 * p; m <= 2 * p + 9; ++m) {
      INFO("p=" << p << " m=" << m);
      const ComputeOrder order = dualpipev_order(params(p, m));
      check_order_invariants(order, v_placement(p));
      CHECK(unit_makespan(order) == static_cast<int>(order.per_rank[0].size()));
    }
  CHECK_THAT(refusal([] { dualpipev_order(params(4, 7)); }),
             Catch::StartsWith("dualpipev: ") && Catch::Contains("m >= 2p = 8") &&
                 Catch::Contains("--micro-batches 7"));
  CHECK_THAT(refusal([] { dualpipev_order(params(4, 8, 3, true)); }), Catch::Contains("--chunks 3"));
}
