// Hybrid models (ModelSpec::hybrid_pattern: Megatron's hybrid_override_pattern), the Mamba-2 layer
// (sim/src/mamba_layer.cpp) and the Gated DeltaNet (sim/src/gated_delta_net_layer.cpp), through
// derive_costs and the real ppsim binary:
// - a pattern of attention and MLP blocks ("*-" a layer) is the transformer it splits: every
//   stage's times, memory and parameters those of the same model without a pattern, at TP 1 and
//   at TP 2 with sequence parallelism; "*E" likewise the MoE transformer, with its all-to-all; but
//   under full recomputation every block keeps its input (Megatron checkpoints each);
// - the Hub's configs: Nemotron-H 56B (its file's Infinity read as null, as Python's json writes
//   it; inside strings left alone) comes to 56.3B parameters, Nemotron 3 Nano 30B-A3B to NVIDIA's
//   31.6B total and 3.6B active with embeddings; one Mamba layer's parameters by hand
//   (projections, convolution, A, D, dt's bias, the norms); Nemotron 3 Super (LatentMoE: its
//   routed experts and their all-to-all in a 1024 width, with the projections in and out) to its
//   120B total and 12B active; Nemotron 3 Ultra's, which lists its layers (layers_block_type), to
//   550B and 55B;
// - Qwen3.5's configs (qwen3_5_text, qwen3_5_moe_text: Gated DeltaNet 'G' and gated attention '*'
//   layers, each followed by its MLP or experts, and one MTP layer): 27B, 35B-A3B and 397B-A17B
//   come to their published totals without the vision encoder; one Gated DeltaNet's parameters by
//   hand; its products split by T, its delta rule's FLOPs;
// - the Mamba layer: its products split by T and run at the FP8 rate under FP8 while its scan
//   does not; full recomputation keeps the layer's input alone and reruns its forward;
// - context parallelism over Mamba layers (Megatron's MambaContextParallel): the projections and
//   the scan a C-th on each rank, the activations a C-th, the all-to-alls of z, x, B, C, dt there
//   and y back, forward and backward;
// - one line naming the field or option for what is not a hybrid model pipescope prices: a symbol
//   outside M G * - E ('|' pointed at the layout option), a pattern of another length, experts
//   without E (and E without experts), Gated DeltaNet key heads not dividing its value heads, heads
//   the groups do not divide, T not dividing the Mamba heads and groups or the Gated DeltaNet's, C
//   not dividing a TP rank's Mamba heads or not fitting its groups, C over Gated DeltaNets, a
//   negative latent width, a Qwen3.5 layer_types entry it does not read (a hybrid
//   model's MTP layers are read);
// - the presets nemotron-h-56b, nemotron-3-nano-30b-a3b, nemotron-3-super-120b-a12b,
//   qwen3.5-35b-a3b and qwen3.5-397b-a17b: the models their configs describe, stage by stage;
// - Megatron's options (--hybrid-override-pattern or --hybrid-layer-pattern, --mamba-*,
//   --squared-relu, --linear-*, --attention-output-gate) describe the model its model file does, to
//   the byte of ppsim's JSON (the model file's hybrid_layer_pattern too, refused where it disagrees
//   with hybrid_override_pattern); ppsim plan ranks a hybrid model's layouts.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/efficiency.hpp"
#include "pipescope/sim/gated_delta_net_layer.hpp"
#include "pipescope/sim/mamba_layer.hpp"
#include "pipescope/sim/model.hpp"
#include "ppsim_run.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

const std::filesystem::path kHubConfigs = std::filesystem::path(PIPESCOPE_SOURCE_DIR) / "tests/sim/data/hugging_face";

ModelSpec transformer_of_width_1024(int layers) {
  ModelSpec m;
  m.name = "small";
  m.layers = layers;
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 4;
  m.ffn_hidden = 4096;
  m.seq = 2048;
  m.vocab = 32000;
  m.tied_embeddings = false;
  m.flash_attention = true;
  m.dropout = false;
  m.biases = false;
  return m;
}

ModelSpec split_into_blocks(ModelSpec m, const std::string& pair) {
  m.hybrid_pattern.clear();
  for (int i = 0; i < m.layers; ++i) m.hybrid_pattern += pair;
  m.layers *= 2;
  return m;
}

ParallelConfig hybrid_run_on(int pipeline, int tensor_parallel) {
  ParallelConfig p;
  p.pipeline = pipeline;
  p.tensor_parallel = tensor_parallel;
  p.sequence_parallel = tensor_parallel > 1;
  p.data_parallel = 2;
  return p;
}

void require_same_stage_costs(const CostModel& blocks, const CostModel& layers) {
  REQUIRE(blocks.stages.size() == layers.stages.size());
  for (std::size_t i = 0; i < blocks.stages.size(); ++i) {
    INFO("stage " << i);
    const StageCost& a = blocks.stages[i];
    const StageCost& b = layers.stages[i];
    CHECK(a.f_s == Approx(b.f_s).epsilon(1e-12));
    CHECK(a.b_s == Approx(b.b_s).epsilon(1e-12));
    CHECK(a.w_s == Approx(b.w_s).epsilon(1e-12));
    CHECK(a.tensor_parallel_f_s == Approx(b.tensor_parallel_f_s).epsilon(1e-12));
    CHECK(a.tensor_parallel_b_s == Approx(b.tensor_parallel_b_s).epsilon(1e-12));
    CHECK(a.f_mem_bytes == b.f_mem_bytes);
    CHECK(a.static_bytes == b.static_bytes);
    CHECK(a.reduce_grads_s == Approx(b.reduce_grads_s).epsilon(1e-12));
    CHECK(a.all_to_all.moe_layers == b.all_to_all.moe_layers);
    CHECK(a.all_to_all.dispatch_f_s == Approx(b.all_to_all.dispatch_f_s).epsilon(1e-12));
  }
}

std::string hybrid_file_refusal(const std::string& text) {
  try {
    parse_model_json(text, "hybrid.json", std::nullopt);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "accepted";
}

const std::string kHybridFile =
    R"({"name": "h", "layers": 4, "hidden": 1024, "heads": 16, "seq": 2048, "vocab": 32000, )";

}  // namespace

TEST_CASE("attention and MLP blocks are the transformer layers they split", "[model][hybrid]") {
  const DeviceSpec h100 = device_preset("h100");
  const ModelSpec transformer = transformer_of_width_1024(8);
  const ModelSpec blocks = split_into_blocks(transformer, "*-");
  CHECK(blocks.total_parameters() == transformer.total_parameters());
  for (int tp : {1, 2}) {
    INFO("tensor parallel " << tp);
    require_same_stage_costs(derive_costs(blocks, h100, Topology{}, hybrid_run_on(2, tp)),
                             derive_costs(transformer, h100, Topology{}, hybrid_run_on(2, tp)));
  }
  // Under full recomputation Megatron's hybrid stack checkpoints every block: the MLP blocks keep
  // their input too (4 more on each stage's 4 layers), the rest as the transformer's.
  ParallelConfig full = hybrid_run_on(2, 1);
  full.recomputation = Recomputation::full;
  const CostModel blocks_full = derive_costs(blocks, h100, Topology{}, full);
  const CostModel layers_full = derive_costs(transformer, h100, Topology{}, full);
  CHECK(blocks_full.stages[0].f_mem_bytes == layers_full.stages[0].f_mem_bytes + 4 * 2 * 2048 * 1024);
  CHECK(blocks_full.stages[0].b_s == Approx(layers_full.stages[0].b_s).epsilon(1e-12));
  // A MoE transformer: attention, then the experts (router, 8 routed of which 2, one shared).
  ModelSpec moe = transformer;
  moe.num_experts = 8;
  moe.top_k = 2;
  moe.moe_ffn_hidden = 1024;
  moe.shared_experts = 1;
  ParallelConfig ep = hybrid_run_on(2, 1);
  ep.expert_parallel = 2;
  const ModelSpec moe_blocks = split_into_blocks(moe, "*E");
  CHECK(moe_blocks.total_parameters() == moe.total_parameters());
  CHECK(moe_blocks.active_parameters() == moe.active_parameters());
  require_same_stage_costs(derive_costs(moe_blocks, h100, Topology{}, ep), derive_costs(moe, h100, Topology{}, ep));
}

TEST_CASE("Nemotron-H's and Nemotron 3 Nano's configs come to their published sizes", "[model][hybrid]") {
  const ModelSpec h56 = resolve_model((kHubConfigs / "nvidia__Nemotron-H-56B-Base-8K.json").string(), 8192);
  CHECK(h56.hybrid_pattern.size() == 118);
  CHECK(h56.layers_of(LayerKind::mamba) == 54);
  CHECK(h56.layers_of(LayerKind::mlp) == 54);
  CHECK(h56.layers_of(LayerKind::attention) == 10);
  CHECK(h56.mamba_inner() == 16384);
  CHECK(h56.total_parameters() == Approx(56.3e9).epsilon(0.001));
  const ModelSpec nano =
      resolve_model((kHubConfigs / "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json").string(), 8192);
  CHECK(nano.layers_of(LayerKind::experts) == 23);
  CHECK(nano.layers_of(LayerKind::mamba) == 23);
  CHECK(nano.layers_of(LayerKind::attention) == 6);
  CHECK(nano.num_experts == 128);
  CHECK(nano.top_k == 6);
  CHECK(nano.shared_expert_width() == 3712);
  CHECK(!nano.gated_mlp);  // squared ReLU
  CHECK(nano.total_parameters() == Approx(31.6e9).epsilon(0.002));
  CHECK(nano.active_parameters() == Approx(3.58e9).epsilon(0.005));  // "3.6B including embeddings"
  // One Mamba layer of Nemotron 3 Nano by hand: 64 heads of 64 (inner 4096), 8 groups of a
  // 128-wide state, a 4-wide convolution with biases.
  const std::int64_t h = 2688, inner = 4096, groups = 2 * 8 * 128, heads = 64;
  const std::int64_t in_projection = h * (2 * inner + groups + heads), out_projection = inner * h;
  const std::int64_t conv = (inner + groups) * (4 + 1);
  CHECK(nano.mamba_parameters() == in_projection + out_projection + conv + 3 * heads + inner + 2 * h);
  CHECK(mamba_layer_parameters_on_rank(nano, 2) == (nano.mamba_parameters() - 2 * h) / 2 + 2 * h);
  // The planner's selective rows: no MLP block to recompute in Nano (its blocks are Mamba,
  // attention and experts), one in Nemotron-H.
  const std::vector<std::uint8_t> nano_ladder = recompute_module_ladder(nano);
  CHECK((nano_ladder.back() & kRecomputeMlp) == 0);
  CHECK((nano_ladder.back() & kRecomputeMoe) != 0);
  CHECK((recompute_module_ladder(h56).back() & kRecomputeMlp) != 0);
}

TEST_CASE("Qwen3.5's configs: Gated DeltaNet and gated attention layers, each with its MLP or experts",
          "[model][hybrid]") {
  // The text models, their MTP layer aside (the published totals count the vision encoder's
  // 0.4-0.5 B and not the MTP layer).
  auto without_mtp = [](ModelSpec m) {
    m.mtp_num_layers = 0;
    return m;
  };
  const ModelSpec moe = resolve_model((kHubConfigs / "Qwen__Qwen3.5-35B-A3B.json").string(), 4096);
  CHECK(moe.hybrid_pattern.substr(0, 8) == "GEGEGE*E");
  CHECK(moe.layers == 80);
  CHECK(moe.layers_of(LayerKind::linear_attention) == 30);
  CHECK(moe.layers_of(LayerKind::attention) == 10);
  CHECK(moe.layers_of(LayerKind::experts) == 40);
  CHECK(moe.attention_output_gate);
  CHECK(moe.mtp_num_layers == 1);
  CHECK(without_mtp(moe).total_parameters() == Approx(34.66e9).epsilon(0.005));
  const ModelSpec big = resolve_model((kHubConfigs / "Qwen__Qwen3.5-397B-A17B.json").string(), 4096);
  CHECK(without_mtp(big).total_parameters() == Approx(396.3e9).epsilon(0.005));
  CHECK(without_mtp(big).active_parameters() == Approx(17.3e9).epsilon(0.01));
  const ModelSpec dense = resolve_model((kHubConfigs / "Qwen__Qwen3.5-27B.json").string(), 4096);
  CHECK(dense.hybrid_pattern.substr(0, 8) == "G-G-G-*-");
  CHECK(!dense.is_moe());
  CHECK(without_mtp(dense).total_parameters() == Approx(26.9e9).epsilon(0.01));
  // One Gated DeltaNet of Qwen3.5-35B-A3B by hand: q and k of 16 heads of 128, v and z of 32
  // heads of 128, b and a a value head; the convolution over q, k and v; A and dt's bias; the
  // gated norm's weight; the layer's norm.
  const std::int64_t h = 2048, keys = 16 * 128, values = 32 * 128;
  CHECK(moe.linear_attention_parameters() ==
        h * (2 * keys + 2 * values + 2 * 32) + values * h + (2 * keys + values) * 4 + 2 * 32 + 128 + 2 * h);
  // Gated attention's query projection gives the gate too: 16 heads of 256, twice.
  CHECK(moe.attention_input_parameters() == h * (2 * 16 * 256 + 2 * 2 * 256));
  // Its MTP layer is a transformer layer with the experts, on the last stage.
  CHECK(moe.mtp_layer_is_moe());
  const CostModel costs = derive_costs(moe, device_preset("h100"), Topology{}, hybrid_run_on(2, 1));
  CHECK(costs.stages.back().f_s > costs.stages.front().f_s);
}

TEST_CASE("a Gated DeltaNet's products split by T; context parallelism over it is refused", "[model][hybrid]") {
  const DeviceSpec h100 = device_preset("h100");
  ModelSpec m = transformer_of_width_1024(4);
  m.hybrid_pattern = "G-*-";
  ParallelConfig one;
  ParallelConfig two = one;
  two.tensor_parallel = 2;
  const LayerTimes whole = gated_delta_net_times(m, h100, one);
  const LayerTimes split = gated_delta_net_times(m, h100, two);
  CHECK(split.w_s < whole.w_s);
  CHECK(split.w_s >= whole.w_s / 2);
  CHECK(gated_delta_net_memory(m, two).held_bytes < gated_delta_net_memory(m, one).held_bytes);
  CHECK(gated_delta_net_matrix_parameters_on_rank(m, 2) == m.linear_attention_matrix_parameters() / 2);
  // The delta rule: C (3 k + 2 v) + 6 k v FLOPs a value head a token, C = 64.
  CHECK(gated_delta_rule_flops_per_token(m) == Approx(32 * (64.0 * (3 * 128 + 2 * 128) + 6.0 * 128 * 128)));
  ParallelConfig cp = hybrid_run_on(1, 1);
  cp.context_parallel = 2;
  CHECK_THROWS_WITH(derive_costs(m, h100, Topology{}, cp),
                    "--context-parallel 2: small's Gated DeltaNet layers under context parallelism are not modelled");
  m.linear_num_key_heads = 2;
  m.linear_num_value_heads = 6;
  CHECK_THROWS_WITH(derive_costs(m, h100, Topology{}, hybrid_run_on(1, 4)),
                    "--tensor-parallel 4: does not divide the 2 key heads and 6 value heads of small's Gated DeltaNet "
                    "layers");
  CHECK_THROWS_WITH(
      parse_model_json(R"({"model_type": "qwen3_next", "num_hidden_layers": 2, "hidden_size": 1024,
                                        "num_attention_heads": 8, "vocab_size": 1000,
                                        "layer_types": ["linear_attention", "sliding_attention"]})",
                       "config.json", 4096),
      "config.json: Hugging Face config field 'layer_types' is [\"linear_attention\",\"sliding_attention\"]: "
      "it must be one 'linear_attention' or 'full_attention' a layer");
}

TEST_CASE("the hybrid presets are the models their Hugging Face configs describe", "[model][hybrid]") {
  const std::pair<const char*, const char*> presets[] = {
      {"nemotron-h-56b", "nvidia__Nemotron-H-56B-Base-8K"},
      {"nemotron-3-nano-30b-a3b", "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"},
      {"nemotron-3-super-120b-a12b", "nvidia__NVIDIA-Nemotron-3-Super-120B-A12B-FP8"},
      {"qwen3.5-35b-a3b", "Qwen__Qwen3.5-35B-A3B"},
      {"qwen3.5-397b-a17b", "Qwen__Qwen3.5-397B-A17B"},
  };
  ParallelConfig run = hybrid_run_on(4, 1);
  run.data_parallel = 8;
  for (const auto& [name, config] : presets) {
    INFO(name);
    const ModelSpec preset = resolve_model(name);
    const ModelSpec read = resolve_model((kHubConfigs / (std::string(config) + ".json")).string(), preset.seq);
    CHECK(preset.hybrid_pattern == read.hybrid_pattern);
    CHECK(preset.total_parameters() == read.total_parameters());
    CHECK(preset.active_parameters() == read.active_parameters());
    CHECK(preset.mtp_num_layers == read.mtp_num_layers);
    run.expert_parallel = preset.is_moe() ? 8 : 1;
    const CostModel a = derive_costs(preset, device_preset("h100"), Topology{}, run);
    const CostModel b = derive_costs(read, device_preset("h100"), Topology{}, run);
    for (std::size_t st = 0; st < a.stages.size(); ++st) {
      CHECK(a.stages[st].f_s == Approx(b.stages[st].f_s).epsilon(1e-12));
      CHECK(a.stages[st].f_mem_bytes == b.stages[st].f_mem_bytes);
    }
  }
}

TEST_CASE("Python's Infinity and NaN in a config are read as null, inside strings left alone", "[model][hybrid]") {
  const ModelSpec m = parse_model_json(R"({"model_type": "nemotron_h", "_name_or_path": "org/Infinity-NaN",
      "num_hidden_layers": 2, "hidden_size": 1024, "num_attention_heads": 8, "vocab_size": 1000,
      "hybrid_override_pattern": "M*", "time_step_limit": [0.0, Infinity], "rescale": -Infinity, "x": NaN})",
                                       "config.json", 4096);
  CHECK(m.name == "Infinity-NaN");
  CHECK(m.layers_of(LayerKind::mamba) == 1);
}

TEST_CASE("Nemotron 3 Super's latent experts: the routed experts and their all-to-all in the latent width",
          "[model][hybrid]") {
  const ModelSpec super =
      resolve_model((kHubConfigs / "nvidia__NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json").string(), 8192);
  CHECK(super.moe_latent_size == 1024);
  CHECK(super.mtp_num_layers == 1);
  CHECK(super.expert_parameters() == 2 * 1024 * 2688);  // squared ReLU: two matrices of the latent width
  CHECK(super.latent_projection_parameters() == 2 * 4096 * 1024);
  ModelSpec decoder = super;
  decoder.mtp_num_layers = 0;
  CHECK(decoder.total_parameters() == Approx(120.7e9).epsilon(0.01));  // "120B total"
  // "12B active": without the two embeddings.
  CHECK(decoder.active_parameters() - 2 * decoder.embedding_parameters() == Approx(12e9).epsilon(0.05));
  // The latent width against the hidden one: the dispatch carries a quarter of the bytes, the
  // experts' products a quarter of the work; the projections in and out come on top.
  ModelSpec full_width = decoder;
  full_width.moe_latent_size = 0;
  ParallelConfig ep = hybrid_run_on(1, 1);
  ep.data_parallel = 8;
  ep.expert_parallel = 8;
  const CostModel latent = derive_costs(decoder, device_preset("h100"), Topology{}, ep);
  const CostModel wide = derive_costs(full_width, device_preset("h100"), Topology{}, ep);
  CHECK(latent.stages[0].all_to_all.dispatch_bytes * 4 == wide.stages[0].all_to_all.dispatch_bytes);
  CHECK(latent.stages[0].f_s < wide.stages[0].f_s);
  // Nemotron 3 Ultra's config lists its layers (layers_block_type) instead of a pattern and a count.
  ModelSpec ultra = resolve_model((kHubConfigs / "nvidia__NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16.json").string(), 8192);
  CHECK(ultra.layers == 108);
  CHECK(ultra.hybrid_pattern.substr(0, 6) == "MEMEME");
  CHECK(ultra.layers_of(LayerKind::mamba) == 48);
  CHECK(ultra.layers_of(LayerKind::experts) == 48);
  CHECK(ultra.layers_of(LayerKind::attention) == 12);
  CHECK(ultra.moe_latent_size == 2048);
  ultra.mtp_num_layers = 0;
  CHECK(ultra.total_parameters() == Approx(550e9).epsilon(0.01));                                     // "550B"
  CHECK(ultra.active_parameters() - 2 * ultra.embedding_parameters() == Approx(55e9).epsilon(0.02));  // "A55B"
  CHECK_THROWS_WITH(parse_model_json(R"({"model_type": "nemotron_h", "hidden_size": 1024, "num_attention_heads": 8,
                                        "vocab_size": 1000, "layers_block_type": ["mamba", "sliding"]})",
                                     "config.json", 4096),
                    "config.json: Hugging Face config field 'layers_block_type' is [\"mamba\",\"sliding\"]: it must "
                    "be one 'mamba', 'attention', 'mlp' or 'moe' a layer");
  CHECK(hybrid_file_refusal(kHybridFile + R"("hybrid_override_pattern": "M-ME", "num_experts": 8, "top_k": 2,
                                              "moe_latent_size": -1})") ==
        "hybrid.json: model field 'moe_latent_size' is -1: it must be >= 0 (0: the hidden width)");
}

TEST_CASE("a Mamba layer's products split by T and run in FP8; its scan does not", "[model][hybrid]") {
  const DeviceSpec h100 = device_preset("h100");
  ModelSpec m = transformer_of_width_1024(4);
  m.hybrid_pattern = "M-M*";
  ParallelConfig one;
  ParallelConfig fp8 = one;
  fp8.fp8 = Fp8Format::hybrid;
  const LayerTimes bf16_times = mamba_layer_times(m, h100, one);
  const LayerTimes fp8_times = mamba_layer_times(m, h100, fp8);
  CHECK(fp8_times.w_s < bf16_times.w_s);  // the weight gradients are the products alone
  CHECK(fp8_times.f_s < bf16_times.f_s);
  ParallelConfig two = one;
  two.tensor_parallel = 2;
  // Half the products' work on each rank, at no better a rate (smaller shapes run no faster).
  const double split_w_s = mamba_layer_times(m, h100, two).w_s;
  CHECK(split_w_s < bf16_times.w_s);
  CHECK(split_w_s >= bf16_times.w_s / 2);
  CHECK(mamba_layer_matrix_parameters_on_rank(m, 2) == m.mamba_matrix_parameters() / 2);
  // The scan's FLOPs: a group's C B^T and each head's four products a token.
  CHECK(mamba_scan_flops_per_token(m) == Approx(2.0 * 128 * 128 * 8 + 32 * (128 * 64 + 4 * 128 * 64)));
  // Full recomputation: the layer's input kept, the rest rebuilt, the forward run again.
  ParallelConfig full = one;
  full.recomputation = Recomputation::full;
  const LayerMemory kept = mamba_layer_memory(m, full);
  CHECK(kept.held_bytes == 2 * 2048 * 1024);
  CHECK(kept.rebuilt_bytes == mamba_layer_memory(m, one).held_bytes);
  CHECK(mamba_layer_times(m, h100, full).recompute_s == Approx(bf16_times.f_s));
}

TEST_CASE("context parallelism splits a Mamba layer's work and adds its all-to-alls", "[model][hybrid]") {
  const DeviceSpec h100 = device_preset("h100");
  ModelSpec m = transformer_of_width_1024(4);
  m.hybrid_pattern = "MMMM";
  m.seq = 16384;
  ParallelConfig whole;
  ParallelConfig split = whole;
  split.context_parallel = 4;
  const LayerTimes one = mamba_layer_times(m, h100, whole);
  const LayerTimes quarter = mamba_layer_times(m, h100, split);
  CHECK(quarter.w_s < one.w_s / 3);
  CHECK(mamba_layer_memory(m, split).held_bytes == Approx(mamba_layer_memory(m, whole).held_bytes / 4.0));
  // The exchange: z, x, B, C and dt there (8 groups of 128 for 4 ranks: no repeats), y back, each
  // an all-to-all of the rank's 4096 tokens over 4 ranks on NVLink, plus the copies that undo and
  // redo the causal load balancing; in the stage's passes, forward and backward.
  const ExpertLinks links{Topology{}.intra_node, Topology{}.inter_node, 8, AllToAllFigures{}};
  const MambaContextParallel exchange = mamba_context_parallel(m, h100, split, links, 4);
  const double before = 2.0 * 4096 * (2 * 2048 + 2 * 8 * 128 + 32), after = 2.0 * 4096 * 2048;
  CHECK(exchange.forward_s == Approx(all_to_all_s(before, 4, 4, links) + all_to_all_s(after, 4, 4, links) +
                                     memory_bound_time_s(2 * (before + after), h100)));
  CHECK(exchange.backward_s == Approx(exchange.forward_s));
  ParallelConfig run = hybrid_run_on(1, 1);
  run.context_parallel = 4;
  const CostModel with_cp = derive_costs(m, h100, Topology{}, run);
  run.context_parallel = 1;
  const CostModel without_cp = derive_costs(m, h100, Topology{}, run);
  CHECK(with_cp.stages[0].f_s < without_cp.stages[0].f_s);
  CHECK(with_cp.stages[0].f_s > without_cp.stages[0].f_s / 4);
}

TEST_CASE("what is not a hybrid model pipescope prices is refused in one line naming it", "[model][hybrid]") {
  CHECK(hybrid_file_refusal(kHybridFile + R"("hybrid_override_pattern": "M-X*"})") ==
        "hybrid.json: model field 'hybrid_override_pattern' has 'X' at position 3: pipescope reads M (Mamba), G "
        "(Gated DeltaNet), * (attention), - (MLP) and E (experts), one a layer");
  CHECK(hybrid_file_refusal(kHybridFile + R"("hybrid_override_pattern": "M-|M*"})")
            .find("give --pipeline-model-parallel-layout") != std::string::npos);
  CHECK(hybrid_file_refusal(kHybridFile + R"("hybrid_override_pattern": "M-M*/*E"})")
            .find("(MTP layers: give mtp_num_layers; each is attention and the experts)") != std::string::npos);
  // Megatron's newer name for the pattern is read too; the two must agree.
  CHECK(hybrid_file_refusal(kHybridFile + R"("hybrid_layer_pattern": "M-M*"})") == "accepted");
  CHECK(hybrid_file_refusal(kHybridFile + R"("hybrid_override_pattern": "M-M*", "hybrid_layer_pattern": "M-*M"})") ==
        "hybrid.json: model fields 'hybrid_override_pattern' (M-M*) and 'hybrid_layer_pattern' (M-*M) are one field "
        "and disagree");
  CHECK(hybrid_file_refusal(kHybridFile + R"("hybrid_override_pattern": "M-M"})") ==
        "hybrid.json: model field 'hybrid_override_pattern' has 3 layers, 'layers' says 4: one symbol a layer, as "
        "Megatron requires");
  CHECK(hybrid_file_refusal(kHybridFile + R"("hybrid_override_pattern": "M-ME"})") ==
        "hybrid.json: model field 'hybrid_override_pattern' has expert layers (E): give num_experts");
  CHECK(hybrid_file_refusal(kHybridFile + R"("hybrid_override_pattern": "M-M*", "num_experts": 8, "top_k": 2})") ==
        "hybrid.json: num_experts with a 'hybrid_override_pattern' that has no expert layer (E)");
  CHECK(hybrid_file_refusal(kHybridFile + R"("hybrid_override_pattern": "M-M*", "mtp_num_layers": 1})") == "accepted");
  CHECK(hybrid_file_refusal(kHybridFile + R"("hybrid_override_pattern": "G-G*", "linear_num_key_heads": 3})") ==
        "hybrid.json: Gated DeltaNet layers (G) need positive linear_* widths, the key heads (3) dividing the value "
        "heads (32)");
  CHECK(hybrid_file_refusal(kHybridFile + R"("hybrid_override_pattern": "M-M*", "mamba_num_heads": 12})") ==
        "hybrid.json: mamba_num_groups 8 does not divide the 12 Mamba heads (each group's B and C serve a whole "
        "number of heads)");
  CHECK(hybrid_file_refusal(kHybridFile + R"("hybrid_override_pattern": "M-M*", "mamba_state_dim": 0})") ==
        "hybrid.json: model field 'mamba_state_dim' is 0: it must be at least 1");
  CHECK(hybrid_file_refusal(kHybridFile + R"("hybrid_override_pattern": ""})").find("is empty") != std::string::npos);

  ModelSpec m = transformer_of_width_1024(4);
  m.hybrid_pattern = "M-M*";
  ParallelConfig p = hybrid_run_on(1, 1);
  p.context_parallel = 64;  // 32 heads
  CHECK_THROWS_WITH(derive_costs(m, device_preset("h100"), Topology{}, p),
                    "--context-parallel 64: does not divide the 32 Mamba heads of a tensor-parallel rank of small "
                    "(each CP rank scans the whole sequence of a C-th of them)");
  p.context_parallel = 2;
  p.tensor_parallel = 2;
  m.mamba_num_groups = 8;
  m.mamba_num_heads = 48;  // 24 heads and 4 groups a TP rank: C = 3 neither divides nor is a multiple of 4
  p.context_parallel = 3;
  m.seq = 2046;
  CHECK_THROWS_WITH(derive_costs(m, device_preset("h100"), Topology{}, p),
                    "--context-parallel 3: neither divides nor is a multiple of the 4 Mamba groups of a "
                    "tensor-parallel rank of small (Megatron's MambaContextParallel requires one)");
  m = transformer_of_width_1024(4);
  m.hybrid_pattern = "M-M*";
  m.mamba_num_groups = 2;
  ParallelConfig wide = hybrid_run_on(1, 4);
  wide.context_parallel = 2;
  CHECK(!mamba_context_parallel_problem(m, wide));  // T splits no group: the TP refusal says so
  CHECK_THROWS_WITH(derive_costs(m, device_preset("h100"), Topology{}, wide),
                    "--tensor-parallel 4: does not divide the 32 Mamba heads and 2 groups of small (MambaMixer "
                    "splits both)");
  CHECK_THROWS_WITH(derive_costs(m, device_preset("h100"), Topology{}, hybrid_run_on(1, 4)),
                    "--tensor-parallel 4: does not divide the 32 Mamba heads and 2 groups of small (MambaMixer "
                    "splits both)");
}

TEST_CASE("ppsim takes a hybrid model from Megatron's options as from its model file, and plans it", "[cli][hybrid]") {
  const std::string run =
      " --schedule 1f1b --stages 2 --micro-batches 4 --tensor-parallel 2 --sequence-parallel --json";
  const std::string megatron_args =
      "simulate --num-layers 8 --hidden-size 1024 --num-attention-heads 16 --group-query-attention "
      "--num-query-groups 4 --ffn-hidden-size 4096 --squared-relu --disable-bias-linear "
      "--untie-embeddings-and-output-weights --hidden-dropout 0 --attention-dropout 0 --vocab-size 32000 "
      "--seq-length 2048 --hybrid-override-pattern " +
      ppsim_test::quoted("M-M*M-M-") +
      " --mamba-num-heads 32 --mamba-head-dim 64 --mamba-state-dim 128 --mamba-num-groups 8";
  const ppsim_test::PpsimRun megatron = ppsim_test::run_ppsim(megatron_args + run);
  INFO(megatron.err);
  REQUIRE(megatron.status == 0);
  const std::string file = R"('{"name": "megatron-8x1024", "layers": 8, "hidden": 1024, "heads": 16, "kv_heads": 4,
      "ffn_hidden": 4096, "seq": 2048, "vocab": 32000, "tied_embeddings": false, "biases": false, "dropout": false,
      "flash_attention": true, "hybrid_override_pattern": "M-M*M-M-", "mamba_num_heads": 32}')";
  const ppsim_test::PpsimRun from_file = ppsim_test::run_ppsim("simulate --model " + file + run);
  INFO(from_file.err);
  REQUIRE(from_file.status == 0);
  CHECK(megatron.out == from_file.out);
  std::string newer_name = megatron_args;
  newer_name.replace(newer_name.find("--hybrid-override-pattern"), 25, "--hybrid-layer-pattern");
  CHECK(ppsim_test::run_ppsim(newer_name + run).out == megatron.out);
  // Qwen3.5's layers: Gated DeltaNets and gated attention, each with its MLP.
  const ppsim_test::PpsimRun delta_nets = ppsim_test::run_ppsim(
      "simulate --num-layers 8 --hidden-size 1024 --num-attention-heads 16 --group-query-attention "
      "--num-query-groups 4 --kv-channels 128 --ffn-hidden-size 4096 --swiglu --disable-bias-linear "
      "--untie-embeddings-and-output-weights --hidden-dropout 0 --attention-dropout 0 --vocab-size 32000 "
      "--seq-length 2048 --hybrid-override-pattern " +
      ppsim_test::quoted("G-G-G-*-") +
      " --linear-num-key-heads 8 --linear-num-value-heads 16 --linear-key-head-dim 64 --linear-value-head-dim 64 "
      "--attention-output-gate" +
      run);
  INFO(delta_nets.err);
  REQUIRE(delta_nets.status == 0);
  const std::string gated = R"('{"name": "megatron-8x1024", "layers": 8, "hidden": 1024, "heads": 16, "kv_heads": 4,
      "head_dim": 128, "ffn_hidden": 4096, "gated_mlp": true, "seq": 2048, "vocab": 32000, "tied_embeddings": false,
      "biases": false, "dropout": false, "flash_attention": true, "hybrid_override_pattern": "G-G-G-*-",
      "linear_num_key_heads": 8, "linear_num_value_heads": 16, "linear_key_head_dim": 64, "linear_value_head_dim": 64,
      "attention_output_gate": true}')";
  CHECK(delta_nets.out == ppsim_test::run_ppsim("simulate --model " + gated + run).out);
  CHECK(ppsim_test::run_ppsim("simulate --num-layers 8 --hidden-size 1024 --num-attention-heads 16 --vocab-size 32000 "
                              "--seq-length 2048 --swiglu --squared-relu" +
                              run)
            .err == "ppsim: error: --swiglu and --squared-relu are two activations of the MLP: give one\n");
  const ppsim_test::PpsimRun planned =
      ppsim_test::run_ppsim("plan --model " + (kHubConfigs / "nvidia__Nemotron-H-56B-Base-8K.json").string() +
                            " --seq-length 8192 --gpus 64 --global-batch 256 --top 3");
  INFO(planned.err);
  CHECK(planned.status == 0);
  CHECK(planned.out.find("nvidia__Nemotron-H-56B-Base-8K on 64 x h100") != std::string::npos);
  CHECK(planned.out.find("   1  ") != std::string::npos);
}
