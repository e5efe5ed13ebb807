// The planner on a small cluster: gpt-1.3b on 8 H100 (8 per node), global batch 32.
// - With 1f1b only, micro-batch size 1 and no recomputation there are exactly 4
//   configurations (pipeline 1, 2, 4, 8 with data parallel 8, 4, 2, 1).
// - Every row fits the memory limit, rows are ranked by throughput, and throughput equals
//   global batch / iteration time.
// - A limit below the weights and optimizer state of any layout leaves nothing.
// (Planning with a measured profile: the last test case.)
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "pipescope/core/registry.hpp"
#include "pipescope/sim/calibration.hpp"
#include "pipescope/sim/planner.hpp"
#include "pipescope/traces/trace_io.hpp"

using namespace pipescope;
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
  request.recomputations = {Recomputation::none};
  request.tensor_parallel_sizes = {1};  // the 3D sweep: test_planner_3d.cpp
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
  request.recomputations = {Recomputation::none};
  request.tensor_parallel_sizes = {1};
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
// first 5 rows as the exhaustive search, with the gradient reduction after the backward or
// overlapped with it (whose lower bound counts no reduction).
TEST_CASE("keeping the best K prunes by lower bound without changing the top K") {
  PlanRequest request = small_request();
  request.overlap_grad_reduce = GENERATE(false, true);
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
    const auto placement = v ? pipescope::v_placement(c.parallel.pipeline)
                             : pipescope::loop_placement(c.parallel.pipeline, c.parallel.chunks);
    CHECK(iteration_time_lower_bound_s(costs, placement, c.parallel.pipeline, c.num_micro_batches) <=
          row.iteration_time_s);
    CHECK(c.parallel.overlap_grad_reduce == request.overlap_grad_reduce);
  }
}

// Planning with a measured profile (`ppsim plan --profile`). Traces simulated from known costs
// (2 ranks; stage 0 F/B/W 100/150/100 us, stage 1 200/250/150 us; 1F1B and ZB-H1 at m = 4)
// are calibrated into a profile file, which the planner reads back and searches for a global
// batch of 8 (m = 8, micro-batch size 1 as recorded) over gpipe, 1f1b, zb-h1 and
// interleaved-1f1b (2 chunks: 4 stages of half the costs).
// - Every row is pipeline 2 x data-parallel 1 with m = 8; each row's time is the simulation of
//   that schedule with the profile's costs (re-split to 4 stages for interleaving), and zb-h1,
//   which hides W in the bubbles, ranks above 1f1b.
// - The best row's trace goes to a file and reads back with the same iteration time.
// - A profile calibrated from 1F1B alone with the split left unmeasured (not estimated) has no
//   backward split: zb-h1 is refused, the reason names the split, and the rest are planned.
// - Another world size (4 GPUs), micro-batch size (2) or recomputation are refused with
//   messages that name the option and what the profile measured.
TEST_CASE("the planner searches with a calibrated profile and refuses what it cannot describe") {
  CostModel known;
  StageCost s0, s1;
  s0.f_s = 100e-6, s0.b_s = 150e-6, s0.w_s = 100e-6, s0.optimizer_s = 20e-6;
  s1.f_s = 200e-6, s1.b_s = 250e-6, s1.w_s = 150e-6, s1.optimizer_s = 20e-6;
  known.stages = {s0, s1};
  known.c_s = 30e-6;
  auto schedule = [](const char* name, int m, int chunks = 1) {
    ScheduleParams params;
    params.num_ranks = 2;
    params.num_micro_batches = m;
    params.chunks = chunks;
    params.chunks_given = chunks != 1;
    return make_schedule(name, params);
  };
  auto measured = [&](const char* name) {
    traces::Trace t = simulate(schedule(name, 4), known).trace;
    t.meta.source = "measured";
    return t;
  };
  const auto dir = std::filesystem::temp_directory_path() / "pipescope_test_planner_profile";
  std::filesystem::create_directories(dir);
  const std::string split_path = (dir / "split.json").string();
  const std::string full_path = (dir / "full.json").string();
  write_profile(calibrate({{measured("1f1b"), "1f1b.json"}, {measured("zb-h1"), "zb-h1.json"}}).profile, split_path);
  CalibrationOptions unsplit;  // full backwards only, the split left unmeasured (not estimated)
  unsplit.split_estimate = false;
  write_profile(calibrate({{measured("1f1b"), "1f1b.json"}}, unsplit).profile, full_path);

  PlanRequest request;
  request.profile = read_profile(split_path);
  request.profile_source = split_path;
  request.num_gpus = 2;
  request.global_batch = 8;
  request.micro_batch_sizes = {1};
  request.recomputations = {Recomputation::none};
  request.tensor_parallel_sizes = {1};
  request.schedules = {"gpipe", "1f1b", "zb-h1", "interleaved-1f1b"};
  request.interleave_chunks = {2};
  REQUIRE(plan_profile_world_size(*request.profile) == 2);
  CHECK(profile_measured_micro_batches(*request.profile) == 4);
  const PlanResult result = plan(request);
  INFO(fmt::format("{} rows, {} refused", result.rows.size(), result.refused));
  REQUIRE(result.rows.size() == 4);
  const CostModel two_stages = cost_model_from_profile(*request.profile);
  const CostModel four_stages = cost_model_from_profile(profile_for_stages(*request.profile, 4, split_path));
  const Topology link = topology_from_profile(*request.profile);
  std::map<std::string, double> time_of;
  for (const PlanRow& row : result.rows) {
    const PlanCandidate& c = row.candidate;
    INFO(c.schedule);
    CHECK(c.parallel.pipeline == 2);
    CHECK(c.parallel.data_parallel == 1);
    CHECK(c.num_micro_batches == 8);
    const bool interleaved = c.schedule == "interleaved-1f1b";
    const double direct =
        simulate(schedule(c.schedule.c_str(), 8, interleaved ? 2 : 1), interleaved ? four_stages : two_stages, link)
            .summary.iteration_time_s;
    CHECK(row.iteration_time_s == Approx(direct));
    CHECK(row.mfu == 0);
    time_of[c.schedule] = row.iteration_time_s;
  }
  CHECK(time_of.at("zb-h1") < time_of.at("1f1b"));

  const std::string trace_path = (dir / "best.json").string();
  traces::write_trace(simulate_candidate(request, result.rows.front().candidate).trace, trace_path);
  CHECK(traces::read_trace(trace_path).end_us() == Approx(result.rows.front().iteration_time_s * 1e6));

  PlanRequest full = request;
  full.profile = read_profile(full_path);
  full.profile_source = full_path;
  const PlanResult without_split = plan(full);
  CHECK(without_split.rows.size() == 3);
  CHECK(without_split.refused == 1);
  REQUIRE(without_split.refusals.size() == 1);
  CHECK_THAT(without_split.refusals.front(), Catch::Contains("zb-h1") && Catch::Contains("split"));

  PlanRequest other = request;
  other.num_gpus = 4;
  CHECK_THROWS_WITH(plan(other), Catch::Contains("--gpus 4") && Catch::Contains("2 pipeline rank(s) x 1"));
  other = request;
  other.micro_batch_sizes = {2};
  CHECK_THROWS_WITH(plan(other), Catch::Contains("--micro-batch-sizes 2") && Catch::Contains("of 1 sample"));
  other = request;
  other.recomputations = {Recomputation::none, Recomputation::full};
  CHECK_THROWS_WITH(plan(other), Catch::Contains("--recompute"));
  other = request;
  other.tensor_parallel_sizes = {1, 2};
  CHECK_THROWS_WITH(plan(other), Catch::Contains("--tensor-parallel-sizes 2"));
  std::filesystem::remove_all(dir);
}

// --steady-state: each configuration ranked by the period of back-to-back iterations. zb-auto
// gains part of its warm-up back (gpt-1.3b at pipeline 4 and 8), 1F1B keeps its isolated
// iteration's time, nothing gets slower; pruning by the lower bound (a rank's work per
// iteration, which a period cannot beat) keeps the top rows.
TEST_CASE("planning the steady state of back-to-back iterations") {
  PlanRequest request = small_request();
  request.schedules = {"1f1b", "zb-auto"};
  request.micro_batch_sizes = {1};
  request.tensor_parallel_sizes = {1};
  request.recomputations = {Recomputation::none};
  const PlanResult isolated = plan(request);
  request.steady_state = true;
  const PlanResult steady = plan(request);
  REQUIRE(steady.rows.size() == isolated.rows.size());
  auto key = [](const PlanCandidate& c) { return std::make_pair(c.schedule, c.parallel.pipeline); };
  std::map<std::pair<std::string, int>, double> isolated_s;
  for (const PlanRow& row : isolated.rows) isolated_s[key(row.candidate)] = row.iteration_time_s;
  int faster = 0;
  for (const PlanRow& row : steady.rows) {
    const double before = isolated_s.at(key(row.candidate));
    INFO(row.candidate.schedule << " pipeline " << row.candidate.parallel.pipeline);
    if (row.candidate.schedule == "1f1b") CHECK(row.iteration_time_s == Approx(before).epsilon(1e-9));
    CHECK(row.iteration_time_s <= before * (1 + 1e-9));
    if (row.iteration_time_s < before * 0.99) ++faster;
  }
  CHECK(faster >= 2);
  request.keep_best = 2;
  const PlanResult best = plan(request);
  REQUIRE(best.rows.size() >= 2);
  for (std::size_t i = 0; i < 2; ++i) CHECK(best.rows[i].iteration_time_s == steady.rows[i].iteration_time_s);
}

// The planner asks the registry's traits, never a schedule's name: zbv (V placement, 2 chunks)
// and interleaved-1f1b (the request's chunk list, a micro-batch group size) registered again
// under names the planner has never seen plan exactly as the originals: the same rows (chunks,
// iteration time, peak memory) in the same order, at pipeline 2, 4 and 8 on 8 H100.
TEST_CASE("the planner needs no schedule name: a renamed schedule plans as its original") {
  ScheduleRegistry& registry = ScheduleRegistry::instance();
  for (const std::string original : {"zbv", "interleaved-1f1b"}) {
    GeneratorInfo copy = *registry.find(original);
    copy.name = "renamed-" + original;
    registry.add(copy);
  }
  PlanRequest request = small_request();
  request.micro_batch_sizes = {1};
  request.recomputations = {Recomputation::none};
  request.tensor_parallel_sizes = {1};
  request.interleave_chunks = {2, 4};
  request.microbatch_group_size = 0;
  for (const std::string original : {"zbv", "interleaved-1f1b"}) {
    INFO(original);
    request.schedules = {original};
    const PlanResult expected = plan(request);
    request.schedules = {"renamed-" + original};
    const PlanResult got = plan(request);
    REQUIRE(got.rows.size() == expected.rows.size());
    REQUIRE(expected.rows.size() >= 2);
    CHECK(got.refused == expected.refused);
    for (std::size_t i = 0; i < got.rows.size(); ++i) {
      CHECK(got.rows[i].candidate.schedule == "renamed-" + original);
      CHECK(got.rows[i].candidate.parallel.pipeline == expected.rows[i].candidate.parallel.pipeline);
      CHECK(got.rows[i].candidate.parallel.chunks == expected.rows[i].candidate.parallel.chunks);
      CHECK(got.rows[i].iteration_time_s == expected.rows[i].iteration_time_s);
      CHECK(got.rows[i].peak_memory_bytes == expected.rows[i].peak_memory_bytes);
    }
  }
  std::set<int> interleaved_chunks;
  request.schedules = {"renamed-interleaved-1f1b"};
  for (const PlanRow& row : plan(request).rows) interleaved_chunks.insert(row.candidate.parallel.chunks);
  CHECK(interleaved_chunks == std::set<int>{2, 4});
}
