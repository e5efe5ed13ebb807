// `ppsim simulate` with a MoE model and expert parallelism (SPEC section 6).
// - Mixtral 8x7B on 4 pipeline ranks x 8 data-parallel GPUs, EP 8: exit 0, the description names
//   "ep 8 etp 1"; --json adds parameters (46.7B) and active_parameters (12.9B); Megatron's names
//   --expert-model-parallel-size and --expert-tensor-parallel-size give the same prediction.
// - Bad input exits 2 with one line naming the option: EP not dividing the experts, EP not
//   dividing the stage's GPUs, expert options on a dense model, TP without SP on a MoE model, a
//   size given under both its names with two values, an imbalance above experts / top_k (the
//   busiest expert taking every token), and top_k above the experts of a model file.
#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "ppsim_run.hpp"

namespace {

ppsim_test::PpsimRun moe_simulate(const std::string& args) {
  return ppsim_test::run_ppsim("simulate --schedule 1f1b --stages 4 --micro-batches 8 " + args);
}

const std::string kMixtral = "--model mixtral-8x7b --data-parallel 8 ";

}  // namespace

TEST_CASE("ppsim simulate runs a MoE model with expert parallelism", "[cli]") {
  const ppsim_test::PpsimRun table = moe_simulate(kMixtral + "--expert-parallel 8");
  INFO(table.err);
  REQUIRE(table.status == 0);
  CHECK(table.out.find("mixtral-8x7b on 32 x h100 (8 per node; tp 1, ep 8 etp 1, recomputation none)") !=
        std::string::npos);

  const ppsim_test::PpsimRun run = moe_simulate(kMixtral + "--expert-parallel 8 --json");
  REQUIRE(run.status == 0);
  const nlohmann::json j = nlohmann::json::parse(run.out);
  CHECK(j.at("parameters").get<double>() == Approx(46.7e9).epsilon(0.01));
  CHECK(j.at("active_parameters").get<double>() == Approx(12.9e9).epsilon(0.01));
  const ppsim_test::PpsimRun megatron =
      moe_simulate(kMixtral + "--expert-model-parallel-size 8 --expert-tensor-parallel-size 1 --json");
  REQUIRE(megatron.status == 0);
  CHECK(nlohmann::json::parse(megatron.out).at("iteration_time_s") == j.at("iteration_time_s"));
  // More imbalance, a slower step.
  const ppsim_test::PpsimRun busy = moe_simulate(kMixtral + "--expert-parallel 8 --moe-imbalance 1.5 --json");
  REQUIRE(busy.status == 0);
  CHECK(nlohmann::json::parse(busy.out).at("iteration_time_s").get<double>() > j.at("iteration_time_s").get<double>());
}

TEST_CASE("ppsim simulate refuses expert parallelism Megatron would refuse, naming the option", "[cli]") {
  const struct {
    std::string args, reason;
  } cases[] = {
      {kMixtral + "--expert-parallel 3", "--expert-parallel 3: does not divide the 8 experts of mixtral-8x7b"},
      {"--model mixtral-8x7b --data-parallel 4 --expert-parallel 8",
       "--expert-parallel 8: EP x expert TP = 8 does not divide the 4 GPUs"},
      {"--model gpt-7b --expert-parallel 2", "--expert-parallel 2: gpt-7b has no experts (a dense model)"},
      {"--model gpt-7b --moe-imbalance 2", "--moe-imbalance: gpt-7b has no experts"},
      // Before: read as "the tensor-parallel size".
      {kMixtral + "--expert-parallel 8 --expert-tensor-parallel -2",
       "--expert-tensor-parallel -2: must be at least 1 (leave it out for the tensor-parallel size)"},
      // Before: the activations overflowed and the refusal blamed --micro-batch-size.
      {kMixtral + "--expert-parallel 8 --moe-imbalance 1e308",
       "--moe-imbalance 1e+308: above 4 (8 experts over top_k 2), where the busiest expert takes every token"},
      {kMixtral + "--tensor-parallel 2", "--tensor-parallel 2: a MoE model needs --sequence-parallel"},
      {kMixtral + "--expert-parallel 8 --expert-model-parallel-size 4",
       "--expert-parallel 8 and --expert-model-parallel-size 4 name one size: give one"},
  };
  for (const auto& c : cases) {
    const ppsim_test::PpsimRun run = moe_simulate(c.args);
    INFO(c.args << ": " << run.err);
    CHECK(run.status == 2);
    CHECK(run.one_error_line());
    CHECK(run.err.find(c.reason) != std::string::npos);
  }

  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("pipescope-moe-top-k-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << R"({"layers": 4, "hidden": 1024, "heads": 8, "seq": 2048, "vocab": 32000,
                            "num_experts": 8, "top_k": 9})";
  const ppsim_test::PpsimRun top_k = moe_simulate("--model " + file.string());
  std::filesystem::remove(file);
  CHECK(top_k.status == 2);
  CHECK(top_k.one_error_line());
  CHECK(top_k.err.find("top_k 9 is more than the 8 experts (num_experts)") != std::string::npos);
}

// A histogram that cannot come from a run is refused in one line naming --moe-routing: a file
// that is not there (before: exit 1, the program's error), every count 0 (before: read as
// balanced), an expert with more than one assignment a token (before: [1e300, 1, ...] predicted
// a step 6.5 times as long).
TEST_CASE("ppsim simulate refuses a routing histogram no run could give", "[cli]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pipescope-moe-routing-bad-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "zero.json") << "[0, 0, 0, 0, 0, 0, 0, 0]";
  std::ofstream(dir / "one-expert.json") << "[1e300, 1, 1, 1, 1, 1, 1, 1]";
  const struct {
    std::string file, reason;
  } cases[] = {
      {(dir / "missing.json").string(), "--moe-routing: cannot read"},
      {(dir / "zero.json").string(), "every expert's count is 0"},
      {(dir / "one-expert.json").string(),
       "--moe-routing: expert 0 has 1e+300 of the 1e+300 assignments, more than one a token"},
  };
  for (const auto& c : cases) {
    const ppsim_test::PpsimRun run = moe_simulate(kMixtral + "--expert-parallel 8 --moe-routing " + c.file);
    INFO(c.file << ": " << run.err);
    CHECK(run.status == 2);
    CHECK(run.one_error_line());
    CHECK(run.err.find(c.reason) != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

// --moe-routing reads tokens per expert; the busiest EP rank's share slows the step as
// --moe-imbalance of the same factor does (here 6 of a mean 2 over EP 8: 3).
TEST_CASE("ppsim simulate takes a measured routing histogram", "[cli]") {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("pipescope-moe-routing-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << R"({"expert_tokens": [4, 1, 1, 1, 1, 1, 1, 6]})";
  const ppsim_test::PpsimRun measured =
      moe_simulate(kMixtral + "--expert-parallel 8 --json --moe-routing " + file.string());
  const ppsim_test::PpsimRun factor = moe_simulate(kMixtral + "--expert-parallel 8 --json --moe-imbalance 3");
  const ppsim_test::PpsimRun both = moe_simulate(kMixtral + "--moe-imbalance 3 --moe-routing " + file.string());
  std::filesystem::remove(file);
  INFO(measured.err);
  REQUIRE(measured.status == 0);
  REQUIRE(factor.status == 0);
  CHECK(nlohmann::json::parse(measured.out).at("iteration_time_s").get<double>() ==
        Approx(nlohmann::json::parse(factor.out).at("iteration_time_s").get<double>()));
  CHECK(both.status == 2);
  CHECK(both.err.find("--moe-routing and --moe-imbalance both give the imbalance: give one") != std::string::npos);
}

// ppsim plan searches expert-parallel sizes: Mixtral 8x7B on 16 GPUs, T 1, pipelines 1, 2 and 4
// (data parallel 16, 8, 4) x EP 1, 3 and 8 = 9 configurations; EP 3 (not dividing 8 experts)
// three times and EP 8 over 4 data-parallel GPUs once are refused, with two distinct reasons.
TEST_CASE("ppsim plan searches expert parallelism and refuses what Megatron would", "[cli]") {
  const ppsim_test::PpsimRun run = ppsim_test::run_ppsim(
      "plan --model mixtral-8x7b --gpus 16 --global-batch 32 --schedules 1f1b --micro-batch-sizes 1 "
      "--tensor-parallel-sizes 1 --context-parallel-sizes 1 --recompute full --max-pipeline 4 "
      "--expert-parallel-sizes 1,3,8 --top 0 --quiet --format json");
  INFO(run.err);
  REQUIRE(run.status == 0);
  const nlohmann::json plan = nlohmann::json::parse(run.out);
  CHECK(plan.at("considered") == 9);
  CHECK(plan.at("refused") == 4);
  REQUIRE(plan.at("refusals").size() == 2);
  CHECK(plan.at("refusals").at(0).get<std::string>() ==
        "--expert-parallel 3: does not divide the 8 experts of mixtral-8x7b");
  std::set<int> searched;
  for (const nlohmann::json& row : plan.at("configurations")) searched.insert(row.at("expert_parallel").get<int>());
  CHECK_FALSE(searched.count(3));
}

// ppsim plan searches the experts' tensor parallelism too: Mixtral 8x7B on 16 GPUs, T 2 with
// sequence parallelism, pipelines 1, 2 and 4 (T x d = 16, 8, 4 GPUs a stage), EP 4 x expert TP
// 1, 2 and 16 = 9 configurations; expert TP 16 (above a node) three times and EP 4 x expert TP 2
// = 8 over a stage of 4 GPUs once are refused.
TEST_CASE("ppsim plan searches expert tensor parallelism", "[cli]") {
  const ppsim_test::PpsimRun run = ppsim_test::run_ppsim(
      "plan --model mixtral-8x7b --gpus 16 --global-batch 32 --schedules 1f1b --micro-batch-sizes 1 "
      "--tensor-parallel-sizes 2 --sequence-parallel on --context-parallel-sizes 1 --recompute full --max-pipeline 4 "
      "--expert-parallel-sizes 4 --expert-tensor-parallel-sizes 1,2,16 --top 0 --quiet --format json");
  INFO(run.err);
  REQUIRE(run.status == 0);
  const nlohmann::json plan = nlohmann::json::parse(run.out);
  CHECK(plan.at("considered") == 9);
  CHECK(plan.at("refused") == 4);
  REQUIRE(plan.at("refusals").size() == 2);
  CHECK(plan.at("refusals").at(1).get<std::string>() == "--expert-tensor-parallel 16: more than the 8 GPUs of a node");
  std::set<int> searched;
  for (const nlohmann::json& row : plan.at("configurations"))
    searched.insert(row.at("expert_tensor_parallel").get<int>());
  CHECK_FALSE(searched.count(16));
}
