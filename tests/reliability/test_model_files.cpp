// Issue 34, model files and the sizes made from them: integers beyond 32 bits, misspelt fields,
// sizes whose memory overflows 64 bits, options below their range. Scenario and expected (ppsim
// as a user runs it; each refusal one line naming the field or option, exit 2):
// - `hidden` 2^32 + 4096 and `layers` 2^32 + 1: refused naming the field and the limit 2^28
//   (before: read as 4096, and as 1 layer: "the model has 1 layers, too few for 4 stages");
// - `kv_head` and `ffn_hiden`: refused, naming the field and the known one meant (before: ignored,
//   the defaults planned); Megatron's mixture-of-experts fields: refused as not simulated; a field
//   given twice: refused (before: the last one taken);
// - a model whose parameters pass 2^50: refused naming its sizes (before: counts wrapped, "optimizer
//   time got -166.56");
// - --micro-batch-size 2000000000 on llama-70b and gpt-1.3b: refused naming the option and the
//   figure past 2^60 bytes (before: the activations wrapped to a peak that "fits");
// - --f-mem -2 (with --b-mem 1 --w-mem 1): refused (before: peaks of 0 B); --w-mem 1 likewise;
//   --max-pipeline -1: refused (before: read as no limit); --f-mem 2^62: refused naming the limit;
// - a sliding window with a right side, or a window list of another length than the layers:
//   refused naming the field; Megatron's and Hugging Face's windows one apart read as one, and
//   context parallelism with a window refused naming the option; likewise chunks without their
//   size, chunks and a window on every layer at once, and context parallelism with chunks;
// - context parallelism's exchange: an unknown one in ppsim plan's --cp-comm-types, both
//   --cp-comm-types and --cp-comm-type, --hierarchical-context-parallel-sizes without a2a+p2p,
//   with one size or a product that is not C, a2a+p2p without sizes; --make-vocab-size-divisible-by 0;
// - a hybrid model: a pattern of another length than the layers (no --trace file written), a symbol
//   outside M G * - E, Mamba widths past the parameter bound; context and tensor parallelism that
//   do not split Mamba's heads, naming the option.
#include <catch2/catch.hpp>

#include <filesystem>

#include "hostile_files.hpp"
#include "reliability_support.hpp"

using namespace reliability;

namespace {

const std::string kModelFileRun = "simulate --model m.json --gpu h100 --stages 4 --micro-batches 8 --json";

std::string model_file_with(const std::string& fields) {
  return "{\"layers\": 24, \"hidden\": 2048, \"heads\": 16, \"seq\": 2048, \"vocab\": 50257" + fields + "}";
}

// A model-size refusal: ppsim's one line, nothing simulated.
void check_model_refused(const CliRun& run, const std::vector<std::string>& parts) {
  check_refused(run, "ppsim", parts);
  CHECK(run.out.empty());
}

}  // namespace

TEST_CASE("model-file integers beyond the limit are refused, not cut to 32 bits", "[reliability][models]") {
  const auto dir = case_dir("models-wide-integers");
  write_text(dir / "m.json",
             "{\"layers\": 24, \"hidden\": 4294971392, \"heads\": 16, \"seq\": 2048, \"vocab\": 50257}");
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
                      {"m.json: model field 'hidden' is 4294971392, above the limit 268435456 (2^28)"});
  write_text(dir / "m.json",
             "{\"layers\": 4294967297, \"hidden\": 2048, \"heads\": 16, \"seq\": 2048, \"vocab\": 50257}");
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20), {"m.json: model field 'layers' is 4294967297"});
  write_text(dir / "m.json",
             "{\"layers\": 24, \"hidden\": 2048, \"heads\": 16, \"seq\": 2147483647, \"vocab\": 50257}");
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20), {"model field 'seq' is 2147483647"});
}

TEST_CASE("a misspelt model field is refused with the field it meant", "[reliability][models]") {
  const auto dir = case_dir("models-misspelt");
  write_text(dir / "m.json", model_file_with(", \"kv_head\": 4"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
                      {"unknown model field 'kv_head': did you mean 'kv_heads'?"});
  write_text(dir / "m.json", model_file_with(", \"ffn_hiden\": 8192"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
                      {"unknown model field 'ffn_hiden': did you mean 'ffn_hidden'?"});
  write_text(dir / "m.json", model_file_with(", \"num_experts\": 8"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20), {"top_k must be at least 1 with num_experts"});
  write_text(dir / "m.json", model_file_with(", \"num_expert\": 8, \"top_k\": 2"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
                      {"unknown model field 'num_expert': did you mean 'num_experts'?"});
  write_text(dir / "m.json", model_file_with(", \"kv_heads\": 4, \"ffn_hidden\": 8192"));
  const CliRun fine = run_cli(PPSIM_PATH, dir, kModelFileRun, 20);
  INFO(fine.err);
  CHECK(fine.status == 0);
}

TEST_CASE("a model field given twice is refused, not the last one taken", "[reliability][models]") {
  const auto dir = case_dir("models-duplicate-key");
  write_text(dir / "m.json", model_file_with(", \"hidden\": 4096"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
                      {"m.json: key 'hidden' appears twice in one object"});
}

TEST_CASE("a model of more than 2^50 parameters is refused naming its sizes", "[reliability][models]") {
  const auto dir = case_dir("models-too-many-parameters");
  write_text(dir / "m.json",
             "{\"layers\": 268435456, \"hidden\": 268435456, \"heads\": 16, \"seq\": 2048, \"vocab\": 50257}");
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
                      {"layers 268435456 x hidden 268435456", "beyond the limit of 2^50"});
}

TEST_CASE("a micro-batch whose memory passes 2^60 bytes is refused, not wrapped", "[reliability][models]") {
  const auto dir = case_dir("models-memory-overflow");
  for (const char* model : {"llama-70b", "gpt-1.3b"}) {
    INFO(model);
    check_model_refused(run_cli(PPSIM_PATH, dir,
                                std::string("simulate --model ") + model +
                                    " --gpu h100 --stages 4 --micro-batches 8 --micro-batch-size 2000000000",
                                20),
                        {"--micro-batch-size 2000000000", "beyond the limit of 2^60 bytes"});
  }
}

TEST_CASE("memory and size options out of their range are refused", "[reliability][models]") {
  const auto dir = case_dir("models-options");
  const std::string run = "simulate --schedule 1f1b --stages 2 --micro-batches 4 ";
  check_model_refused(run_cli(PPSIM_PATH, dir, run + "--f-mem -2 --b-mem 1 --w-mem 1", 20),
                      {"--f-mem -2", "give 0 or more"});
  check_model_refused(run_cli(PPSIM_PATH, dir, run + "--f-mem 0 --b-mem -1 --w-mem 1", 20),
                      {"--w-mem 1", "give 0 or less"});
  check_model_refused(
      run_cli(PPSIM_PATH, dir, run + "--f-mem 4611686018427387904 --b-mem 0 --w-mem -4611686018427387904", 20),
      {"--f-mem", "beyond the limit of 2^60 bytes"});
  check_model_refused(run_cli(PPSIM_PATH, dir, "plan --max-pipeline -1 -q", 20), {"--max-pipeline -1"});
}

TEST_CASE("context parallelism's exchange and Megatron's vocabulary padding out of their words are refused",
          "[reliability][models]") {
  const auto dir = case_dir("models-cp-exchange");
  const std::string plan = "plan --model llama-3-8b --gpus 16 --context-parallel-sizes 2 -q ";
  check_model_refused(run_cli(PPSIM_PATH, dir, plan + "--cp-comm-types p2p,ring", 20),
                      {"--cp-comm-types: 'ring'", "p2p, all_gather or a2a"});
  check_model_refused(run_cli(PPSIM_PATH, dir, plan + "--cp-comm-types a2a --cp-comm-type p2p", 20),
                      {"--cp-comm-types with --cp-comm-type p2p: give one"});
  const std::string run = "simulate --model llama-3-8b --stages 1 --micro-batches 4 --context-parallel 4 ";
  check_model_refused(run_cli(PPSIM_PATH, dir, run + "--hierarchical-context-parallel-sizes 2 2", 20),
                      {"--hierarchical-context-parallel-sizes 2 2", "only --cp-comm-type a2a+p2p takes it"});
  check_model_refused(
      run_cli(PPSIM_PATH, dir, run + "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 4", 20),
      {"--hierarchical-context-parallel-sizes 4", "give two sizes"});
  check_model_refused(
      run_cli(PPSIM_PATH, dir, run + "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 4", 20),
      {"--hierarchical-context-parallel-sizes 2 4", "2 x 4 is not --context-parallel 4"});
  check_model_refused(run_cli(PPSIM_PATH, dir, run + "--cp-comm-type a2a+p2p", 20),
                      {"--context-parallel 4 with --cp-comm-type a2a+p2p", "no all-to-all group size A"});
  check_model_refused(run_cli(PPSIM_PATH, dir, run + "--make-vocab-size-divisible-by 0", 20),
                      {"--make-vocab-size-divisible-by must be at least 1"});
}

TEST_CASE("two names of one model field that disagree are refused, not the last one taken", "[reliability][models]") {
  const auto dir = case_dir("models-alias-disagree");
  write_text(dir / "m.json", model_file_with(", \"mtp_num_layers\": 1, \"num_nextn_predict_layers\": 2"));
  check_model_refused(
      run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
      {"m.json: model fields 'mtp_num_layers' (1) and 'num_nextn_predict_layers' (2) are one field and disagree"});
  write_text(dir / "m.json", model_file_with(", \"num_experts\": 8, \"num_moe_experts\": 16, \"top_k\": 2"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20), {"'num_experts' (8) and 'num_moe_experts' (16)"});
  write_text(dir / "m.json", model_file_with(", \"num_experts\": 8, \"top_k\": 2, \"capacity_factor\": 1.0, "
                                             "\"moe_expert_capacity_factor\": 1.25"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
                      {"'capacity_factor' (1) and 'moe_expert_capacity_factor' (1.25)"});
  write_text(dir / "m.json",
             model_file_with(", \"num_experts\": 8, \"top_k\": 2, \"shared_experts\": 2, "
                             "\"shared_expert_ffn_hidden\": 1024, \"moe_shared_expert_intermediate_size\": 4096"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
                      {"'moe_shared_expert_intermediate_size' (4096, over 2 shared experts) and "
                       "'shared_expert_ffn_hidden' (1024) disagree"});
  // Both names with one value: read as one field.
  write_text(dir / "m.json", model_file_with(", \"mtp_num_layers\": 1, \"num_nextn_predict_layers\": 1"));
  const CliRun same = run_cli(PPSIM_PATH, dir, kModelFileRun, 20);
  INFO(same.err);
  CHECK(same.status == 0);
  // A negative latent-attention width (before: read as absent, ordinary attention planned).
  write_text(dir / "m.json", model_file_with(", \"kv_lora_rank\": -5"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
                      {"m.json: model field 'kv_lora_rank' is -5: it must be >= 0"});
  write_text(dir / "m.json", model_file_with(", \"mtp_num_layers\": -1"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20), {"m.json: mtp_num_layers must be >= 0"});
}

TEST_CASE("a layout that leaves out or misplaces the model's MTP layers is refused naming the stage",
          "[reliability][models]") {
  const auto dir = case_dir("models-mtp-layout");
  write_text(dir / "m.json", model_file_with(", \"mtp_num_layers\": 1"));
  const std::string run =
      "simulate --model m.json --gpu h100 --stages 2 --micro-batches 4 --json --pipeline-model-parallel-layout ";
  check_model_refused(run_cli(PPSIM_PATH, dir, run + "'Et*12|t*12L'", 20),
                      {"stage 1 (t*12L, rank 1, chunk 0) holds 0 multi-token prediction layer(s) m, the model has 1"});
  check_model_refused(run_cli(PPSIM_PATH, dir, run + "'Et*12m|t*12L'", 20),
                      {"stage 0 (Et*12m, rank 0, chunk 0) holds multi-token"});
  check_model_refused(run_cli(PPSIM_PATH, dir, run + "'Et*12|t*11mtL'", 20),
                      {"stage 1: a decoder layer t after a multi-token"});
  const CliRun named = run_cli(PPSIM_PATH, dir, run + "'Et*12|t*12mL'", 20);
  INFO(named.err);
  CHECK(named.status == 0);
}

TEST_CASE("--recompute-modules that name no module, a module the model lacks, or contradict --recompute are refused",
          "[reliability][models]") {
  const auto dir = case_dir("models-recompute-modules");
  const std::string run =
      "simulate --model mixtral-8x7b --gpu h100 --stages 4 --micro-batches 8 --expert-parallel 8 --data-parallel 8 "
      "--json ";
  check_model_refused(run_cli(PPSIM_PATH, dir, run + "--recompute-modules moe_act,bogus", 20),
                      {"--recompute-modules: 'bogus' is not a module (known: core_attn, moe_act"});
  check_model_refused(run_cli(PPSIM_PATH, dir, run + "--recompute-modules mla_up_proj", 20),
                      {"--recompute-modules", "mla_up_proj"});
  check_model_refused(run_cli(PPSIM_PATH, dir, run + "--recompute-modules moe_act --recompute", 20),
                      {"--recompute-modules: selective recomputation's modules, not with --recompute"});
  check_model_refused(
      run_cli(PPSIM_PATH, dir,
              "simulate --model llama-70b --gpu h100 --stages 4 --micro-batches 8 --json --recompute-modules moe_act",
              20),
      {"--recompute-modules moe_act: llama-70b has no experts (num_experts)"});
  check_model_refused(
      run_cli(PPSIM_PATH, dir,
              "plan --model llama-70b --gpus 64 --global-batch 64 --recompute none --recompute-modules core_attn", 20),
      {"--recompute-modules core_attn"});
}

TEST_CASE("an expert imbalance beyond every token on one expert is refused naming it", "[reliability][models]") {
  const auto dir = case_dir("models-moe-imbalance");
  check_model_refused(run_cli(PPSIM_PATH, dir,
                              "simulate --model mixtral-8x7b --gpu h100 --stages 2 --micro-batches 4 --data-parallel 8 "
                              "--expert-parallel 8 --json --moe-imbalance 1e308",
                              20),
                      {"--moe-imbalance 1e+308: above 4 (8 experts over top_k 2)"});
}

TEST_CASE("a sliding window that does not describe the model is refused through ppsim, naming the field",
          "[reliability][models]") {
  const auto dir = case_dir("models-window");
  write_text(dir / "m.json", model_file_with(", \"flash_attention\": true, \"window_size\": [127, 3]"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
                      {"m.json: model field 'window_size' is [127,3]: its right side must be 0"});
  write_text(dir / "m.json", model_file_with(", \"flash_attention\": true, \"window_size\": 127, "
                                             "\"window_attn_skip_freq\": [1, 0]"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
                      {"m.json: the layers' attention pattern has 2 entries for 24 layers"});
  // Hugging Face's span (the query included) and Megatron's keys before the query, one apart: one
  // field; the run simulates, and context parallelism with the window is refused naming the option.
  write_text(dir / "m.json", model_file_with(", \"flash_attention\": true, \"window_size\": 127, "
                                             "\"sliding_window\": 128, \"window_attn_skip_freq\": 2"));
  const CliRun windowed = run_cli(PPSIM_PATH, dir, kModelFileRun, 20);
  INFO(windowed.err);
  CHECK(windowed.status == 0);
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun + " --context-parallel 2", 20),
                      {"--context-parallel 2", "sliding-window attention (window_size 127)"});
}

TEST_CASE("attention chunks that do not describe the model are refused through ppsim, naming the field",
          "[reliability][models]") {
  const auto dir = case_dir("models-chunks");
  write_text(dir / "m.json", model_file_with(", \"flash_attention\": true, \"nope_layer_interval\": 4"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
                      {"m.json: chunked layers (nope_layer_interval or layer_types) need 'attention_chunk_size'"});
  write_text(dir / "m.json",
             model_file_with(", \"flash_attention\": true, \"attention_chunk_size\": 512, \"sliding_window\": 128"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
                      {"'window_size' and 'attention_chunk_size' both limit every layer's attention"});
  // Chunks of 512 in a sequence of 2048 in 3 layers of 4: the run simulates, context parallelism
  // with them is refused naming the option.
  write_text(dir / "m.json", model_file_with(", \"flash_attention\": true, \"attention_chunk_size\": 512, "
                                             "\"no_rope_layer_interval\": 4"));
  const CliRun chunked = run_cli(PPSIM_PATH, dir, kModelFileRun, 20);
  INFO(chunked.err);
  CHECK(chunked.status == 0);
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun + " --context-parallel 2", 20),
                      {"--context-parallel 2", "chunked attention (attention_chunk_size 512)"});
}

TEST_CASE(
    "a Hugging Face config or Megatron's model options that do not describe a model are refused through "
    "ppsim",
    "[reliability][models]") {
  const auto dir = case_dir("models-hugging-face");
  const std::string config = R"({"model_type": "llama", "num_hidden_layers": 24, "hidden_size": 2048,
      "num_attention_heads": 16, "vocab_size": 50257, "max_position_embeddings": 4096)";
  write_text(dir / "m.json", config + "}");
  check_model_refused(
      run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
      {"m.json: a Hugging Face config does not say the sequence length to train at", "give --seq-length"});
  const CliRun read = run_cli(PPSIM_PATH, dir, kModelFileRun + " --seq-length 2048", 20);
  INFO(read.err);
  CHECK(read.status == 0);
  write_text(dir / "m.json", config + R"(, "num_key_value_heads": "8"})");
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun + " --seq-length 2048", 20),
                      {"m.json: Hugging Face config field 'num_key_value_heads' is \"8\": it must be an integer"});
  write_text(dir / "m.json", R"({"model_type": "deepseek_v32", "num_hidden_layers": 4})");
  check_model_refused(
      run_cli(PPSIM_PATH, dir, kModelFileRun + " --seq-length 2048", 20),
      {"m.json: Hugging Face config field 'model_type' is 'deepseek_v32', which pipescope does not read"});
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun + " --seq-length 0", 20),
                      {"--seq-length is 0: it must be from 1 to 2^28 tokens"});
  check_model_refused(
      run_cli(PPSIM_PATH, dir,
              "simulate --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --vocab-size 50257 --stages 4 "
              "--micro-batches 8",
              20),
      {"--num-layers: Megatron's model options also need --seq-length"});
}

TEST_CASE("a hybrid model that does not describe its layers is refused through ppsim, naming the field",
          "[reliability][models]") {
  const auto dir = case_dir("models-hybrid");
  const std::string layers24 = std::string(", \"flash_attention\": true, \"hybrid_override_pattern\": \"") + [] {
    std::string p;
    for (int i = 0; i < 12; ++i) p += "M-";
    return p;
  }() + "\"";
  // A pattern of another length than the layers, a symbol outside M G * - E.
  write_text(dir / "m.json", model_file_with(", \"hybrid_override_pattern\": \"M-M*\""));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun + " --trace t.json", 20),
                      {"m.json: model field 'hybrid_override_pattern' has 4 layers, 'layers' says 24"});
  CHECK(!std::filesystem::exists(dir / "t.json"));
  write_text(dir / "m.json",
             model_file_with(", \"hybrid_override_pattern\": \"M-X*M-M-M-M-M-M-M-M-M-M-M-M-M-M-M-M-M-M-M-M-M-\""));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20),
                      {"m.json: model field 'hybrid_override_pattern' has 'X' at position 3"});
  // Mamba widths beyond every model: refused by the parameter bound, not wrapped.
  write_text(dir / "m.json",
             model_file_with(layers24 + ", \"mamba_num_heads\": 268435456, \"mamba_head_dim\": 268435456, "
                                        "\"mamba_num_groups\": 1"));
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun, 20), {"beyond the limit of 2^50"});
  // The run simulates; tensor and context parallelism that do not split Mamba's heads are refused
  // naming the option.
  write_text(dir / "m.json", model_file_with(layers24));
  const CliRun hybrid = run_cli(PPSIM_PATH, dir, kModelFileRun, 20);
  INFO(hybrid.err);
  CHECK(hybrid.status == 0);
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun + " --context-parallel 128 --seq-length 4096", 20),
                      {"--context-parallel 128: does not divide the 64 Mamba heads"});
  check_model_refused(run_cli(PPSIM_PATH, dir, kModelFileRun + " --tensor-parallel 16", 20), {"--tensor-parallel 16"});
}
