// The mixture-of-experts presets and model-file fields against the published model sizes.
// - Totals and active (per-token) parameters, both embeddings counted: Mixtral 8x7B 46.7B / 12.9B
//   and 8x22B 141B / 39B (Mistral AI's announcements), Qwen3-235B-A22B 235B / 22B (its model
//   card), DeepSeek-V3 671B / 37B (its technical report, without the 14B of the multi-token
//   prediction module), Qwen3-30B-A3B 30.5B / 3.3B, Llama 4 Maverick 400B / 17B and Scout 109B
//   (with its vision encoder) / 17B (Meta's model cards), Grok-1 314B with about a quarter of
//   its weights active (xAI's release), GPT-OSS 120B and 20B 116.83B / 5.13B and 20.91B / 3.61B
//   (OpenAI's model card, active without the input embedding). Published figures are rounded to
//   the digits shown, so each check allows half a unit of the last digit shown plus 1% for what
//   the presets leave out (Qwen3's
//   query/key norms, DeepSeek's expert biases: thousands of parameters per layer, far below 1%).
//   DeepSeek's 37B active: its own configuration counts 37.5B with both embeddings, 36.6B without
//   the input embedding (a lookup, no products); the check allows 2.5%.
// - Which layers are MoE: DeepSeek-V3's first 3 of 61 dense, 58 MoE; moe_layer_freq 2 after one
//   dense layer of 6: layers 1, 3, 5; Llama 4 Maverick's 24 of 48 (layers 1, 3, ...), Scout's and
//   Qwen3-30B-A3B's all.
// - FLOPs (the planner's MFU): a Mixtral layer's forward is 2 s P + 4 s^2 h with P its active
//   matrices: attention 2h^2 + 2h kv, the router 8h and two experts of 3hf.
// - Model files: Megatron's and Hugging Face's names are read like pipescope's; top_k above the
//   experts and MoE fields without experts are refused naming the field.
#include <catch2/catch.hpp>

#include <tuple>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/model.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

void check_published(const std::string& preset, double total, double total_tolerance, double active,
                     double active_tolerance) {
  const ModelSpec m = resolve_model(preset);
  INFO(preset << ": " << m.total_parameters() << " parameters, " << m.active_parameters() << " active");
  CHECK(static_cast<double>(m.total_parameters()) == Approx(total).epsilon(total_tolerance));
  CHECK(static_cast<double>(m.active_parameters()) == Approx(active).epsilon(active_tolerance));
}

}  // namespace

TEST_CASE("MoE presets have their published total and active parameters") {
  check_published("mixtral-8x7b", 46.7e9, 0.011, 12.9e9, 0.014);
  check_published("mixtral-8x22b", 141e9, 0.014, 39e9, 0.023);
  check_published("qwen3-235b-a22b", 235e9, 0.013, 22e9, 0.033);
  check_published("deepseek-v3", 671e9, 0.011, 37e9, 0.025);
  check_published("qwen3-30b-a3b", 30.5e9, 0.012, 3.3e9, 0.026);
  check_published("llama4-maverick", 400e9, 0.012, 17e9, 0.04);
  // Meta's 109B counts Scout's vision encoder (about 1B), left out of the preset.
  check_published("llama4-scout", 109e9, 0.025, 17e9, 0.04);
  // xAI publishes Grok-1's total alone ("314B"; "25% of the weights active on a given token").
  const ModelSpec grok = resolve_model("grok-1");
  CHECK(static_cast<double>(grok.total_parameters()) == Approx(314e9).epsilon(0.012));
  CHECK(static_cast<double>(grok.active_parameters()) / static_cast<double>(grok.total_parameters()) ==
        Approx(0.25).epsilon(0.1));
  // OpenAI's model card counts GPT-OSS's active parameters without the input embedding (a
  // lookup): 5.13B of 116.83B and 3.61B of 20.91B; the presets leave out the experts' biases
  // (8640 an expert: 40M in the 120B).
  for (const auto& [preset, total, active] :
       {std::tuple{"gpt-oss-120b", 116.83e9, 5.13e9}, std::tuple{"gpt-oss-20b", 20.91e9, 3.61e9}}) {
    const ModelSpec gpt_oss = resolve_model(preset);
    INFO(preset);
    CHECK(static_cast<double>(gpt_oss.total_parameters()) == Approx(total).epsilon(0.001));
    CHECK(static_cast<double>(gpt_oss.active_parameters() - gpt_oss.embedding_parameters()) ==
          Approx(active).epsilon(0.002));
  }
  // Dense presets: every parameter is active.
  const ModelSpec llama = resolve_model("llama-3-70b");
  CHECK(llama.active_parameters() == llama.total_parameters());
}

TEST_CASE("Mixtral 8x7B's layer counts exactly") {
  const ModelSpec m = resolve_model("mixtral-8x7b");
  const std::int64_t h = 4096, kv = 1024, f = 14336;
  CHECK(m.expert_parameters() == 3 * h * f);
  CHECK(m.router_parameters() == 8 * h);
  const std::int64_t attention = 2 * h * h + 2 * h * kv;
  const std::int64_t layer = attention + 4 * h + 8 * 3 * h * f + 8 * h;
  CHECK(m.total_parameters() == 32 * layer + 2 * 32000 * h + 2 * h);
  CHECK(m.active_parameters() == m.total_parameters() - 32 * 6 * 3 * h * f);
}

TEST_CASE("DeepSeek-V3 keeps its first three layers dense and has latent attention") {
  const ModelSpec m = resolve_model("deepseek-v3");
  CHECK(m.moe_layers() == 58);
  CHECK_FALSE(m.is_moe_layer(2));
  CHECK(m.is_moe_layer(3));
  CHECK(m.shared_expert_width() == 2048);
  // MLA: q down 7168 x 1536, up 1536 x 128 (128 + 64); kv down 7168 x (512 + 64), up 512 x 128 (128 + 128).
  const std::int64_t mla = 7168LL * 1536 + 1536LL * 128 * 192 + 7168LL * 576 + 512LL * 128 * 256;
  CHECK(m.attention_input_parameters() == mla);
  CHECK(m.attention_output_parameters() == 128LL * 128 * 7168);

  ModelSpec every_other = resolve_model("mixtral-8x7b");
  every_other.layers = 6;
  every_other.first_k_dense_layers = 1;
  every_other.moe_layer_freq = 2;
  CHECK(every_other.moe_layers() == 3);
  CHECK(every_other.is_moe_layer(1));
  CHECK_FALSE(every_other.is_moe_layer(2));
  CHECK(every_other.is_moe_layer(5));
}

TEST_CASE("MoE model files read Megatron's names and refuse what cannot route") {
  const std::string base = R"("layers": 4, "hidden": 1024, "heads": 8, "seq": 2048, "vocab": 32000, "gated_mlp": true)";
  const ModelSpec m = parse_model_json("{" + base + R"(, "num_moe_experts": 16, "moe_router_topk": 4,
      "moe_ffn_hidden_size": 512, "shared_experts": 2, "first_k_dense_replace": 1, "moe_expert_capacity_factor": 1.25})",
                                       "moe.json");
  CHECK(m.num_experts == 16);
  CHECK(m.top_k == 4);
  CHECK(m.moe_ffn_or_default() == 512);
  CHECK(m.shared_expert_width() == 1024);
  CHECK(m.first_k_dense_layers == 1);
  CHECK(m.capacity_factor == 1.25);
  CHECK(m.moe_layers() == 3);

  // Megatron's moe_shared_expert_intermediate_size is the shared experts' width together.
  const ModelSpec shared = parse_model_json("{" + base + R"(, "num_experts": 8, "top_k": 2,
      "shared_experts": 2, "moe_shared_expert_intermediate_size": 4096})",
                                            "shared.json");
  CHECK(shared.shared_expert_ffn_hidden == 2048);
  CHECK(shared.shared_expert_width() == 4096);

  auto refusal = [&](const std::string& fields) {
    try {
      parse_model_json("{" + base + ", " + fields + "}", "bad.json");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refusal(R"("num_experts": 8, "top_k": 9)") == "bad.json: top_k 9 is more than the 8 experts (num_experts)");
  CHECK(refusal(R"("top_k": 2)") == "bad.json: MoE fields (top_k, moe_ffn_hidden, ...) need num_experts");
  CHECK(refusal(R"("num_experts": 8)") == "bad.json: top_k must be at least 1 with num_experts");
  CHECK(refusal(R"("num_experts": 8, "top_k": 2, "first_k_dense_layers": 4)") ==
        "bad.json: first_k_dense_layers must leave at least one MoE layer");
}

TEST_CASE("a MoE layer's FLOPs count the experts a token meets") {
  const ModelSpec m = resolve_model("mixtral-8x7b");
  const double s = 4096, h = 4096, kv = 1024, f = 14336;
  const double active = 2 * h * h + 2 * h * kv + 8 * h + 2 * 3 * h * f;
  const LayerFigures figures = layer_figures(m, 1);
  CHECK(figures.f_flops == Approx(2 * s * active + 4 * s * s * h));
  CHECK(figures.w_flops == Approx(2 * s * active));
}

TEST_CASE("Llama 4 Maverick alternates dense and MoE layers; Scout's are all MoE") {
  const ModelSpec maverick = resolve_model("llama4-maverick");
  CHECK(maverick.moe_layers() == 24);
  CHECK_FALSE(maverick.is_moe_layer(0));
  CHECK(maverick.is_moe_layer(1));  // interleave_moe_layer_step 2: layers 1, 3, 5, ...
  CHECK(maverick.shared_experts == 1);
  CHECK(resolve_model("llama4-scout").moe_layers() == 48);
  CHECK(resolve_model("qwen3-30b-a3b").moe_layers() == 48);
}
