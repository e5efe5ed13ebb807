// A Hugging Face config.json read as a model (sim/src/hugging_face_config.cpp), from the Hub's own
// files (tests/sim/data/hugging_face/, sources in its README):
// - each file gives the model its preset was written from, field by field and layer by layer
//   (which layers carry experts, which attend within a window or a chunk): Llama 3.1 8B, Mixtral
//   8x7B, Qwen3-30B-A3B and 235B-A22B, DeepSeek-V3 (its MTP layer as the file says), GPT-OSS 120B,
//   Llama 4 Maverick (a text_config inside a multimodal one);
// - the others' parameters are their published totals: Mistral 7B (every layer windowed), Qwen2
//   57B-A14B (a shared expert), Kimi K2 (DeepSeek-V3's architecture, 1.03 T), GLM-4.5-Air (96 heads
//   of 128 over a hidden of 4096), MiniMax-M2.5; Kimi K2.5's text_config is Kimi K2;
// - Qwen3-VL's language models (a text_config whose head's tying the outer config says) are
//   Qwen3's: the 30B-A3B's is the qwen3-30b-a3b preset, the 32B's has Qwen3-32B's published 32.8 B;
//   MiMo-7B is Qwen2's layers (biases) with the one MTP layer its file names;
// - a model's folder (a Hub snapshot) is read for its config.json;
// - the training sequence is --seq-length's: without it a config is refused, naming the option
//   and the longest context the file gives; with it a preset or a model file trains at that length;
// - refused in one line naming the file and the config's field: a model_type pipescope does not
//   read, a field of the wrong type, a multimodal config without its text_config, Llama 4's
//   lists that do not describe its layers;
// - Megatron's list form of moe_layer_freq in a pipescope model file (what a config's dense layers
//   become), and its refusals; a model file's fields under Megatron-Core's TransformerConfig names;
// - through the real ppsim binary: simulate and plan take a config with --seq-length, refuse it
//   without in one line, and refuse --seq-length beside --profile.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/model.hpp"
#include "ppsim_run.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

const std::filesystem::path kConfigs = std::filesystem::path(PIPESCOPE_SOURCE_DIR) / "tests/sim/data/hugging_face";

std::string config_path(const std::string& name) { return (kConfigs / (name + ".json")).string(); }

ModelSpec config(const std::string& name, int seq) { return resolve_model(config_path(name), seq); }

// What reading `text` as a config at 4096 tokens says: its refusal, or "accepted".
std::string refusal(const std::string& text, std::optional<int> seq = 4096) {
  try {
    parse_model_json(text, "config.json", seq);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "accepted";
}

// Every field that prices a layer, and each layer's kind, the same.
void require_same_model(const ModelSpec& read, const ModelSpec& preset) {
  CHECK(read.layers == preset.layers);
  CHECK(read.hidden == preset.hidden);
  CHECK(read.heads == preset.heads);
  CHECK(read.kv_heads_or_heads() == preset.kv_heads_or_heads());
  CHECK(read.head_dim_or_default() == preset.head_dim_or_default());
  CHECK(read.ffn_or_default() == preset.ffn_or_default());
  CHECK(read.gated_mlp == preset.gated_mlp);
  CHECK(read.vocab == preset.vocab);
  CHECK(read.seq == preset.seq);
  CHECK(read.tied_embeddings == preset.tied_embeddings);
  CHECK(read.flash_attention == preset.flash_attention);
  CHECK(read.has_biases() == preset.has_biases());
  CHECK(read.has_dropout() == preset.has_dropout());
  CHECK(read.q_lora_rank == preset.q_lora_rank);
  CHECK(read.kv_lora_rank == preset.kv_lora_rank);
  CHECK(read.qk_head_dim == preset.qk_head_dim);
  CHECK(read.qk_pos_emb_head_dim == preset.qk_pos_emb_head_dim);
  CHECK(read.v_head_dim == preset.v_head_dim);
  CHECK(read.num_experts == preset.num_experts);
  CHECK(read.top_k == preset.top_k);
  CHECK(read.moe_ffn_or_default() == preset.moe_ffn_or_default());
  CHECK(read.shared_expert_width() == preset.shared_expert_width());
  CHECK(read.capacity_factor == preset.capacity_factor);
  CHECK(read.window_size == preset.window_size);
  CHECK(read.attention_chunk_size == preset.attention_chunk_size);
  for (int i = 0; i < preset.layers; ++i) {
    INFO("layer " << i);
    CHECK(read.is_moe_layer(i) == preset.is_moe_layer(i));
    CHECK(read.attention_span(i) == preset.attention_span(i));
  }
  CHECK(read.total_parameters() == preset.total_parameters());
  CHECK(read.active_parameters() == preset.active_parameters());
}

}  // namespace

TEST_CASE("a Hugging Face config gives the model its preset was written from", "[model][hugging_face]") {
  const std::pair<const char*, const char*> pairs[] = {
      {"meta-llama__Llama-3.1-8B", "llama-3-8b"}, {"mistralai__Mixtral-8x7B-v0.1", "mixtral-8x7b"},
      {"Qwen__Qwen3-30B-A3B", "qwen3-30b-a3b"},   {"Qwen__Qwen3-235B-A22B", "qwen3-235b-a22b"},
      {"openai__gpt-oss-120b", "gpt-oss-120b"},   {"meta-llama__Llama-4-Maverick-17B-128E-Instruct", "llama4-maverick"},
  };
  for (const auto& [file, preset_name] : pairs) {
    INFO(file);
    const ModelSpec preset = resolve_model(preset_name);
    require_same_model(config(file, preset.seq), preset);
  }
}

TEST_CASE("DeepSeek-V3's config is the preset with the MTP layer its file names", "[model][hugging_face]") {
  const ModelSpec read = config("deepseek-ai__DeepSeek-V3", 4096);
  CHECK(read.mtp_num_layers == 1);  // num_nextn_predict_layers, as DeepSeek trained it
  ModelSpec without_mtp = read;
  without_mtp.mtp_num_layers = 0;
  require_same_model(without_mtp, resolve_model("deepseek-v3"));
  // 671 B without the MTP module, as the report counts (the preset's test pins that figure).
  CHECK(read.total_parameters() > without_mtp.total_parameters());
}

TEST_CASE("Hugging Face configs of models without a preset come to their published totals", "[model][hugging_face]") {
  // Mistral 7B: 7.24 B; every layer attends within its sliding window of 4096.
  const ModelSpec mistral = config("mistralai__Mistral-7B-v0.1", 8192);
  CHECK(mistral.total_parameters() == Approx(7.24e9).epsilon(0.002));
  CHECK(mistral.window_size == 4095);
  CHECK(mistral.layers_with(AttentionSpan::window) == 32);
  // Qwen2-57B-A14B: 64 experts of 2560, 8 a token, and a shared expert of 20480; its
  // sliding_window is not used (use_sliding_window false). Qwen's card: 57 B, 14 B active.
  const ModelSpec qwen2 = config("Qwen__Qwen2-57B-A14B", 4096);
  CHECK(qwen2.shared_experts == 1);
  CHECK(qwen2.shared_expert_width() == 20480);
  CHECK(qwen2.moe_layers() == 28);
  CHECK(qwen2.window_size == -1);
  CHECK(qwen2.total_parameters() == Approx(57.4e9).epsilon(0.005));
  CHECK(qwen2.active_parameters() == Approx(14.2e9).epsilon(0.01));
  // Kimi K2: DeepSeek-V3's layers with 384 experts and 64 heads, the first layer dense: 1.03 T, 32 B active.
  // Kimi K2.5 wraps the same language model in a multimodal config.
  const ModelSpec kimi = config("moonshotai__Kimi-K2-Instruct", 4096);
  require_same_model(config("moonshotai__Kimi-K2.5", 4096), kimi);
  CHECK(kimi.multi_latent_attention());
  CHECK(kimi.moe_layers() == 60);
  CHECK(kimi.total_parameters() == Approx(1.026e12).epsilon(0.002));
  CHECK(kimi.active_parameters() == Approx(32.9e9).epsilon(0.01));
}

TEST_CASE("Qwen3-VL's language models are Qwen3's, and MiMo's Qwen2's with its MTP layer", "[model][hugging_face]") {
  const ModelSpec preset = resolve_model("qwen3-30b-a3b");
  require_same_model(config("Qwen__Qwen3-VL-30B-A3B-Instruct", preset.seq), preset);
  // Qwen3-32B's card: 32.8 B, 31.2 B without the embeddings (the head untied, as the outer
  // config says; the text_config is silent).
  const ModelSpec dense = config("Qwen__Qwen3-VL-32B-Instruct", 4096);
  CHECK_FALSE(dense.tied_embeddings);
  CHECK(dense.total_parameters() == Approx(32.8e9).epsilon(0.003));
  CHECK(dense.total_parameters() - 2.0 * 151936 * 5120 == Approx(31.2e9).epsilon(0.003));
  // MiMo-7B-Base: the same file read as Qwen2's is the model without its MTP layer.
  const ModelSpec mimo = config("XiaomiMiMo__MiMo-7B-Base", 4096);
  CHECK(mimo.mtp_num_layers == 1);
  CHECK(mimo.has_biases());
  std::ifstream in(config_path("XiaomiMiMo__MiMo-7B-Base"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string type = R"("model_type": "mimo")";
  REQUIRE(text.find(type) != std::string::npos);
  text.replace(text.find(type), type.size(), R"("model_type": "qwen2")");
  ModelSpec without_mtp = mimo;
  without_mtp.mtp_num_layers = 0;
  require_same_model(without_mtp, parse_model_json(text, "qwen2.json", 4096));
  CHECK(mimo.total_parameters() > without_mtp.total_parameters());
}

TEST_CASE("GLM-4.5's and MiniMax-M2's configs: DeepSeek's and Mixtral's names, heads wider than hidden / heads",
          "[model][hugging_face]") {
  // GLM-4.5-Air's config (zai-org/GLM-4.5-Air): 96 heads of 128 over a hidden of 4096, 128
  // experts of 1408 and a shared one from the second layer on, ordinary (not latent) attention, an
  // MTP layer. Zhipu's card: 106 B, 12 B active, without the MTP layer (the checkpoint's 110 B has
  // it) and, for the active count, without the embeddings.
  const ModelSpec air = parse_model_json(R"({"architectures": ["Glm4MoeForCausalLM"], "attention_bias": true,
      "first_k_dense_replace": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
      "intermediate_size": 10944, "max_position_embeddings": 131072, "model_type": "glm4_moe",
      "moe_intermediate_size": 1408, "n_group": 1, "n_routed_experts": 128, "n_shared_experts": 1,
      "norm_topk_prob": true, "num_attention_heads": 96, "num_experts_per_tok": 8, "num_hidden_layers": 46,
      "num_key_value_heads": 8, "num_nextn_predict_layers": 1, "partial_rotary_factor": 0.5,
      "tie_word_embeddings": false, "vocab_size": 151552})",
                                         "config.json", 4096);
  CHECK_FALSE(air.multi_latent_attention());
  CHECK(air.head_dim_or_default() == 128);
  CHECK(air.attention_width() == 96 * 128);
  CHECK(air.moe_layers() == 45);
  CHECK(air.mtp_num_layers == 1);
  CHECK(air.total_parameters() == Approx(109.2e9).epsilon(0.002));
  ModelSpec air_without_mtp = air;
  air_without_mtp.mtp_num_layers = 0;
  const double embeddings = 2.0 * air.embedding_parameters();
  CHECK(air_without_mtp.total_parameters() == Approx(106e9).epsilon(0.01));
  CHECK(air_without_mtp.active_parameters() - embeddings == Approx(12e9).epsilon(0.02));
  // MiniMax-M2.5: 256 experts of 1536 in every layer, 8 a token, 48 heads of 128 over 3072.
  // MiniMax's card: 229 B, 10 B active (without the embeddings).
  const ModelSpec minimax = config("MiniMaxAI__MiniMax-M2.5", 4096);
  CHECK(minimax.moe_layers() == 62);
  CHECK(minimax.window_size == -1);
  CHECK(minimax.total_parameters() == Approx(229e9).epsilon(0.01));
  CHECK(minimax.active_parameters() - 2.0 * minimax.embedding_parameters() == Approx(10e9).epsilon(0.03));
}

TEST_CASE("a model's folder is read for its config.json, named after the folder", "[model][hugging_face]") {
  const auto folder = std::filesystem::temp_directory_path() / "pipescope-hf-folder-test" / "Qwen3-30B-A3B";
  std::filesystem::create_directories(folder);
  std::filesystem::copy_file(config_path("Qwen__Qwen3-30B-A3B"), folder / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  const ModelSpec from_folder = resolve_model(folder.string(), 4096);
  CHECK(from_folder.name == "Qwen3-30B-A3B");
  CHECK(from_folder.total_parameters() == resolve_model("qwen3-30b-a3b").total_parameters());
  std::filesystem::remove(folder / "config.json");
  CHECK_THROWS_WITH(resolve_model(folder.string(), 4096),
                    "--model: " + folder.string() + " is a folder without a config.json (a Hugging Face model's)");
  std::filesystem::remove_all(folder.parent_path());
}

TEST_CASE("OLMoE's, Pythia's and Phi-3's configs come to their published totals", "[model][hugging_face]") {
  // allenai/OLMoE-1B-7B-0924: 64 experts of 1024 in every layer, 8 a token: 6.9 B, 1.3 B active.
  const ModelSpec olmoe = parse_model_json(R"({"model_type": "olmoe", "num_hidden_layers": 16, "hidden_size": 2048,
      "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 1024, "num_experts": 64,
      "num_experts_per_tok": 8, "vocab_size": 50304, "tie_word_embeddings": false, "attention_bias": false})",
                                           "config.json", 4096);
  CHECK(olmoe.moe_layers() == 16);
  CHECK(olmoe.total_parameters() == Approx(6.92e9).epsilon(0.01));
  CHECK(olmoe.active_parameters() == Approx(1.28e9).epsilon(0.02));
  // EleutherAI/pythia-6.9b: GPT-NeoX's GELU MLP with biases, untied: 6,857,302,016 parameters.
  const ModelSpec pythia = parse_model_json(R"({"model_type": "gpt_neox", "num_hidden_layers": 32,
      "hidden_size": 4096, "num_attention_heads": 32, "intermediate_size": 16384, "vocab_size": 50432,
      "attention_dropout": 0.0, "hidden_dropout": 0.0, "tie_word_embeddings": false})",
                                            "config.json", 2048);
  CHECK_FALSE(pythia.gated_mlp);
  CHECK(pythia.has_biases());
  CHECK_FALSE(pythia.has_dropout());
  CHECK(pythia.total_parameters() == Approx(6'857'302'016.0).epsilon(0.001));
  // microsoft/Phi-3-mini-4k-instruct: gated, untied, every layer within a window of 2047: 3.82 B.
  const ModelSpec phi3 = parse_model_json(R"({"model_type": "phi3", "num_hidden_layers": 32, "hidden_size": 3072,
      "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 8192, "vocab_size": 32064,
      "sliding_window": 2047, "tie_word_embeddings": false})",
                                          "config.json", 4096);
  CHECK(phi3.layers_with(AttentionSpan::window) == 32);
  CHECK(phi3.window_size == 2046);
  CHECK(phi3.total_parameters() == Approx(3.82e9).epsilon(0.005));
}

TEST_CASE("a Hugging Face config trains at --seq-length's sequence, and needs it", "[model][hugging_face]") {
  CHECK(config("meta-llama__Llama-3.1-8B", 16384).seq == 16384);
  const std::string no_seq = refusal(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 131072})",
                                     std::nullopt);
  CHECK(no_seq ==
        "config.json: a Hugging Face config does not say the sequence length to train at "
        "(max_position_embeddings 131072 is the longest context the model supports): give --seq-length");
  // A preset or a model file trains at the length given, as Megatron's --seq-length overrides a recipe.
  CHECK(resolve_model("llama-3-8b", 2048).seq == 2048);
  CHECK(parse_model_json(R"({"layers": 2, "hidden": 64, "heads": 4, "seq": 128, "vocab": 100})", "m.json", 512).seq ==
        512);
  CHECK_THROWS_WITH(resolve_model("llama-3-8b", 0), "--seq-length is 0: it must be from 1 to 2^28 tokens");
}

TEST_CASE("a Hugging Face config that does not describe a model pipescope prices is refused naming the field",
          "[model][hugging_face]") {
  const std::string layers =
      R"("num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100)";
  CHECK(refusal(R"({"model_type": "deepseek_v32", )" + layers + "}")
            .rfind("config.json: Hugging Face config field 'model_type' is 'deepseek_v32', which pipescope does not "
                   "read (it "
                   "reads llama, mistral,",
                   0) == 0);
  CHECK(refusal(R"({"model_type": "nemotron_h", )" + layers + "}") ==
        "config.json: Hugging Face config field 'hybrid_override_pattern' is null: it must be a string, one symbol a "
        "layer (M Mamba, * attention, - MLP, E experts)");
  CHECK(refusal(R"({"model_type": 7, )" + layers + "}") ==
        "config.json: Hugging Face config field 'model_type' must be a string");
  CHECK(refusal(R"({"model_type": "llama", "num_hidden_layers": "2", "hidden_size": 64, "num_attention_heads": 4,
      "vocab_size": 100})") ==
        "config.json: Hugging Face config field 'num_hidden_layers' is \"2\": it must be an integer from 0 to 2^28");
  CHECK(refusal(R"({"model_type": "gemma2", "num_hidden_layers": 100000, "hidden_size": 64, "num_attention_heads": 4,
      "vocab_size": 100, "sliding_window": 8})") ==
        "config.json: Hugging Face config field 'num_hidden_layers' is 100000: it must be at most 65536 layers");
  CHECK(refusal(R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100})") ==
        "config.json: Hugging Face config field 'num_hidden_layers' is missing");
  CHECK(refusal(R"({"model_type": "llama", "tie_word_embeddings": "no", )" + layers + "}") ==
        "config.json: Hugging Face config field 'tie_word_embeddings' is \"no\": it must be true or false");
  CHECK(refusal(R"({"model_type": "llama4", )" + layers + "}") ==
        "config.json: Hugging Face config of model_type 'llama4' has no 'text_config' object");
  // Inside a text_config the field is named with its path.
  CHECK(refusal(R"({"model_type": "llama4", "text_config": {"model_type": "llama4_text", "num_hidden_layers": 2,
      "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100, "num_local_experts": 4,
      "num_experts_per_tok": 1, "intermediate_size": 128, "moe_layers": [1, 2]}})") ==
        "config.json: Hugging Face config field 'text_config.moe_layers' is [1,2]: it must be layer indices below "
        "num_hidden_layers");
  CHECK(refusal(R"({"model_type": "llama4", "text_config": {"num_hidden_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "vocab_size": 100, "num_local_experts": 4, "num_experts_per_tok": 1,
      "intermediate_size": 128, "attention_chunk_size": 16, "no_rope_layers": [1]}})") ==
        "config.json: Hugging Face config field 'text_config.no_rope_layers' is [1]: it must be one 0 or 1 a layer");
  // What the translated fields fail is said of the config.
  CHECK(refusal(R"({"model_type": "mixtral", "num_local_experts": 2, "num_experts_per_tok": 3,
      "intermediate_size": 128, )" +
                layers + "}") ==
        "config.json (Hugging Face config, read as a model file): top_k 3 is more than the 2 experts (num_experts)");
}

TEST_CASE("Qwen's mlp_only_layers and decoder_sparse_step, and Llama 4's interleaving, place the experts",
          "[model][hugging_face]") {
  const std::string qwen = R"({"model_type": "qwen3_moe", "num_hidden_layers": 6, "hidden_size": 64,
      "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 256, "num_experts": 4,
      "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 2, "mlp_only_layers": [3]})";
  const ModelSpec m = parse_model_json(qwen, "config.json", 64);
  // transformers: experts where (index + 1) divides by the step and the layer is not listed dense.
  CHECK_FALSE(m.is_moe_layer(0));
  CHECK(m.is_moe_layer(1));
  CHECK_FALSE(m.is_moe_layer(2));
  CHECK_FALSE(m.is_moe_layer(3));
  CHECK_FALSE(m.is_moe_layer(4));
  CHECK(m.is_moe_layer(5));
  CHECK(m.ffn_or_default() == 256);  // the dense layers' MLP
  const std::string llama4 = R"({"model_type": "llama4", "text_config": {"num_hidden_layers": 8, "hidden_size": 64,
      "num_attention_heads": 4, "vocab_size": 100, "num_local_experts": 4, "num_experts_per_tok": 1,
      "intermediate_size": 32, "intermediate_size_mlp": 128, "interleave_moe_layer_step": 4,
      "attention_chunk_size": 16, "no_rope_layers": [1, 1, 0, 1, 1, 1, 1, 0]}})";
  const ModelSpec l = parse_model_json(llama4, "config.json", 64);
  CHECK(l.moe_layers() == 2);
  CHECK(l.is_moe_layer(3));
  CHECK(l.is_moe_layer(7));
  CHECK(l.shared_expert_width() == 32);
  CHECK(l.ffn_or_default() == 128);
  CHECK(l.attention_span(2) == AttentionSpan::full);  // a NoPE layer attends to everything
  CHECK(l.attention_span(3) == AttentionSpan::chunk);
  CHECK(l.layers_with(AttentionSpan::chunk) == 6);
}

TEST_CASE("a model file's moe_layer_freq may list each layer, as Megatron's list form does", "[model]") {
  const std::string base = R"({"layers": 4, "hidden": 64, "heads": 4, "seq": 64, "vocab": 100, "gated_mlp": true,
      "num_experts": 4, "top_k": 1, )";
  const ModelSpec m = parse_model_json(base + R"("moe_layer_freq": [0, 1, 1, 0]})", "m.json");
  CHECK(m.moe_layers() == 2);
  CHECK_FALSE(m.is_moe_layer(0));
  CHECK(m.is_moe_layer(2));
  CHECK(refusal(base + R"("moe_layer_freq": [0, 1]})") ==
        "config.json: model field 'moe_layer_freq' lists 2 layers of 4: one 0 or 1 a layer, as Megatron requires");
  CHECK(refusal(base + R"("moe_layer_freq": [0, 2, 1, 0]})") ==
        "config.json: model field 'moe_layer_freq' entry 1 is 2: 1 (a layer with experts) or 0 (a dense one)");
  CHECK(refusal(base + R"("moe_layer_freq": [0, 0, 0, 0]})") ==
        "config.json: model field 'moe_layer_freq' lists no MoE layer (no 1)");
  CHECK(refusal(base + R"("moe_layer_freq": [0, 1, 1, 1], "first_k_dense_layers": 1})") ==
        "config.json: model fields 'moe_layer_freq' (a list) and 'first_k_dense_layers' both say which layers are "
        "dense: give one");
}

TEST_CASE("a model file may name its fields as Megatron-Core's TransformerConfig does", "[model]") {
  // Megatron-Bridge's provider for Llama 3 8B, its fields as they are.
  const ModelSpec megatron = parse_model_json(R"({"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
      "num_query_groups": 8, "ffn_hidden_size": 14336, "seq_length": 8192, "vocab_size": 128256,
      "gated_linear_unit": true, "share_embeddings_and_output_weights": false, "add_bias_linear": false,
      "kv_channels": 128, "flash_attention": true})",
                                              "llama3.json");
  ModelSpec preset = resolve_model("llama-3-8b");
  CHECK(megatron.total_parameters() == preset.total_parameters());
  CHECK(megatron.kv_heads_or_heads() == 8);
  CHECK_FALSE(megatron.has_biases());
  CHECK(parse_model_json(R"({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 128,
      "vocab_size": 100})",
                         "m.json", 512)
            .seq == 512);
  // The same object written as --model's argument itself.
  const ModelSpec inline_model = resolve_model(R"({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
      "seq_length": 128, "vocab_size": 100})");
  CHECK(inline_model.layers == 2);
  CHECK(inline_model.name == "model");
  CHECK_THROWS_WITH(resolve_model(R"({"num_layers": 2})"),
                    "--model: model field 'hidden' is missing (Megatron's 'hidden_size')");
  CHECK(refusal(R"({"num_layers": 2, "num_attention_heads": 4, "seq_length": 128, "vocab_size": 100})") ==
        "config.json: model field 'hidden' is missing (Megatron's 'hidden_size')");
  CHECK(refusal(R"({"layers": 2, "num_layers": 3, "hidden": 64, "heads": 4, "seq": 128, "vocab": 100})") ==
        "config.json: model fields 'layers' (2) and 'num_layers' (3) are one field and disagree");
  CHECK(refusal(R"({"layers": 2, "hidden": 64, "heads": 4, "seq": 128, "vocab": 100, "gated_mlp": true,
      "gated_linear_unit": false})") ==
        "config.json: model fields 'gated_mlp' (true) and 'gated_linear_unit' (false) are one field and disagree");
}

TEST_CASE("ppsim simulate and plan read a Hugging Face config with --seq-length", "[model][hugging_face][cli]") {
  using ppsim_test::run_ppsim;
  const std::string qwen = ppsim_test::quoted(config_path("Qwen__Qwen3-30B-A3B"));
  const auto simulated = run_ppsim("simulate --model " + qwen +
                                   " --seq-length 4096 --gpu h100 --schedule 1f1b --stages 2 "
                                   "--micro-batches 8 --expert-parallel 2 --data-parallel 2 --json");
  REQUIRE(simulated.status == 0);
  CHECK(simulated.out.find("\"parameters\":30532308992") != std::string::npos);
  const auto refused =
      run_ppsim("simulate --model " + qwen + " --gpu h100 --schedule 1f1b --stages 2 --micro-batches 8");
  CHECK(refused.status != 0);
  CHECK(refused.one_error_line());
  CHECK(refused.err.find("give --seq-length") != std::string::npos);
  const auto planned = run_ppsim("plan --model " + qwen + " --seq-length 4096 --gpu h100 --gpus 16 --global-batch 64");
  CHECK(planned.status == 0);
  CHECK(planned.out.find("Qwen__Qwen3-30B-A3B") != std::string::npos);
  const auto with_profile = run_ppsim(
      "simulate --profile x.json --seq-length 4096 --schedule 1f1b --stages 2 "
      "--micro-batches 8");
  CHECK(with_profile.status != 0);
  CHECK(with_profile.one_error_line());
  CHECK(with_profile.err.find("--seq-length") != std::string::npos);
}
