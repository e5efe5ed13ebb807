// Megatron's --defer-embedding-wgrad-compute: the last stage's output-layer weight gradients
// computed in the pipeline's flush (StageCost::deferred_weight_s, memory_rules.hpp's
// DeferredWeights, the event loop, model.cpp).
// Expected:
// - 1F1B, p = 4, m = 8, F = B = W = 1, the last stage deferring 0.5 of its W for every
//   micro-batch: its eight backwards take 1.5, and the flush, one W of stage 3 lasting 8 x 0.5 =
//   4, starts when the last of them ends (26), inside the 6 its rank waits for the others' last
//   backwards; the iteration 33 -> 32 (rank 0's last backward waits 0.5 less for its gradient);
//   the ranks' busy time is unchanged; with a limit of 3 micro-batches, 32.5 and a flush of 1.5.
// - Memory: 1F1B's last rank, holding 100 bytes per deferred pass (no other memory), peaks at
//   800 just before its flush. Each deferred micro-batch holds deferred_bytes (100) from the start of its backward
//   until the end of the flush: in a program F0 B0 F1 B1 F2 B2 the peak, walked and simulated
//   alike, is the run's without deferral plus 3 x 100 (all three held during the flush).
// - A deferred time longer than the stage's W is refused.
// - Derived from a model (llama-3-70b, 4 stages, 8 micro-batches): the last stage's
//   deferred_weight_s is the head's weight gradient, deferred_bytes its input and its output's
//   16-bit gradient (2 x tokens x (h / T + vocab / T) with sequence parallelism); the other
//   stages defer nothing; --wgrad-deferral-limit without the switch, a negative limit and one
//   pipeline stage are refused, naming the option.
#include <catch2/catch.hpp>

#include <string>

#include "memory_rules.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/sim/layer_costs.hpp"
#include "pipescope/sim/model.hpp"
#include "pipescope/sim/simulator.hpp"
#include "sim_test_support.hpp"

using namespace pipescope;
using namespace pipescope::sim;
using sim_test::hand_schedule;

namespace {

CostModel unit_costs_deferring(double deferred_s, int limit) {
  CostModel costs = CostModel::uniform(1, 1, 1, 0);
  costs.stages.assign(4, costs.stages.front());
  costs.stages[3].deferred_weight_s = deferred_s;
  costs.stages[3].deferred_micro_batches = limit;
  return costs;
}

Schedule one_f_one_b() { return make_schedule("1f1b", {4, 8, 1, false}); }

}  // namespace

TEST_CASE("deferred output-layer weight gradients run in the flush of the last rank") {
  const SimResult plain = simulate(one_f_one_b(), unit_costs_deferring(0, 0));
  const SimResult all = simulate(one_f_one_b(), unit_costs_deferring(0.5, 0));
  const SimResult three = simulate(one_f_one_b(), unit_costs_deferring(0.5, 3));
  CHECK(plain.summary.iteration_time_s == Approx(33));
  CHECK(all.summary.iteration_time_s == Approx(32));
  CHECK(three.summary.iteration_time_s == Approx(32.5));
  for (int r = 0; r < 4; ++r) CHECK(all.summary.ranks[r].busy_s == Approx(plain.summary.ranks[r].busy_s));

  const auto last_rank_events = [](const SimResult& result, const std::string& name) {
    std::vector<pipescope::traces::TraceEvent> out;
    for (const auto& e : result.trace.events)
      if (e.rank == 3 && e.lane == static_cast<int>(pipescope::traces::Lane::Compute) && e.name == name)
        out.push_back(e);
    return out;
  };
  const auto backwards = last_rank_events(all, "B");
  REQUIRE(backwards.size() == 8);
  for (const auto& b : backwards) CHECK(b.dur_us == Approx(1.5e6));
  const auto flush = last_rank_events(all, "W");
  REQUIRE(flush.size() == 1);
  CHECK(flush[0].stage == 3);
  CHECK(flush[0].dur_us == Approx(4e6));
  CHECK(flush[0].ts_us == Approx(backwards.back().end_us()));
  const auto flush_of_three = last_rank_events(three, "W");
  REQUIRE(flush_of_three.size() == 1);
  CHECK(flush_of_three[0].dur_us == Approx(1.5e6));

  // Held until the flush: the last rank's peak grows by the eight deferred passes' bytes (its
  // activations are all freed by then), walked and simulated alike.
  CostModel holding = unit_costs_deferring(0.5, 0);
  holding.stages[3].deferred_bytes = 100;
  const SimResult held = simulate(one_f_one_b(), holding);
  CHECK(held.summary.ranks[3].peak_memory_bytes == 800);
  CHECK(walked_peak_memory_bytes(compile(one_f_one_b()), holding) == 800);
}

TEST_CASE("each deferred micro-batch holds its bytes until the flush") {
  // One rank, F0 B0 F1 B1 F2 B2: forwards allocate 10, backwards free them.
  std::vector<Instruction> program;
  for (int m = 0; m < 3; ++m) {
    program.push_back({Op::ForwardPass, 0, m});
    program.push_back({Op::BackwardPass, 0, m});
  }
  const Schedule s = hand_schedule("hand", 1, 3, {0}, {program});
  CostModel costs = CostModel::uniform(1, 1, 1, 0, 10, -5, -5);
  costs.stages.front().deferred_weight_s = 0.5;
  costs.stages.front().deferred_bytes = 100;
  const SimResult deferred = simulate(s, costs);
  costs.stages.front().deferred_bytes = 0;
  const SimResult plain = simulate(s, costs);
  // The last backward holds the two earlier ones' and, from its start, its own.
  CHECK(deferred.summary.ranks[0].peak_memory_bytes == plain.summary.ranks[0].peak_memory_bytes + 300);
  costs.stages.front().deferred_bytes = 100;
  CHECK(walked_peak_memory_bytes(compile(s), costs) == deferred.summary.ranks[0].peak_memory_bytes);

  costs.stages.front().deferred_weight_s = 2;  // more than W
  CHECK_THROWS_AS(simulate(s, costs), UsageError);
}

TEST_CASE("a model's last stage defers its head's weight gradient, and the options are checked") {
  const ModelSpec model = resolve_model("llama-3-70b");
  const DeviceSpec h100 = device_preset("h100");
  ParallelConfig parallel;
  parallel.pipeline = 4;
  parallel.tensor_parallel = 4;
  parallel.sequence_parallel = true;
  parallel.defer_embedding_wgrad = true;
  parallel.wgrad_deferral_limit = 3;
  const CostModel costs = derive_costs(model, h100, Topology{}, parallel);
  const HeadTimes head = head_times(model, h100, parallel);
  for (int s = 0; s < 3; ++s) CHECK(costs.stages[s].deferred_weight_s == 0.0);
  const StageCost& last = costs.stages[3];
  // 16 GPUs, two nodes: the head's compute at the slower one's pace.
  CHECK(last.deferred_weight_s == Approx(head.w_s * slowest_node_slowdown(h100.kernels, 2)));
  CHECK(last.deferred_micro_batches == 3);
  const double tokens = model.seq;
  CHECK(last.deferred_bytes ==
        static_cast<std::int64_t>(2.0 * tokens * (model.hidden / 4.0 + static_cast<double>(model.vocab) / 4)));

  ParallelConfig limit_alone = parallel;
  limit_alone.defer_embedding_wgrad = false;
  CHECK_THROWS_WITH(derive_costs(model, h100, Topology{}, limit_alone),
                    Catch::Contains("--wgrad-deferral-limit needs --defer-embedding-wgrad-compute"));
  ParallelConfig negative = parallel;
  negative.wgrad_deferral_limit = -1;
  CHECK_THROWS_WITH(derive_costs(model, h100, Topology{}, negative), Catch::Contains("--wgrad-deferral-limit"));
  ParallelConfig one_stage = parallel;
  one_stage.pipeline = 1;
  CHECK_THROWS_WITH(derive_costs(model, h100, Topology{}, one_stage),
                    Catch::Contains("--defer-embedding-wgrad-compute needs pipeline parallelism"));
}
