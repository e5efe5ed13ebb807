// The planner with today's dimensions (planner.hpp):
// - Llama 3 8B (8192 tokens) on 24 H100, global batch 48, 1f1b, micro-batch 1, TP 1 and 2, CP 1,
//   2 and 3: CP 3 does not split 8192 in 6 chunks (refused by context parallelism, counted once
//   per configuration); every row has tp x cp x pp x dp = 24, and a CP 2 row (of Llama on 16) is
//   what `ppsim simulate --context-parallel 2` predicts for it;
// - the CP exchange searched (p2p and a2a) for Llama 3 8B on 16 H100, TP 1, 2 and 8, CP 1 and 2:
//   each CP 2 layout once per exchange, each CP 1 layout once; a2a refused at TP 8 (one
//   key/value head a TP rank, which two CP ranks cannot split), naming --cp-comm-type a2a; an
//   a2a row is `ppsim simulate --cp-comm-type a2a`'s prediction; the table names the exchange
//   in the cp column ("2a2a") and its heading; CSV and JSON name it per row; an unknown
//   exchange, or --cp-comm-types beside --cp-comm-type, is one line naming the option;
// - a2a+p2p searched for Llama 3 8B at 128k on 32 H100, C = 16: each row's all-to-all group is
//   the largest that fits a node and the heads (8 at T = 1, 4 at T = 2), named in the table
//   ("16(8a2a)") and the JSON, and a row is `ppsim simulate --cp-comm-type a2a+p2p
//   --hierarchical-context-parallel-sizes 8 2`'s prediction (whose first line names the exchange:
//   "cp 16 (a2a+p2p, 8 x 2)"); simulate refuses the sizes without
//   a2a+p2p, sizes whose product is not C, and a2a+p2p without sizes, each in one line;
// - FP8 asked (precisions BF16 and hybrid): both appear, and FP8 on an A100 is refused by the
//   device's precision;
// - gpt-1.3b on 8 GPUs with 1f1b, zb-h1 and zb-h2 at one pipeline rank: one program, so one row
//   naming "zb-h1" and "zb-h2" as the same run; with two ranks they stay apart; Llama's
//   selective recomputation (a fused attention core) folds into "-";
// - the refusals in one summary line by cause;
// - a folded run is named by the request's first schedule, even where a backward whole and as B
//   then W leave its times apart in the last bits;
// - what no configuration could honour (a layout string that does not parse, ...) is one line;
// - --search-layouts: Llama 3 70B's 80 layers on 6 ranks x 2 chunks also as 12 on the first and
//   the last rank and 14 on the others; nothing where Megatron's layouts are the even split.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>
#include <fmt/format.h>

#include "pipescope/sim/pipeline_layout.hpp"
#include "pipescope/sim/planner.hpp"
#include "ppsim_run.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

PlanRequest megatron_request(const char* model, int gpus, int global_batch) {
  PlanRequest r;
  r.model = resolve_model(model);
  r.device = device_preset("h100");
  r.topology.intra_node = r.device.nvlink;
  r.num_gpus = gpus;
  r.global_batch = global_batch;
  r.schedules = {"1f1b"};
  r.micro_batch_sizes = {1};
  r.recomputations = {Recomputation::none};
  return r;
}

}  // namespace

TEST_CASE("the planner searches context parallelism and refuses what does not split the sequence") {
  PlanRequest r = megatron_request("llama-3-8b", 24, 48);
  r.tensor_parallel_sizes = {1, 2};
  r.context_parallel_sizes = {1, 2, 3};
  const PlanResult result = plan(r);
  REQUIRE_FALSE(result.rows.empty());
  bool saw_cp2 = false;
  for (const PlanRow& row : result.rows) {
    const ParallelConfig& p = row.candidate.parallel;
    CHECK(p.gpus() == 24);
    CHECK(p.context_parallel != 3);
    saw_cp2 = saw_cp2 || p.context_parallel == 2;
  }
  CHECK(saw_cp2);
  CHECK(result.refusals_by_cause.count("context parallelism") == 1);
  CHECK_THAT(refusal_summary(result), Catch::StartsWith(fmt::format("refused {}:", result.refused)));
  CHECK(std::any_of(result.refusals.begin(), result.refusals.end(),
                    [](const std::string& why) { return why.find("--context-parallel 3") != std::string::npos; }));
}

TEST_CASE("a CP row is ppsim simulate's prediction of it", "[cli]") {
  const ppsim_test::PpsimRun planned = ppsim_test::run_ppsim(
      "plan --model llama-3-8b --gpus 16 --global-batch 32 --schedules 1f1b --micro-batch-sizes 1 --recompute none "
      "--tensor-parallel-sizes 1 --context-parallel-sizes 2 --top 0 --quiet --format json");
  INFO(planned.err);
  REQUIRE(planned.status == 0);
  const nlohmann::json rows = nlohmann::json::parse(planned.out).at("configurations");
  const auto row =
      std::find_if(rows.begin(), rows.end(), [](const nlohmann::json& r) { return r.at("pipeline") == 2; });
  REQUIRE(row != rows.end());
  CHECK(row->at("context_parallel") == 2);
  const ppsim_test::PpsimRun simulated = ppsim_test::run_ppsim(
      "simulate --model llama-3-8b --schedule 1f1b --stages 2 --context-parallel 2 --data-parallel 4 --micro-batches 8 "
      "--zero1 --json");
  INFO(simulated.err);
  REQUIRE(simulated.status == 0);
  CHECK(row->at("iteration_time_s").get<double>() ==
        Approx(nlohmann::json::parse(simulated.out).at("iteration_time_s").get<double>()));
}

TEST_CASE("the planner searches the context-parallel exchange where asked, refusing a2a where heads do not split") {
  PlanRequest r = megatron_request("llama-3-8b", 16, 32);
  r.tensor_parallel_sizes = {1, 2, 8};
  r.context_parallel_sizes = {1, 2};
  r.sequence_parallel_options = {true};
  r.context_parallel_comms = {ContextParallelComm::p2p, ContextParallelComm::a2a};
  const std::vector<PlanCandidate> candidates = enumerate_candidates(r);
  std::map<std::tuple<int, int, int>, std::vector<ContextParallelComm>> exchanges;  // (tp, cp, pp)
  for (const PlanCandidate& c : candidates)
    exchanges[{c.parallel.tensor_parallel, c.parallel.context_parallel, c.parallel.pipeline}].push_back(
        c.parallel.context_parallel_comm);
  for (const auto& [layout, comms] : exchanges) {
    INFO("tp " << std::get<0>(layout) << " cp " << std::get<1>(layout) << " pp " << std::get<2>(layout));
    if (std::get<1>(layout) == 1)
      CHECK(comms == std::vector<ContextParallelComm>{ContextParallelComm::p2p});
    else
      CHECK(comms == std::vector<ContextParallelComm>{ContextParallelComm::p2p, ContextParallelComm::a2a});
  }
  const PlanResult result = plan(r);
  int a2a_rows = 0;
  for (const PlanRow& row : result.rows) {
    const ParallelConfig& p = row.candidate.parallel;
    if (p.context_parallel_comm != ContextParallelComm::a2a) continue;
    ++a2a_rows;
    CHECK(p.context_parallel == 2);
    CHECK(p.tensor_parallel != 8);
  }
  CHECK(a2a_rows > 0);
  CHECK(result.refusals_by_cause.count("context parallelism") == 1);
  CHECK(std::any_of(result.refusals.begin(), result.refusals.end(), [](const std::string& why) {
    return why.find("--context-parallel 2 with --cp-comm-type a2a: does not divide the 1 key/value heads") !=
           std::string::npos;
  }));
}

TEST_CASE("ppsim plan --cp-comm-types: each row names its exchange, an a2a row is simulate's", "[cli]") {
  const std::string search =
      "plan --model llama-3-8b --gpus 16 --global-batch 32 --schedules 1f1b --micro-batch-sizes 1 --recompute none "
      "--tensor-parallel-sizes 1 --context-parallel-sizes 2 --cp-comm-types p2p,a2a --quiet";
  const ppsim_test::PpsimRun planned = ppsim_test::run_ppsim(search + " --top 0 --format json");
  INFO(planned.err);
  REQUIRE(planned.status == 0);
  const nlohmann::json rows = nlohmann::json::parse(planned.out).at("configurations");
  const auto row = std::find_if(rows.begin(), rows.end(), [](const nlohmann::json& r) {
    return r.at("pipeline") == 2 && r.at("context_parallel_comm") == "a2a";
  });
  REQUIRE(row != rows.end());
  CHECK(std::any_of(rows.begin(), rows.end(), [](const nlohmann::json& r) {
    return r.at("pipeline") == 2 && r.at("context_parallel_comm") == "p2p";
  }));
  const ppsim_test::PpsimRun simulated = ppsim_test::run_ppsim(
      "simulate --model llama-3-8b --schedule 1f1b --stages 2 --context-parallel 2 --cp-comm-type a2a "
      "--data-parallel 4 --micro-batches 8 --zero1 --json");
  INFO(simulated.err);
  REQUIRE(simulated.status == 0);
  CHECK(row->at("iteration_time_s").get<double>() ==
        Approx(nlohmann::json::parse(simulated.out).at("iteration_time_s").get<double>()));

  const ppsim_test::PpsimRun table = ppsim_test::run_ppsim(search + " --top 0");
  REQUIRE(table.status == 0);
  CHECK(table.out.find("; context parallelism's exchange searched (p2p, a2a)") != std::string::npos);
  CHECK(table.out.find(" 2a2a ") != std::string::npos);
  const ppsim_test::PpsimRun csv = ppsim_test::run_ppsim(search + " --top 0 --format csv");
  REQUIRE(csv.status == 0);
  CHECK(csv.out.find(",recompute_modules,context_parallel_comm\n") != std::string::npos);
  CHECK(csv.out.find(",a2a\n") != std::string::npos);
  CHECK(csv.out.find(",p2p\n") != std::string::npos);

  const std::string one_exchange =
      "plan --model llama-3-8b --gpus 16 --global-batch 32 --context-parallel-sizes 2 --quiet";
  const ppsim_test::PpsimRun unknown = ppsim_test::run_ppsim(one_exchange + " --cp-comm-types p2p,ring");
  CHECK(unknown.status == 2);
  CHECK(unknown.err == "ppsim: error: --cp-comm-types: 'ring' (p2p, all_gather or a2a)\n");
  const ppsim_test::PpsimRun both = ppsim_test::run_ppsim(one_exchange + " --cp-comm-types a2a --cp-comm-type a2a");
  CHECK(both.status == 2);
  CHECK(both.err == "ppsim: error: --cp-comm-types with --cp-comm-type a2a: give one\n");
}

TEST_CASE("a2a+p2p rows take the largest all-to-all group that fits, and are simulate's", "[cli]") {
  const std::string search =
      "plan --model llama-3-8b --seq-length 131072 --gpus 32 --global-batch 8 --tensor-parallel-sizes 1,2 "
      "--sequence-parallel on --context-parallel-sizes 16 --cp-comm-types a2a+p2p --schedules 1f1b --recompute none "
      "--micro-batch-sizes 1 --top 0 --quiet";
  const ppsim_test::PpsimRun planned = ppsim_test::run_ppsim(search + " --format json");
  INFO(planned.err);
  REQUIRE(planned.status == 0);
  const nlohmann::json rows = nlohmann::json::parse(planned.out).at("configurations");
  REQUIRE_FALSE(rows.empty());
  for (const auto& r : rows) {
    CHECK(r.at("context_parallel_comm") == "a2a+p2p");
    const int a2a = r.at("tensor_parallel") == 1 ? 8 : 4;
    CHECK(r.at("hierarchical_context_parallel_sizes") == nlohmann::json{a2a, 16 / a2a});
  }
  const auto row = std::find_if(rows.begin(), rows.end(), [](const nlohmann::json& r) {
    return r.at("tensor_parallel") == 1 && r.at("pipeline") == 1;
  });
  REQUIRE(row != rows.end());
  const std::string simulate =
      "simulate --model llama-3-8b --seq-length 131072 --schedule 1f1b --stages 1 --context-parallel 16 "
      "--data-parallel 2 --micro-batches 4 --zero1 --cp-comm-type a2a+p2p";
  const ppsim_test::PpsimRun simulated =
      ppsim_test::run_ppsim(simulate + " --hierarchical-context-parallel-sizes 8 2 --json");
  INFO(simulated.err);
  REQUIRE(simulated.status == 0);
  CHECK(row->at("iteration_time_s").get<double>() ==
        Approx(nlohmann::json::parse(simulated.out).at("iteration_time_s").get<double>()));
  const ppsim_test::PpsimRun described = ppsim_test::run_ppsim(simulate + " --hierarchical-context-parallel-sizes 8 2");
  REQUIRE(described.status == 0);
  CHECK(described.out.find("(8 per node; tp 1, cp 16 (a2a+p2p, 8 x 2), recomputation none)") != std::string::npos);
  const ppsim_test::PpsimRun table = ppsim_test::run_ppsim(search);
  REQUIRE(table.status == 0);
  CHECK(table.out.find(" 16(8a2a) ") != std::string::npos);
  CHECK(table.out.find("; context parallelism by all-to-all in groups, then a ring (--cp-comm-type a2a+p2p)") !=
        std::string::npos);

  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases{
      {" --hierarchical-context-parallel-sizes 4 2",
       "--hierarchical-context-parallel-sizes 4 2: 4 x 2 is not --context-parallel 16"},
      {" --hierarchical-context-parallel-sizes 16",
       "--hierarchical-context-parallel-sizes 16: give two sizes, the all-to-all groups' A and the ring's B"},
      {"", "--context-parallel 16 with --cp-comm-type a2a+p2p: no all-to-all group size A given or fitting"},
  };
  for (const Case& c : cases) {
    const ppsim_test::PpsimRun run = ppsim_test::run_ppsim(simulate + c.args);
    INFO(c.args << "\n" << run.err);
    CHECK(run.status == 2);
    CHECK(run.one_error_line());
    CHECK(run.err.find(c.message) != std::string::npos);
  }
  const ppsim_test::PpsimRun ring = ppsim_test::run_ppsim(
      "simulate --model llama-3-8b --stages 1 --micro-batches 4 --context-parallel 4 "
      "--hierarchical-context-parallel-sizes 2 2");
  CHECK(ring.status == 2);
  CHECK(ring.err.find("--hierarchical-context-parallel-sizes 2 2: only --cp-comm-type a2a+p2p takes it") !=
        std::string::npos);
}

TEST_CASE("FP8 is searched beside BF16 where asked, and refused where the device has none") {
  PlanRequest r = megatron_request("llama-3-8b", 8, 16);
  r.tensor_parallel_sizes = {1};
  r.precisions = {Fp8Format::none, Fp8Format::hybrid};
  const PlanResult result = plan(r);
  const auto count = [&](Fp8Format f) {
    return std::count_if(result.rows.begin(), result.rows.end(),
                         [&](const PlanRow& row) { return row.candidate.parallel.fp8 == f; });
  };
  CHECK(count(Fp8Format::none) > 0);
  CHECK(count(Fp8Format::hybrid) > 0);
  r.device = device_preset("a100");
  const PlanResult on_a100 = plan(r);
  CHECK(on_a100.refusals_by_cause.at("the device's precision") > 0);
}

TEST_CASE("rows that are the same run are folded, naming the other choices") {
  PlanRequest r = megatron_request("gpt-1.3b", 8, 16);
  r.tensor_parallel_sizes = {1};
  r.schedules = {"1f1b", "zb-h1", "zb-h2"};
  const PlanResult result = plan(r);
  const auto at_pipeline = [&](int pp) {
    std::vector<const PlanRow*> rows;
    for (const PlanRow& row : result.rows)
      if (row.candidate.parallel.pipeline == pp) rows.push_back(&row);
    return rows;
  };
  const auto one_rank = at_pipeline(1);
  REQUIRE(one_rank.size() == 1);
  CHECK(one_rank[0]->candidate.schedule == "1f1b");
  CHECK(one_rank[0]->equivalents == std::vector<std::string>{"zb-h1", "zb-h2"});
  CHECK(at_pipeline(2).size() >= 2);  // different programs stay apart
  CHECK(result.folded >= 2);

  PlanRequest llama = megatron_request("llama-3-8b", 8, 16);
  llama.tensor_parallel_sizes = {1};
  llama.recomputations = {Recomputation::none, Recomputation::selective};
  for (const PlanRow& row : plan(llama).rows) {
    CHECK(row.candidate.parallel.recomputation == Recomputation::none);
    CHECK(row.equivalents == std::vector<std::string>{"recompute selective"});
  }
}

TEST_CASE("a folded run is named by the request's first choice, wherever its times differ in the last bits") {
  PlanRequest r = megatron_request("gpt-1.3b", 8, 16);
  r.tensor_parallel_sizes = {1};
  r.context_parallel_sizes = {1};
  r.schedules = {"zbv", "zb-h1", "interleaved-1f1b", "1f1b"};
  const PlanResult result = plan(r);
  bool saw_single = false, saw_chunked = false;
  for (std::size_t i = 0; i < result.rows.size(); ++i) {
    const PlanRow& row = result.rows[i];
    if (i > 0) CHECK(result.rows[i - 1].throughput_samples_per_s >= row.throughput_samples_per_s);
    if (row.candidate.parallel.pipeline != 1) continue;
    if (row.candidate.parallel.chunks == 1) {
      saw_single = true;
      CHECK(row.candidate.schedule == "zb-h1");
      CHECK(row.equivalents == std::vector<std::string>{"1f1b"});
    } else if (row.candidate.parallel.chunks == 2) {
      // At one rank two chunks run forwards and backwards in one order under both schedules.
      saw_chunked = true;
      CHECK(row.candidate.schedule == "zbv");
      CHECK(row.equivalents == std::vector<std::string>{"interleaved-1f1b"});
    }
  }
  CHECK(saw_single);
  CHECK(saw_chunked);
  // With CP 2 on 16 GPUs, pipeline 1: a backward whole or as B then W adds the same sums in another
  // order, and the three schedules are still one row.
  PlanRequest cp = megatron_request("llama-3-8b", 16, 32);
  cp.tensor_parallel_sizes = {1};
  cp.context_parallel_sizes = {2};
  cp.schedules = {"1f1b", "zb-h1", "zb-h2"};
  int single = 0;
  for (const PlanRow& row : plan(cp).rows) {
    if (row.candidate.parallel.pipeline != 1) continue;
    ++single;
    CHECK(row.candidate.schedule == "1f1b");
    CHECK(row.equivalents == std::vector<std::string>{"zb-h1", "zb-h2"});
  }
  CHECK(single == 1);
}

TEST_CASE("ppsim plan names the option that no configuration could honour, in one line", "[cli]") {
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"--pipeline-model-parallel-layout 'Et*8|('", "--pipeline-model-parallel-layout 'Et*8|(': a '(' is never closed"},
      {"--decoder-last-pipeline-num-layers 0", "--decoder-last-pipeline-num-layers 0: must be at least 1"},
      {"--decoder-first-pipeline-num-layers 2 --account-for-loss-in-pipeline-split", "Megatron refuses"},
      {"--overlap-param-gather --no-zero1", "--overlap-param-gather needs the distributed optimizer"},
      {"--overlap-param-gather-with-optimizer-step",
       "--overlap-param-gather-with-optimizer-step needs --overlap-param-gather"},
      {"--tp-comm-overlap --sequence-parallel off", "--tp-comm-overlap needs sequence parallelism"},
      {"--context-parallel-sizes 0", "--context-parallel-sizes: '0'"},
      {"--gpu a100 --fp8-format hybrid", "--fp8-format hybrid: the a100 has no FP8"},
  };
  for (const Case& c : cases) {
    const ppsim_test::PpsimRun run = ppsim_test::run_ppsim("plan --quiet --top 1 " + c.args);
    INFO(c.args << "\n" << run.err);
    CHECK(run.status == 2);
    CHECK(run.one_error_line());
    CHECK(run.err.find(c.message) != std::string::npos);
    CHECK(run.out.empty());
  }
}

TEST_CASE("the gather with the optimizer step is planned where Megatron runs it: interleaved, sharded, overlapped") {
  PlanRequest r = megatron_request("llama-3-8b", 16, 32);
  r.schedules = {"1f1b", "interleaved-1f1b", "zbv"};
  r.zero1 = true;
  r.options.overlap_param_gather = true;
  r.options.overlap_param_gather_with_optimizer_step = true;
  int with_step = 0;
  for (const PlanCandidate& c : enumerate_candidates(r)) {
    const bool expected = c.schedule == "interleaved-1f1b" && c.parallel.chunks > 1 && c.parallel.zero1;
    CHECK(c.parallel.overlap_param_gather_with_optimizer_step == expected);
    with_step += expected ? 1 : 0;
  }
  CHECK(with_step > 0);
  // Every candidate it is set on is one the cost model takes: none refused for it.
  const PlanResult result = plan(r);
  CHECK_FALSE(result.rows.empty());
  for (const std::string& refusal : result.refusals) CHECK(refusal.find("optimizer-step") == std::string::npos);
}

TEST_CASE("--search-layouts adds Megatron's uneven layouts where they describe the model and differ from the split") {
  // Llama 3 70B, 80 layers. On 6 ranks x 2 chunks the first and the last rank can hold 12 (6 a
  // chunk), the others 14: (6 - 2) x 14 + 2 x 12 = 80. Counting the embedding and the loss as
  // layers needs 82 to divide by 6 ranks: it does not. On 2 ranks of one chunk 82 / 2 = 41
  // puts 40 and 40 on the stages, the even split again: nothing new.
  PlanRequest r = megatron_request("llama-3-70b", 48, 48);
  r.search_layouts = true;
  const std::vector<LayoutOptions> six = layout_choices(r, 80, 6, 2);
  REQUIRE(six.size() == 2);
  CHECK(six[0].is_default());
  CHECK(six[1].first_stage_layers == 12);
  CHECK(six[1].last_stage_layers == 12);
  CHECK(stage_layer_counts(six[1], 80, 6, 2) == std::vector<int>{6, 7, 7, 7, 7, 6, 6, 7, 7, 7, 7, 6});
  CHECK(layout_choices(r, 80, 2, 1).size() == 1);
  // 78 layers on 4 ranks: counting the embedding and the loss gives 19, 20, 20, 19, which is
  // the even split itself (pipescope's split takes the two missing layers from the ends): one choice.
  CHECK(split_layers(78, 4) == std::vector<int>{19, 20, 20, 19});
  CHECK(layout_choices(r, 78, 4, 1).size() == 1);
  // A layout the request gives is every configuration's; without the search, the split only.
  PlanRequest given = r;
  given.options.layout.account_for_loss = true;
  CHECK(layout_choices(given, 80, 6, 2) == std::vector<LayoutOptions>{given.options.layout});
  r.search_layouts = false;
  CHECK(layout_choices(r, 80, 6, 2).size() == 1);

  PlanRequest search = megatron_request("llama-3-70b", 48, 48);
  search.tensor_parallel_sizes = {8};
  search.schedules = {"interleaved-1f1b"};
  search.interleave_chunks = {2};
  const PlanResult even = plan(search);
  search.search_layouts = true;
  const PlanResult searched = plan(search);
  CHECK(searched.considered > even.considered);
  const auto uneven = std::find_if(searched.rows.begin(), searched.rows.end(), [](const PlanRow& row) {
    return row.candidate.parallel.layout.first_stage_layers.has_value();
  });
  REQUIRE(uneven != searched.rows.end());
  CHECK(uneven->candidate.parallel.pipeline * uneven->candidate.parallel.chunks >= 6);
  CHECK(uneven->iteration_time_s ==
        Approx(simulate_candidate(search, uneven->candidate, false).summary.iteration_time_s));
}

TEST_CASE("ppsim plan --search-layouts shows each row's layout, and refuses a layout given beside it", "[cli]") {
  const std::string args =
      "plan --model llama-3-70b --gpus 48 --global-batch 48 --tensor-parallel-sizes 8 --context-parallel-sizes 1 "
      "--schedules interleaved-1f1b --chunks 2 --recompute none --micro-batch-sizes 1 --quiet --top 0 --search-layouts";
  const ppsim_test::PpsimRun run = ppsim_test::run_ppsim(args);
  INFO(run.err);
  REQUIRE(run.status == 0);
  CHECK(run.out.find("layout") != std::string::npos);
  CHECK(run.out.find("first 12 last 12") != std::string::npos);
  const ppsim_test::PpsimRun csv = ppsim_test::run_ppsim(args + " --format csv");
  CHECK(csv.out.find("--decoder-first-pipeline-num-layers 12 --decoder-last-pipeline-num-layers 12") !=
        std::string::npos);
  const ppsim_test::PpsimRun both = ppsim_test::run_ppsim(args + " --account-for-loss-in-pipeline-split");
  CHECK(both.status == 2);
  CHECK(both.one_error_line());
  CHECK(both.err.find("--search-layouts with --account-for-loss-in-pipeline-split") != std::string::npos);
}
