// The planner on a small cluster: gpt-1.3b on 8 H100 (8 per node), global batch 32.
// - With 1f1b only, micro-batch size 1 and no recomputation there are exactly 4
//   configurations (pipeline 1, 2, 4, 8 with data parallel 8, 4, 2, 1).
// - Every row fits the memory limit, rows are ranked by throughput, and throughput equals
//   global batch / iteration time.
// - A limit below the weights and optimizer state of any layout leaves nothing.
#include <catch2/catch.hpp>

#include "pipescope/sim/planner.hpp"

using namespace pipescope::sim;

namespace {

PlanRequest small_request() {
  PlanRequest request;
  request.model = resolve_model("gpt-1.3b");
  request.device = device_preset("h100");
  request.num_gpus = 8;
  request.global_batch = 32;
  return request;
}

}  // namespace

TEST_CASE("the planner enumerates pipeline and data-parallel sizes") {
  PlanRequest request = small_request();
  request.schedules = {"1f1b"};
  request.micro_batch_sizes = {1};
  request.recompute_options = {false};
  const auto candidates = enumerate_candidates(request);
  REQUIRE(candidates.size() == 4);
  CHECK(candidates[0].parallel.pipeline == 1);
  CHECK(candidates[0].parallel.data_parallel == 8);
  CHECK(candidates[0].num_micro_batches == 4);
  CHECK(candidates[3].parallel.pipeline == 8);
  CHECK(candidates[3].num_micro_batches == 32);
}

TEST_CASE("the planner ranks fitting configurations by throughput") {
  const PlanRequest request = small_request();
  std::size_t last_done = 0;
  const PlanResult result = plan(request, [&](std::size_t done, std::size_t) { last_done = done; });
  CHECK(last_done == static_cast<std::size_t>(result.considered));
  REQUIRE_FALSE(result.rows.empty());
  CHECK(result.limit_bytes == 80'000'000'000);
  for (std::size_t i = 0; i < result.rows.size(); ++i) {
    const PlanRow& row = result.rows[i];
    CHECK(row.peak_memory_bytes <= result.limit_bytes);
    CHECK(row.throughput_samples_per_s == Approx(32.0 / row.iteration_time_s));
    CHECK(row.mfu > 0.0);
    CHECK(row.mfu < 0.5);  // never above the device efficiency
    if (i > 0) CHECK(result.rows[i - 1].throughput_samples_per_s >= row.throughput_samples_per_s);
  }
  CHECK(result.simulated + result.dropped_for_memory + result.refused >= static_cast<int>(result.rows.size()));

  // The best configuration, simulated again with its trace, gives the same time.
  const SimResult again = simulate_candidate(request, result.rows.front().candidate);
  CHECK(again.summary.iteration_time_s == result.rows.front().iteration_time_s);
  CHECK_FALSE(again.trace.events.empty());
}

TEST_CASE("a limit below every layout's static memory leaves nothing") {
  PlanRequest request = small_request();
  request.max_mem_bytes = 1'000'000;
  const PlanResult result = plan(request);
  CHECK(result.rows.empty());
  CHECK(result.dropped_for_memory > 0);
}

// zb-auto in the planner is searched with each configuration's costs: for every layout where
// zb-h1 fits, zb-auto (one stage per rank) is at least as fast.
TEST_CASE("the planner searches zb-auto per configuration") {
  PlanRequest request = small_request();
  request.schedules = {"zb-h1", "zb-auto"};
  request.micro_batch_sizes = {2};
  request.recompute_options = {false};
  request.max_pipeline = 4;
  const PlanResult result = plan(request);
  int compared = 0;
  for (const PlanRow& h1 : result.rows) {
    if (h1.candidate.schedule != "zb-h1") continue;
    for (const PlanRow& automatic : result.rows) {
      if (automatic.candidate.schedule != "zb-auto" || automatic.candidate.parallel.chunks != 1 ||
          automatic.candidate.parallel.pipeline != h1.candidate.parallel.pipeline)
        continue;
      CHECK(automatic.iteration_time_s <= h1.iteration_time_s * (1 + 1e-12));
      CHECK(automatic.peak_memory_bytes <= result.limit_bytes);
      ++compared;
    }
  }
  CHECK(compared >= 2);
}

// Branch and bound: asking for the best 5 simulates fewer configurations and returns the same
// first 5 rows as the exhaustive search.
TEST_CASE("keeping the best K prunes by lower bound without changing the top K") {
  PlanRequest request = small_request();
  const PlanResult all = plan(request);
  request.keep_best = 5;
  const PlanResult best = plan(request);
  REQUIRE(all.rows.size() >= 5);
  REQUIRE(best.rows.size() >= 5);
  CHECK(best.simulated < all.simulated);
  CHECK(best.pruned > 0);
  for (std::size_t i = 0; i < 5; ++i) {
    CHECK(best.rows[i].iteration_time_s == all.rows[i].iteration_time_s);
  }
  for (const PlanRow& row : all.rows) {
    const auto& c = row.candidate;
    const CostModel costs = derive_costs(request.model, request.device, request.topology, c.parallel);
    const bool v = c.schedule == "zbv";
    const auto placement = v ? pipescope::v_placement(c.parallel.pipeline) : pipescope::loop_placement(c.parallel.pipeline, c.parallel.chunks);
    CHECK(iteration_time_lower_bound_s(costs, placement, c.parallel.pipeline, c.num_micro_batches) <= row.iteration_time_s);
  }
}
