// `ppsim simulate --model` with tensor and sequence parallelism and recomputation granularity,
// through the real binary:
// - llama-3-70b on 4 pipeline ranks of 8-way tensor parallelism: the description counts 32 GPUs;
// - gpt3-175b on 8 x 8 A100s: sequence parallelism, selective and full recomputation each lower
//   the peak memory, full recomputation costs time, and --recompute alone is
//   --recompute-granularity full;
// - interleaved-1f1b without --chunks (2 stages per rank) gets costs for its 8 stages, the same as
//   with --chunks 2;
// - what cannot run exits 2 with one line naming the option and the reason: T above the node's
//   8 GPUs, T = 3 against 64 heads, --sequence-parallel without T > 1, --recompute with
//   --recompute-granularity selective, an unknown granularity, tensor parallelism with explicit
//   costs or a profile;
// - --overlap-grad-reduce hides the gradient all-reduce of 32 replicas but the embedding's share;
// - --steady-state: ZB-H2's period of back-to-back iterations (24 for p = 4, m = 8, unit costs)
//   in the table and the JSON, and no --trace with it;
// - --max-mem-micro-batches N: zb-auto (p = 4, m = 8, f_mem 2 bytes) peaks at 2 N bytes or less
//   on every rank; with another schedule, or N = 0, exit 2 naming the option.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>

#include "ppsim_run.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using ppsim_test::PpsimRun;

// `ppsim simulate ARGS`.
PpsimRun simulate(const std::string& args) { return ppsim_test::run_ppsim("simulate " + args); }

std::int64_t max_peak(const std::string& json_text) {
  std::int64_t peak = 0;
  const json summary = json::parse(json_text);
  for (const json& rank : summary.at("ranks")) peak = std::max(peak, rank.at("peak_memory_bytes").get<std::int64_t>());
  return peak;
}

const std::string kLlama = "--model llama-3-70b --stages 4 --micro-batches 8 --schedule 1f1b ";

}  // namespace

TEST_CASE("ppsim simulate runs tensor and sequence parallelism and both recomputations", "[cli]") {
  const ppsim_test::PpsimRun table = simulate(kLlama + "--tensor-parallel 8");
  INFO(table.err);
  REQUIRE(table.status == 0);
  CHECK(table.out.find("llama-3-70b on 32 x h100 (8 per node; tp 8, recomputation none)") != std::string::npos);

  const std::string gpt3 = "--model gpt3-175b --gpu a100 --stages 8 --micro-batches 16 --tensor-parallel 8 --json ";
  const ppsim_test::PpsimRun plain = simulate(gpt3);
  const ppsim_test::PpsimRun sequence = simulate(gpt3 + "--sequence-parallel");
  const ppsim_test::PpsimRun selective = simulate(gpt3 + "--sequence-parallel --recompute-granularity selective");
  const ppsim_test::PpsimRun full = simulate(gpt3 + "--sequence-parallel --recompute-granularity full");
  const ppsim_test::PpsimRun full_alone = simulate(gpt3 + "--sequence-parallel --recompute");
  for (const ppsim_test::PpsimRun* run : {&plain, &sequence, &selective, &full, &full_alone}) REQUIRE(run->status == 0);
  CHECK(max_peak(sequence.out) < max_peak(plain.out));
  CHECK(max_peak(selective.out) < max_peak(sequence.out));
  CHECK(max_peak(full.out) < max_peak(selective.out));
  CHECK(full_alone.out == full.out);
  const double full_s = json::parse(full.out).at("iteration_time_s").get<double>();
  CHECK(full_s > json::parse(selective.out).at("iteration_time_s").get<double>());
}

// Megatron's --overlap-grad-reduce: 32 replicas of gpt-1.3b on 4 nodes, one stage. The reduction
// after the backward adds its whole time; overlapped with the last backward, what is left is
// the tail (the last bucket and the embedding).
TEST_CASE("ppsim simulate overlaps the gradient reduction with the backward when asked", "[cli]") {
  const std::string replicas =
      "--model gpt-1.3b --stages 1 --micro-batches 2 --data-parallel 32 --inter-bandwidth 5GB --json";
  const ppsim_test::PpsimRun after = simulate(replicas);
  const ppsim_test::PpsimRun overlapped = simulate(replicas + " --overlap-grad-reduce");
  const ppsim_test::PpsimRun alone = simulate("--model gpt-1.3b --stages 1 --micro-batches 2 --json");
  for (const ppsim_test::PpsimRun* run : {&after, &overlapped, &alone}) REQUIRE(run->status == 0);
  const double after_s = json::parse(after.out).at("iteration_time_s").get<double>();
  const double overlapped_s = json::parse(overlapped.out).at("iteration_time_s").get<double>();
  const double alone_s = json::parse(alone.out).at("iteration_time_s").get<double>();
  CHECK(overlapped_s < after_s);
  CHECK(overlapped_s > alone_s);  // the embedding's share is left after the backward
  CHECK(max_peak(overlapped.out) == max_peak(after.out));
}

TEST_CASE("ppsim simulate predicts the steady state of back-to-back iterations", "[cli]") {
  const std::string zb =
      "--schedule zb-h2 --stages 4 --micro-batches 8 --f-cost 1 --b-cost 1 --w-cost 1 --steady-state";
  const PpsimRun table = simulate(zb);
  INFO(table.err);
  REQUIRE(table.status == 0);
  CHECK(table.out.find("iteration time   24 s (steady state of back-to-back iterations)") != std::string::npos);
  const PpsimRun j = simulate(zb + " --json");
  REQUIRE(j.status == 0);
  const json summary = json::parse(j.out);
  CHECK(summary.at("iteration_time_s").get<double>() == Approx(24));
  CHECK(summary.at("steady_state_iterations").get<int>() == 4);
  const PpsimRun traced = simulate(zb + " --trace never.json");
  CHECK(traced.status == 2);
  CHECK(traced.err.find("--steady-state with --trace never.json") != std::string::npos);
  CHECK_FALSE(fs::exists("never.json"));
}

TEST_CASE("ppsim simulate limits zb-auto's memory in micro-batches", "[cli]") {
  const std::string zb = "--schedule zb-auto --stages 4 --micro-batches 8 --f-cost 1 --b-cost 1 --w-cost 1 --json ";
  for (int n : {1, 2, 4, 8}) {
    const PpsimRun run = simulate(zb + "--max-mem-micro-batches " + std::to_string(n));
    INFO("N = " << n << ": " << run.err);
    REQUIRE(run.status == 0);
    const json summary = json::parse(run.out);
    REQUIRE(summary.at("ranks").size() == 4);
    for (const json& rank : summary.at("ranks")) CHECK(rank.at("peak_memory_bytes").get<int>() <= 2 * n);
  }
  const PpsimRun other = simulate("--schedule 1f1b --stages 4 --micro-batches 8 --max-mem-micro-batches 4");
  CHECK(other.status == 2);
  CHECK(other.err.find("--max-mem-micro-batches is zb-auto's limit: not with --schedule 1f1b") != std::string::npos);
  const PpsimRun zero = simulate(zb + "--max-mem-micro-batches 0");
  CHECK(zero.status == 2);
  CHECK(zero.err.find("--max-mem-micro-batches must be at least 1, got 0") != std::string::npos);
}

TEST_CASE("ppsim simulate derives a model's costs for the stages interleaved-1f1b chooses", "[cli]") {
  const std::string args = "--model gpt-7b --stages 4 --micro-batches 8 --schedule interleaved-1f1b --json";
  const ppsim_test::PpsimRun chosen = simulate(args);
  INFO(chosen.err);
  REQUIRE(chosen.status == 0);
  CHECK(json::parse(chosen.out).at("num_stages") == 8);
  CHECK(chosen.out == simulate(args + " --chunks 2").out);
}

TEST_CASE("ppsim simulate refuses tensor parallelism that cannot run, with the reason", "[cli]") {
  const std::pair<std::string, std::string> cases[] = {
      {kLlama + "--tensor-parallel 16", "--tensor-parallel 16: more than the 8 GPUs of a node"},
      {kLlama + "--tensor-parallel 16 --gpus-per-node 16", "does not divide the 8 key/value heads of llama-3-70b"},
      {kLlama + "--tensor-parallel 3", "--tensor-parallel 3: does not divide the 64 attention heads of llama-3-70b"},
      {kLlama + "--sequence-parallel", "--sequence-parallel needs --tensor-parallel above 1"},
      {kLlama + "--tensor-parallel 0", "--tensor-parallel must be at least 1"},
      {kLlama + "--recompute --recompute-granularity selective", "--recompute means full recomputation"},
      {kLlama + "--recompute-granularity some", "--recompute-granularity: 'some' is neither full nor selective"},
      {"--stages 4 --micro-batches 8 --tensor-parallel 2", "--tensor-parallel needs --model: not with explicit costs"},
      {"--stages 4 --micro-batches 8 --recompute-granularity selective", "selective needs --model"},
      {"--stages 4 --micro-batches 8 --overlap-grad-reduce",
       "--overlap-grad-reduce needs --model: not with explicit costs"},
      {"--stages 4 --micro-batches 8 --profile nowhere.json --sequence-parallel", "--sequence-parallel needs --model"},
  };
  for (const auto& [args, reason] : cases) {
    INFO(args);
    const ppsim_test::PpsimRun run = simulate(args + " --json");
    CHECK(run.status == 2);
    CHECK(run.one_error_line());
    CHECK(run.err.find(reason) != std::string::npos);
    CHECK(run.out.empty());
  }
}

// Megatron's --defer-embedding-wgrad-compute on llama-3-70b (4 stages of TP 8 with sequence
// parallelism, 8 micro-batches): the last rank holds the deferred passes' head inputs and logit
// gradients until its flush, so its peak rises (all eight more than the first two of
// --wgrad-deferral-limit 2), and the iteration is no longer; back-to-back iterations flush each
// one. Refused in one line naming the option: the limit alone, a negative limit, one stage.
TEST_CASE("ppsim simulate defers the output layer's weight gradients to the flush", "[cli]") {
  const std::string base = kLlama + "--tensor-parallel 8 --sequence-parallel --json ";
  const PpsimRun plain = simulate(base);
  const PpsimRun all = simulate(base + "--defer-embedding-wgrad-compute");
  const PpsimRun two = simulate(base + "--defer-embedding-wgrad-compute --wgrad-deferral-limit 2");
  const PpsimRun steady_plain = simulate(base + "--steady-state");
  const PpsimRun steady = simulate(base + "--steady-state --defer-embedding-wgrad-compute");
  for (const PpsimRun* run : {&plain, &all, &two, &steady_plain, &steady}) {
    INFO(run->err);
    REQUIRE(run->status == 0);
  }
  const auto last_peak = [](const PpsimRun& run) {
    return json::parse(run.out).at("ranks").at(3).at("peak_memory_bytes").get<std::int64_t>();
  };
  const auto iteration = [](const PpsimRun& run) { return json::parse(run.out).at("iteration_time_s").get<double>(); };
  CHECK(last_peak(all) > last_peak(two));
  CHECK(last_peak(two) > last_peak(plain));
  CHECK(iteration(all) <= iteration(plain));
  CHECK(iteration(steady) <= iteration(steady_plain));

  for (const std::string& bad : {std::string("--wgrad-deferral-limit 2"),
                                 std::string("--defer-embedding-wgrad-compute --wgrad-deferral-limit -1")}) {
    const PpsimRun refused = simulate(base + bad);
    CHECK(refused.status == 2);
    CHECK(refused.one_error_line());
    CHECK(refused.err.find("--wgrad-deferral-limit") != std::string::npos);
  }
  const PpsimRun one_stage =
      simulate("--model llama-3-70b --stages 1 --micro-batches 8 --tensor-parallel 8 --defer-embedding-wgrad-compute");
  CHECK(one_stage.status == 2);
  CHECK(one_stage.one_error_line());
  CHECK(one_stage.err.find("--defer-embedding-wgrad-compute needs pipeline parallelism") != std::string::npos);
}
