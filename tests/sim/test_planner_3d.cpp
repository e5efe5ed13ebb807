// The planner in three dimensions: tensor x pipeline x data parallelism, with recomputation by
// granularity and sequence parallelism.
// - gpt-1.3b (16 heads) on 8 GPUs, 1f1b, micro-batch size 1, no recomputation, T in {1, 2, 4, 8}:
//   T = 1 gives pp 1, 2, 4, 8 (4 layouts); T = 2 gives pp 1, 2, 4 on 4 GPUs, T = 4 pp 1, 2 and
//   T = 8 pp 1, each with and without sequence parallelism (6 + 4 + 2): 16 configurations, every
//   one with tp x pp x dp = 8 and sequence parallelism only where T > 1.
// - Nodes of 4 GPUs, a model with 2 key/value heads, T in {1, 2, 3, 4, 8}: T = 3 does not divide
//   the 8 GPUs (one refusal, no layout), T = 4 does not divide the 2 kv heads, T = 8 is more than
//   a node: each refused with its reason and counted; the rows are T = 1 and 2 only.
// - Every row is the simulation of its layout (derive_costs and the schedule, simulated
//   directly); for one layout, full recomputation needs the least memory and the most time,
//   no recomputation the reverse, selective in between.
// - The planner finds each rank's peak by walking its program before simulating and drops what
//   cannot fit: with a limit between the smallest and the largest peak, the rows and the count
//   dropped are exactly those that simulating every configuration gives.
// - `ppsim plan` prints tensor_parallel, sequence_parallel and recompute_granularity in JSON and
//   CSV; a TP row equals `ppsim simulate --tensor-parallel 2 --sequence-parallel
//   --recompute-granularity selective`; `--recompute both` still means none and full, and a bad
//   `--recompute` or `--sequence-parallel` exits 2 in one line naming the option.
// - `ppsim plan --steady-state --overlap-grad-reduce` says both in its JSON and table; it writes
//   no traces with --steady-state.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/sim/planner.hpp"
#include "ppsim_run.hpp"

using namespace pipescope;
using namespace pipescope::sim;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

PlanRequest small_3d_request() {
  PlanRequest request;
  request.model = resolve_model("gpt-1.3b");
  request.device = device_preset("h100");
  request.topology.intra_node = request.device.nvlink;
  request.num_gpus = 8;
  request.global_batch = 16;
  request.schedules = {"1f1b"};
  request.micro_batch_sizes = {1};
  return request;
}

// `ppsim ARGS`.
using ppsim_test::run_ppsim;

}  // namespace

TEST_CASE("the planner enumerates tp x pp x dp = GPUs, sequence parallelism only where T > 1") {
  PlanRequest request = small_3d_request();
  request.recomputations = {Recomputation::none};
  const auto candidates = enumerate_candidates(request);
  REQUIRE(candidates.size() == 16);
  std::map<int, int> per_tp;
  for (const PlanCandidate& c : candidates) {
    const ParallelConfig& p = c.parallel;
    CHECK(p.tensor_parallel * p.pipeline * p.data_parallel == 8);
    CHECK(c.num_micro_batches * p.data_parallel == 16);
    if (p.tensor_parallel == 1) CHECK_FALSE(p.sequence_parallel);
    ++per_tp[p.tensor_parallel];
  }
  CHECK(per_tp == std::map<int, int>{{1, 4}, {2, 6}, {4, 4}, {8, 2}});

  request.sequence_parallel_options = {true};
  request.recomputations = {Recomputation::none, Recomputation::selective, Recomputation::full};
  const auto fixed = enumerate_candidates(request);
  CHECK(fixed.size() == 3 * (4 + 3 + 2 + 1));
  for (const PlanCandidate& c : fixed) CHECK(c.parallel.sequence_parallel == (c.parallel.tensor_parallel > 1));
}

TEST_CASE("tensor parallelism that does not divide is refused with the reason") {
  PlanRequest request = small_3d_request();
  request.model.kv_heads = 2;
  request.topology.gpus_per_node = 4;
  request.tensor_parallel_sizes = {1, 2, 3, 4, 8};
  request.recomputations = {Recomputation::none};
  int with_tp_problem = 0;
  const auto candidates = enumerate_candidates(request);
  for (const PlanCandidate& c : candidates) with_tp_problem += c.parallel.tensor_parallel >= 4 ? 1 : 0;
  REQUIRE(with_tp_problem == 4 + 2);

  const PlanResult result = plan(request);
  CHECK(result.considered == static_cast<int>(candidates.size()) + 1);
  CHECK(result.refused == with_tp_problem + 1);
  REQUIRE_FALSE(result.rows.empty());
  for (const PlanRow& row : result.rows) CHECK(row.candidate.parallel.tensor_parallel <= 2);
  auto refused_for = [&](const std::string& text) {
    return std::any_of(result.refusals.begin(), result.refusals.end(),
                       [&](const std::string& line) { return line.find(text) != std::string::npos; });
  };
  CHECK(refused_for("tensor parallel 3: does not divide the 8 GPUs"));
  CHECK(refused_for("--tensor-parallel 4: does not divide the 2 key/value heads"));
  CHECK(refused_for("--tensor-parallel 8: more than the 4 GPUs of a node"));
  CHECK(result.refusals.size() == 3);
}

TEST_CASE("every 3D row is the simulation of its layout, recomputation trading memory for time") {
  PlanRequest request = small_3d_request();
  request.tensor_parallel_sizes = {2};
  const PlanResult result = plan(request);
  REQUIRE(result.rows.size() == static_cast<std::size_t>(result.considered));  // all fit on 80 GB
  using Layout = std::tuple<int, bool>;                                        // pipeline, sequence parallel
  std::map<Layout, std::map<Recomputation, const PlanRow*>> by_layout;
  for (const PlanRow& row : result.rows) {
    const PlanCandidate& c = row.candidate;
    INFO("pp " << c.parallel.pipeline << " sp " << c.parallel.sequence_parallel << " recompute "
               << recomputation_name(c.parallel.recomputation));
    ScheduleParams params;
    params.num_ranks = c.parallel.pipeline;
    params.num_micro_batches = c.num_micro_batches;
    const CostModel costs = derive_costs(request.model, request.device, request.topology, c.parallel);
    const Summary direct =
        simulate(make_schedule(c.schedule, params), costs, with_parallel_layout(request.topology, c.parallel)).summary;
    CHECK(row.iteration_time_s == direct.iteration_time_s);
    CHECK(row.peak_memory_bytes == direct.max_peak_memory_bytes());
    by_layout[{c.parallel.pipeline, c.parallel.sequence_parallel}][c.parallel.recomputation] = &row;
  }
  REQUIRE(by_layout.size() == 3 * 2);
  for (const auto& [layout, rows] : by_layout) {
    REQUIRE(rows.size() == 3);
    const PlanRow& none = *rows.at(Recomputation::none);
    const PlanRow& selective = *rows.at(Recomputation::selective);
    const PlanRow& full = *rows.at(Recomputation::full);
    CHECK(full.peak_memory_bytes < selective.peak_memory_bytes);
    CHECK(selective.peak_memory_bytes < none.peak_memory_bytes);
    CHECK(none.iteration_time_s <= selective.iteration_time_s);
    CHECK(selective.iteration_time_s < full.iteration_time_s);
  }
}

TEST_CASE("the memory walk before simulating drops exactly what simulation would") {
  PlanRequest request = small_3d_request();
  request.schedules = {"1f1b", "zb-h1", "interleaved-1f1b", "zbv"};
  request.micro_batch_sizes = {1, 4};
  request.tensor_parallel_sizes = {1, 2};
  // Every candidate simulated in full, whether it fits or not (those whose schedule refuses the
  // shape, such as 1f1b with fewer micro-batches than stages, are refused by the planner too).
  std::vector<std::pair<PlanCandidate, SimResult>> simulated;
  int refused = 0;
  for (const PlanCandidate& c : enumerate_candidates(request)) {
    try {
      simulated.emplace_back(c, simulate_candidate(request, c, false));
    } catch (const ScheduleError&) {
      ++refused;
    }
  }
  std::vector<std::int64_t> peaks;
  peaks.reserve(simulated.size());
  for (const auto& [c, r] : simulated) peaks.push_back(r.summary.max_peak_memory_bytes());
  std::sort(peaks.begin(), peaks.end());
  request.max_mem_bytes = peaks[peaks.size() / 2];  // about half fit
  std::size_t fit = 0;
  for (std::int64_t peak : peaks) fit += peak <= request.max_mem_bytes ? 1 : 0;
  REQUIRE(fit < peaks.size());

  const PlanResult result = plan(request);
  CHECK(result.rows.size() == fit);
  // A shape the schedule refuses may be dropped first, when its weights alone are over the limit.
  CHECK(result.refused <= refused);
  CHECK(result.refused + result.dropped_for_memory == refused + static_cast<int>(peaks.size() - fit));
  CHECK(result.simulated == static_cast<int>(fit));
  for (const PlanRow& row : result.rows) {
    const auto same = [&](const auto& entry) {
      const PlanCandidate& c = entry.first;
      return c.schedule == row.candidate.schedule &&
             c.parallel.tensor_parallel == row.candidate.parallel.tensor_parallel &&
             c.parallel.sequence_parallel == row.candidate.parallel.sequence_parallel &&
             c.parallel.pipeline == row.candidate.parallel.pipeline &&
             c.parallel.chunks == row.candidate.parallel.chunks &&
             c.parallel.micro_batch_size == row.candidate.parallel.micro_batch_size &&
             c.parallel.recomputation == row.candidate.parallel.recomputation;
    };
    const auto it = std::find_if(simulated.begin(), simulated.end(), same);
    REQUIRE(it != simulated.end());
    CHECK(row.peak_memory_bytes == it->second.summary.max_peak_memory_bytes());
    CHECK(row.iteration_time_s == it->second.summary.iteration_time_s);
  }
}

TEST_CASE("ppsim plan prints tp, sp and the recomputation granularity", "[cli]") {
  const std::string search =
      "plan --model gpt-1.3b --gpus 8 --global-batch 16 --schedules 1f1b --micro-batch-sizes 1 "
      "--tensor-parallel-sizes 1,2,3 --recompute none,selective --top 0 --context-parallel-sizes 1 --quiet";
  const ppsim_test::PpsimRun as_json = run_ppsim(search + " --format json");
  INFO(as_json.err);
  REQUIRE(as_json.status == 0);
  const json plan = json::parse(as_json.out);
  // T = 1: pp 1, 2, 4, 8; T = 2: pp 1, 2, 4 with and without SP; x 2 recomputations; T = 3 once.
  CHECK(plan.at("considered") == (4 + 6) * 2 + 1);
  CHECK(plan.at("refused") == 1);
  REQUIRE(plan.at("refusals").size() == 1);
  CHECK(plan.at("refusals").at(0).get<std::string>().find("tensor parallel 3") != std::string::npos);
  const json& rows = plan.at("configurations");
  REQUIRE(rows.size() == 20);
  std::set<std::string> granularities;
  const json* tp_row = nullptr;
  for (const json& r : rows) {
    CHECK(r.at("tensor_parallel").get<int>() * r.at("pipeline").get<int>() * r.at("data_parallel").get<int>() == 8);
    granularities.insert(r.at("recompute_granularity").get<std::string>());
    CHECK(r.at("recompute").get<bool>() == (r.at("recompute_granularity") != "none"));
    if (r.at("tensor_parallel") == 2 && r.at("sequence_parallel") == true && r.at("pipeline") == 2 &&
        r.at("recompute_granularity") == "selective")
      tp_row = &r;
  }
  CHECK(granularities == std::set<std::string>{"none", "selective"});
  REQUIRE(tp_row != nullptr);
  const ppsim_test::PpsimRun simulated = run_ppsim(
      "simulate --model gpt-1.3b --stages 2 --data-parallel 2 --tensor-parallel 2 "
      "--sequence-parallel --recompute-granularity selective --micro-batches 8 "
      "--schedule 1f1b --zero1 --json");
  INFO(simulated.err);
  REQUIRE(simulated.status == 0);
  const json summary = json::parse(simulated.out);
  CHECK(tp_row->at("iteration_time_s").get<double>() == Approx(summary.at("iteration_time_s").get<double>()));

  const ppsim_test::PpsimRun csv = run_ppsim(search + " --format csv");
  REQUIRE(csv.status == 0);
  CHECK(csv.out.rfind("rank,schedule,pipeline,data_parallel,", 0) == 0);
  // Columns appended after recompute_granularity keep the earlier ones in their places.
  CHECK(csv.out.find(",tensor_parallel,sequence_parallel,recompute_granularity,context_parallel,fp8_format,layout,"
                     "equivalents,expert_parallel,expert_tensor_parallel,recompute_modules,context_parallel_comm\n") !=
        std::string::npos);

  // The table says what it refused in one line; --verbose gives each reason.
  const ppsim_test::PpsimRun table = run_ppsim(search);
  REQUIRE(table.status == 0);
  CHECK(table.out.find("refused 1: 1 by the GPU count (--verbose lists why)") != std::string::npos);
  const ppsim_test::PpsimRun verbose = run_ppsim(search + " --verbose");
  REQUIRE(verbose.status == 0);
  CHECK(verbose.out.find("refused: tensor parallel 3: does not divide the 8 GPUs") != std::string::npos);

  const ppsim_test::PpsimRun both = run_ppsim(
      "plan --model gpt-1.3b --gpus 8 --global-batch 16 --schedules 1f1b --micro-batch-sizes 1 "
      "--tensor-parallel-sizes 2 --sequence-parallel off --recompute both --top 0 -q --format json");
  REQUIRE(both.status == 0);
  std::set<std::string> old_words;
  const json both_plan = json::parse(both.out);
  for (const json& r : both_plan.at("configurations")) {
    old_words.insert(r.at("recompute_granularity").get<std::string>());
    CHECK(r.at("sequence_parallel") == false);
  }
  CHECK(old_words == std::set<std::string>{"none", "full"});

  for (const std::string bad : {"--recompute sometimes", "--sequence-parallel maybe", "--tensor-parallel-sizes 0"}) {
    INFO(bad);
    const ppsim_test::PpsimRun refused = run_ppsim("plan -q " + bad);
    CHECK(refused.status == 2);
    CHECK(refused.out.empty());
    CHECK(refused.one_error_line());
    CHECK(refused.err.find(bad.substr(0, bad.find(' '))) != std::string::npos);
  }
}

// `ppsim plan --steady-state` and `--overlap-grad-reduce`: the JSON says which, every row
// carries overlap_grad_reduce, the table's head says the steady state; no traces with it.
TEST_CASE("ppsim plan ranks the steady state and overlaps the gradient reduction when asked", "[cli]") {
  const std::string search =
      "plan --model gpt-1.3b --gpus 8 --global-batch 16 --schedules 1f1b,zb-auto --micro-batch-sizes 1 "
      "--tensor-parallel-sizes 1 --recompute none --top 0 -q";
  const ppsim_test::PpsimRun steady = run_ppsim(search + " --steady-state --overlap-grad-reduce --format json");
  INFO(steady.err);
  REQUIRE(steady.status == 0);
  const json j = json::parse(steady.out);
  CHECK(j.at("steady_state").get<bool>());
  REQUIRE_FALSE(j.at("configurations").empty());
  for (const json& row : j.at("configurations")) CHECK(row.at("overlap_grad_reduce").get<bool>());
  const ppsim_test::PpsimRun table = run_ppsim(search + " --steady-state");
  REQUIRE(table.status == 0);
  CHECK(table.out.find("per GPU; steady state of back-to-back iterations\n") != std::string::npos);
  const ppsim_test::PpsimRun traced = run_ppsim(search + " --steady-state --trace-dir never-made");
  CHECK(traced.status == 2);
  CHECK(traced.err.find("--steady-state with --trace-dir never-made") != std::string::npos);
  CHECK_FALSE(fs::exists("never-made"));
}
