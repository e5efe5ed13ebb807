// Back-to-back iterations (steady_state.hpp).
// - repeat_iterations: k copies of each rank's program in order; copy i's micro-batches are
//   i * m + j and its transfers follow copy i - 1's, each send and receive still matched with
//   its own copy's; one copy simulates as the schedule itself.
// - Closed forms, p = 4, m = 8, F = B = W = 1, c = 0: the steady state of ZB-H2 is zero bubble,
//   24 = 8 x 3 (its warm-up runs beside the previous drain: one isolated iteration is 27);
//   ZB-H1 keeps 27 and 1F1B 33 (their bubbles are inside the iteration); the busy time per
//   iteration is one iteration's.
// - Refused: fewer than 2 iterations, and costs whose runtime synchronises every optimizer step.
#include <catch2/catch.hpp>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/sim/steady_state.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

CompiledSchedule compiled(const std::string& name, int ranks, int micro_batches) {
  ScheduleParams params;
  params.num_ranks = ranks;
  params.num_micro_batches = micro_batches;
  return compile(make_schedule(name, params));
}

}  // namespace

TEST_CASE("repeated iterations keep each rank's order and each copy's own transfers") {
  const CompiledSchedule one = compiled("1f1b", 3, 4);
  const CompiledSchedule three = repeat_iterations(one, 3);
  REQUIRE(three.instructions.size() == 3 * one.instructions.size());
  REQUIRE(three.transfers.size() == 3 * one.transfers.size());
  CHECK(three.num_micro_batches == 12);
  CHECK(three.rank_first_step.back() == 3 * one.rank_first_step.back());
  for (int rank = 0; rank < one.num_ranks; ++rank) {
    const std::int32_t length = one.rank_begin[rank + 1] - one.rank_begin[rank];
    REQUIRE(three.rank_begin[rank + 1] - three.rank_begin[rank] == 3 * length);
    for (int copy = 0; copy < 3; ++copy)
      for (std::int32_t i = 0; i < length; ++i) {
        const CompiledInstruction& a = one.instructions[one.rank_begin[rank] + i];
        const CompiledInstruction& b = three.instructions[three.rank_begin[rank] + copy * length + i];
        CHECK(b.op == a.op);
        CHECK(b.stage == a.stage);
        CHECK(b.micro_batch == (a.micro_batch < 0 ? a.micro_batch : a.micro_batch + copy * 4));
      }
  }
  for (std::size_t t = 0; t < three.transfers.size(); ++t) {
    const CompiledTransfer& transfer = three.transfers[t];
    CHECK(three.instructions[transfer.send_index].transfer == static_cast<std::int32_t>(t));
    CHECK(three.instructions[transfer.recv_index].transfer == static_cast<std::int32_t>(t));
    CHECK(three.rank_of_instruction(transfer.send_index) == transfer.from_rank);
    CHECK(three.rank_of_instruction(transfer.recv_index) == transfer.to_rank);
  }
  const CostModel costs = CostModel::uniform(1, 2, 1, 0.5);
  CHECK(simulate(repeat_iterations(one, 1), costs).summary.iteration_time_s ==
        simulate(one, costs).summary.iteration_time_s);
  CHECK_THROWS_AS(repeat_iterations(one, 0), UsageError);
}

TEST_CASE("the steady state of ZB-H2 has no bubble; ZB-H1's and 1F1B's stay") {
  const CostModel costs = CostModel::uniform(1, 1, 1, 0);
  const Summary h2 = simulate_steady_state(compiled("zb-h2", 4, 8), costs);
  CHECK(simulate(compiled("zb-h2", 4, 8), costs).summary.iteration_time_s == Approx(27));
  CHECK(h2.iteration_time_s == Approx(24));
  CHECK(h2.bubble_fraction == Approx(0).margin(1e-12));
  CHECK(h2.steady_state_iterations == 4);
  CHECK(h2.num_micro_batches == 8);
  for (const RankSummary& r : h2.ranks) CHECK(r.busy_s == Approx(24));
  CHECK(h2.throughput_samples_per_s == Approx(8.0 / 24));
  CHECK(simulate_steady_state(compiled("zb-h1", 4, 8), costs).iteration_time_s == Approx(27));
  const Summary one_f_one_b = simulate_steady_state(compiled("1f1b", 4, 8), costs, {}, {}, 3);
  CHECK(one_f_one_b.iteration_time_s == Approx(33));
  CHECK(one_f_one_b.bubble_fraction == Approx(9.0 / 33));
}

TEST_CASE("a steady state needs two iterations and runtimes that do not synchronise every step") {
  const CompiledSchedule schedule = compiled("zb-h2", 4, 8);
  CostModel costs = CostModel::uniform(1, 1, 1, 0);
  CHECK_THROWS_AS(simulate_steady_state(schedule, costs, {}, {}, 1), UsageError);
  costs.runtime.optimizer_sync = true;
  CHECK_THROWS_WITH(simulate_steady_state(schedule, costs), Catch::Contains("synchronises the ranks"));
}
