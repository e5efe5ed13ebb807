// Megatron's names for ppsim simulate's sizes (sim/cli/megatron_size_names.cpp), through the real
// binary:
// - Llama 3 8B, interleaved 1F1B, as a Megatron command line gives it
//   (--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
//   --virtual-pipeline-model-parallel-size 2 --context-parallel-size 2 --global-batch-size 64
//   with --micro-batch-size 2 --data-parallel 2: 16 micro-batches) predicts what pipescope's
//   names predict, to the byte of its JSON; `--name=value` is read too;
// - a size under both names is taken when both agree, refused naming both when they do not;
// - a global batch that micro-batch size x data parallelism does not divide, or that disagrees
//   with --micro-batches, or a size that is no whole number: exit 2, one line naming the option,
//   no --trace file written;
// - --help lists the names; ppsim plan reads --global-batch-size as its --global-batch.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "ppsim_run.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kBase = "simulate --model llama-3-8b --schedule interleaved-1f1b --sequence-parallel --json ";

}  // namespace

TEST_CASE("ppsim simulate reads Megatron's names for its sizes", "[cli]") {
  const ppsim_test::PpsimRun ours = ppsim_test::run_ppsim(
      kBase +
      "--tensor-parallel 2 --stages 2 --chunks 2 --context-parallel 2 --micro-batch-size 2 --data-parallel 2 "
      "--micro-batches 16");
  REQUIRE(ours.status == 0);
  const ppsim_test::PpsimRun megatrons =
      ppsim_test::run_ppsim(kBase +
                            "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                            "--virtual-pipeline-model-parallel-size 2 --context-parallel-size=2 --micro-batch-size 2 "
                            "--data-parallel 2 --global-batch-size 64");
  INFO(megatrons.err);
  CHECK(megatrons.status == 0);
  CHECK(megatrons.out == ours.out);
  // Both names, one size: taken.
  const ppsim_test::PpsimRun both = ppsim_test::run_ppsim(
      kBase +
      "--tensor-parallel 2 --tensor-model-parallel-size 2 --stages 2 --chunks 2 --context-parallel 2 "
      "--micro-batch-size 2 --data-parallel 2 --micro-batches 16 --global-batch-size 64");
  CHECK(both.status == 0);
  CHECK(both.out == ours.out);
  const ppsim_test::PpsimRun help = ppsim_test::run_ppsim("simulate --help");
  for (const char* name : {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
                           "--virtual-pipeline-model-parallel-size", "--global-batch-size"})
    CHECK(help.out.find(name) != std::string::npos);
}

TEST_CASE("ppsim simulate refuses Megatron's sizes that disagree, in one line naming them", "[cli]") {
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"--stages 4 --pipeline-model-parallel-size 2", "--stages 4 and --pipeline-model-parallel-size 2 name one size"},
      {"--tensor-model-parallel-size two", "--tensor-model-parallel-size 'two': must be a whole number >= 1"},
      {"--context-parallel-size 0", "--context-parallel-size '0': must be a whole number >= 1"},
      {"--data-parallel 3 --global-batch-size 64",
       "--global-batch-size 64: not a whole number of micro-batches of 3 samples"},
      {"--micro-batches 8 --global-batch-size 64", "--micro-batches 8 and --global-batch-size 64 (= 64 micro-batches"},
      {"--global-batch-size 8 --global-batch-size 16", "--global-batch-size is given twice"},
  };
  const fs::path dir = fs::temp_directory_path() / "pipescope-megatron-size-names";
  fs::create_directories(dir);
  for (const Case& c : cases) {
    const ppsim_test::PpsimRun run = ppsim_test::run_ppsim("simulate --model llama-3-8b --trace t.json " + c.args, dir);
    INFO(c.args << "\n" << run.err);
    CHECK(run.status == 2);
    CHECK(run.one_error_line());
    CHECK(run.err.find(c.message) != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "t.json"));
  }
  fs::remove_all(dir);
}

TEST_CASE("ppsim plan reads --global-batch-size as --global-batch", "[cli]") {
  const std::string plan = "plan --model gpt-1.3b --gpus 8 --quiet --top 2 ";
  const ppsim_test::PpsimRun ours = ppsim_test::run_ppsim(plan + "--global-batch 16");
  REQUIRE(ours.status == 0);
  const ppsim_test::PpsimRun megatrons = ppsim_test::run_ppsim(plan + "--global-batch-size 16");
  CHECK(megatrons.status == 0);
  CHECK(megatrons.out == ours.out);
  const ppsim_test::PpsimRun both = ppsim_test::run_ppsim(plan + "--global-batch 32 --global-batch-size 16");
  INFO(both.err);
  CHECK(both.status == 2);
  CHECK(both.one_error_line());
  CHECK(both.err.find("--global-batch 32 and --global-batch-size 16 name one size") != std::string::npos);
  CHECK(ppsim_test::run_ppsim("plan --help").out.find("--global-batch-size") != std::string::npos);
}
