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
// - --help lists the names; ppsim plan reads --global-batch-size as its --global-batch;
// - Megatron's model options (--num-layers, --hidden-size, --num-attention-heads, --vocab-size,
//   --seq-length, --swiglu, --group-query-attention --num-query-groups, ...) describe Llama 3 8B
//   and GPT 1.3B as their presets do, to the byte, with Megatron's defaults for what they leave
//   out; in simulate and plan; what does not describe a model is refused in one line;
// - --make-vocab-size-divisible-by 128 at TP 8 runs Llama 3 8B's 128,256 words as 129,024 (a
//   multiple of 1024), as Megatron pads them: the ranks' times and memory are those of a
//   129,024-word vocabulary, the model's parameter count its own; without it nothing changes;
//   0 is refused in one line.
#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>
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

TEST_CASE("Megatron's model options describe the model instead of --model, with Megatron's defaults", "[cli]") {
  // Llama 3 8B as Megatron's arguments give it: the preset's prediction, to the byte of its JSON.
  const std::string parallel =
      "--schedule 1f1b --tensor-parallel 2 --sequence-parallel --stages 2 "
      "--micro-batches 8 --data-parallel 2 --json";
  const ppsim_test::PpsimRun preset = ppsim_test::run_ppsim("simulate --model llama-3-8b " + parallel);
  REQUIRE(preset.status == 0);
  const ppsim_test::PpsimRun megatron = ppsim_test::run_ppsim(
      "simulate --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
      "--num-query-groups 8 --ffn-hidden-size 14336 --swiglu --untie-embeddings-and-output-weights "
      "--disable-bias-linear --hidden-dropout 0 --attention-dropout 0 --vocab-size 128256 --seq-length 8192 " +
      parallel);
  INFO(megatron.err);
  REQUIRE(megatron.status == 0);
  CHECK(megatron.out == preset.out);
  // Megatron's defaults: an FFN of 4h (4h x 2/3 rounded down to 64 with --swiglu), tied embeddings,
  // biases: GPT-style 24 layers of 2048 have gpt-1.3b's parameters (its attention fused, as
  // Megatron-Core's is, where the preset's is not).
  const ppsim_test::PpsimRun gpt = ppsim_test::run_ppsim(
      "simulate --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --vocab-size 50257 --seq-length 2048 "
      "--schedule 1f1b --stages 2 --micro-batches 4 --json");
  REQUIRE(gpt.status == 0);
  CHECK(gpt.out.find("\"parameters\":1311528960") != std::string::npos);  // gpt-1.3b's
  const std::string swiglu =
      "simulate --num-layers 2 --hidden-size 4096 --num-attention-heads 32 --vocab-size 1000 "
      "--seq-length 1024 --swiglu --schedule 1f1b --stages 2 --micro-batches 2 --json";
  const ppsim_test::PpsimRun defaulted = ppsim_test::run_ppsim(swiglu);
  REQUIRE(defaulted.status == 0);
  CHECK(defaulted.out == ppsim_test::run_ppsim(swiglu + " --ffn-hidden-size 10880").out);  // 4 x 4096 x 2/3 -> 10880
  const ppsim_test::PpsimRun planned = ppsim_test::run_ppsim(
      "plan --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --vocab-size 50257 "
      "--seq-length 2048 --gpus 8 --global-batch 32 --top 1 --quiet");
  CHECK(planned.status == 0);
  CHECK(planned.out.find("megatron-24x2048 on 8 x h100") != std::string::npos);
}

TEST_CASE("--make-vocab-size-divisible-by pads the embedding and the head as Megatron does", "[cli]") {
  const std::string model =
      "simulate --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
      "--num-query-groups 8 --ffn-hidden-size 14336 --swiglu --untie-embeddings-and-output-weights "
      "--disable-bias-linear --hidden-dropout 0 --attention-dropout 0 --seq-length 8192 "
      "--schedule 1f1b --tensor-parallel 8 --stages 2 --micro-batches 4 --json ";
  const ppsim_test::PpsimRun padded =
      ppsim_test::run_ppsim(model + "--vocab-size 128256 --make-vocab-size-divisible-by 128");
  const ppsim_test::PpsimRun wider = ppsim_test::run_ppsim(model + "--vocab-size 129024");
  const ppsim_test::PpsimRun as_given = ppsim_test::run_ppsim(model + "--vocab-size 128256");
  INFO(padded.err);
  REQUIRE(padded.status == 0);
  REQUIRE(wider.status == 0);
  REQUIRE(as_given.status == 0);
  const auto json = [](const ppsim_test::PpsimRun& run) { return nlohmann::json::parse(run.out); };
  CHECK(json(padded).at("iteration_time_s") == json(wider).at("iteration_time_s"));
  CHECK(json(padded).at("iteration_time_s") > json(as_given).at("iteration_time_s"));
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(json(padded).at("ranks").at(r).at("peak_memory_bytes") ==
          json(wider).at("ranks").at(r).at("peak_memory_bytes"));
  }
  CHECK(json(padded).at("parameters") == json(as_given).at("parameters"));  // the model's own count
  // At TP 1 a multiple of 128 already: nothing changes.
  const std::string tp1 = "simulate --model llama-3-8b --schedule 1f1b --stages 2 --micro-batches 4 --json";
  CHECK(ppsim_test::run_ppsim(tp1 + " --make-vocab-size-divisible-by 128").out == ppsim_test::run_ppsim(tp1).out);
  const ppsim_test::PpsimRun zero = ppsim_test::run_ppsim(tp1 + " --make-vocab-size-divisible-by 0");
  CHECK(zero.status == 2);
  CHECK(zero.err == "ppsim: error: --make-vocab-size-divisible-by must be at least 1, got 0\n");
}

TEST_CASE("Megatron's model options that do not describe a model are refused in one line", "[cli]") {
  const std::string shape = "simulate --num-layers 4 --hidden-size 256 --num-attention-heads 4 --vocab-size 1000 ";
  const std::pair<std::string, std::string> cases[] = {
      {"simulate --num-layers 4 --hidden-size 256 --vocab-size 1000 --seq-length 128",
       "--num-layers: Megatron's model options also need --num-attention-heads"},
      {shape, "--num-layers: Megatron's model options also need --seq-length"},
      {"simulate --model gpt-7b --num-layers 4", "--model and --num-layers both describe the model: give one"},
      {shape + "--seq-length 128 --num-query-groups 2",
       "--num-query-groups needs --group-query-attention, as Megatron reads it only with it"},
      {shape + "--seq-length 128 --kv-lora-rank 64", "need --multi-latent-attention"},
      {shape + "--seq-length 128 --num-experts 8 --moe-router-topk 9",
       "Megatron's model options: top_k 9 is more than the 8 experts (num_experts)"},
      {shape + "--seq-length 128 --hidden-dropout x", "--hidden-dropout 'x': must be a number >= 0"},
      {shape + "--seq-length 128 --num-experts 4 --moe-router-topk 1 --moe-layer-freq [0,1]",
       "Megatron's model options: model field 'moe_layer_freq' lists 2 layers of 4"},
  };
  for (const auto& [args, message] : cases) {
    const ppsim_test::PpsimRun run = ppsim_test::run_ppsim(args + " --schedule 1f1b --stages 2 --micro-batches 4");
    INFO(args << " -> " << run.err);
    CHECK(run.status == 2);
    CHECK(run.one_error_line());
    CHECK(run.err.find(message) != std::string::npos);
  }
  // --moe-layer-freq's list form, one entry a layer.
  const ppsim_test::PpsimRun listed =
      ppsim_test::run_ppsim(shape +
                            "--seq-length 128 --swiglu --num-experts 4 --moe-router-topk 1 --moe-layer-freq [0,1,0,1] "
                            "--schedule 1f1b --stages 2 --micro-batches 4");
  CHECK(listed.status == 0);
}
