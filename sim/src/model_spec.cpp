// The model side of the first-principles costs: ModelSpec's counts, the presets and model files.
#include "pipescope/sim/model.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/input_file.hpp"
#include "pipescope/core/json_limits.hpp"
#include "pipescope/core/nearest_name.hpp"
#include "hugging_face_config.hpp"
#include "hybrid_presets.hpp"
#include "moe_presets.hpp"

namespace pipescope::sim {

std::string_view recomputation_name(Recomputation recomputation) {
  switch (recomputation) {
    case Recomputation::none: return "none";
    case Recomputation::selective: return "selective";
    case Recomputation::full: return "full";
  }
  return "none";
}

namespace {

// Megatron's --recompute-modules names, in its order.
constexpr std::array<std::pair<std::string_view, RecomputeModule>, 7> kRecomputeModuleNames{{
    {"core_attn", kRecomputeCoreAttention},
    {"moe_act", kRecomputeMoeActivation},
    {"layernorm", kRecomputeLayernorm},
    {"mla_up_proj", kRecomputeMlaUpProjection},
    {"mlp", kRecomputeMlp},
    {"moe", kRecomputeMoe},
    {"shared_experts", kRecomputeSharedExperts},
}};

}  // namespace

std::uint8_t parse_recompute_modules(const std::string& names) {
  std::uint8_t modules = 0;
  std::size_t start = 0;
  while (start <= names.size()) {
    const std::size_t end = std::min(names.find_first_of(", ", start), names.size());
    const std::string_view name = std::string_view(names).substr(start, end - start);
    start = end + 1;
    if (name.empty()) continue;
    const auto* found = std::find_if(kRecomputeModuleNames.begin(), kRecomputeModuleNames.end(),
                                     [&](const auto& entry) { return entry.first == name; });
    if (found == kRecomputeModuleNames.end()) {
      std::string known;
      for (const auto& entry : kRecomputeModuleNames) known += (known.empty() ? "" : ", ") + std::string(entry.first);
      throw UsageError(fmt::format("--recompute-modules: '{}' is not a module (known: {})", name, known));
    }
    modules |= found->second;
  }
  if (modules == 0) throw UsageError("--recompute-modules: names no module (give, e.g., core_attn,moe_act)");
  return modules;
}

std::vector<std::string> recompute_module_names(std::uint8_t modules) {
  std::vector<std::string> names;
  for (const auto& [name, bit] : kRecomputeModuleNames)
    if ((modules & bit) != 0) names.emplace_back(name);
  return names;
}

std::string recompute_modules_text(std::uint8_t modules) {
  return fmt::format("{}", fmt::join(recompute_module_names(modules), ","));
}

std::vector<std::uint8_t> recompute_module_ladder(const ModelSpec& model) {
  // A hybrid model's MLP blocks are its dense MLPs; its attention blocks its attention cores.
  const bool some_dense_layer =
      model.is_hybrid() ? model.layers_of(LayerKind::mlp) > 0 : model.moe_layers() < model.layers;
  const bool some_attention = !model.is_hybrid() || model.layers_of(LayerKind::attention) > 0;
  const std::pair<std::uint8_t, bool> steps[] = {
      {kRecomputeCoreAttention, some_attention},
      {kRecomputeMoeActivation, model.is_moe()},
      {kRecomputeLayernorm, true},
      {kRecomputeMlaUpProjection, model.multi_latent_attention()},
      {kRecomputeSharedExperts, model.is_moe() && model.shared_experts > 0},
      {kRecomputeMlp, some_dense_layer},
      {kRecomputeMoe, model.is_moe()},
  };
  std::vector<std::uint8_t> ladder;
  std::uint8_t modules = 0;
  for (const auto& [module, has] : steps) {
    if (!has) continue;
    modules |= module;
    ladder.push_back(modules);
  }
  return ladder;
}

std::string_view fp8_format_name(Fp8Format format) {
  switch (format) {
    case Fp8Format::none: return "none";
    case Fp8Format::hybrid: return "hybrid";
    case Fp8Format::e4m3: return "e4m3";
  }
  return "none";
}

std::string_view context_parallel_comm_name(ContextParallelComm comm) {
  switch (comm) {
    case ContextParallelComm::p2p: return "p2p";
    case ContextParallelComm::all_gather: return "all_gather";
    case ContextParallelComm::a2a: return "a2a";
    case ContextParallelComm::a2a_p2p: return "a2a+p2p";
  }
  return "p2p";
}

std::optional<ContextParallelComm> context_parallel_comm_named(std::string_view name) {
  for (ContextParallelComm comm : {ContextParallelComm::p2p, ContextParallelComm::all_gather, ContextParallelComm::a2a,
                                   ContextParallelComm::a2a_p2p})
    if (name == context_parallel_comm_name(comm)) return comm;
  return std::nullopt;
}

std::int64_t ModelSpec::kv_width() const {
  // MLA's per-head keys (qk + rope) and values (v) taken at their mean width.
  if (multi_latent_attention())
    return static_cast<std::int64_t>(heads) * (qk_head_dim + qk_pos_emb_head_dim + v_head_dim) / 2;
  return static_cast<std::int64_t>(kv_heads_or_heads()) * head_dim_or_default();
}

std::int64_t ModelSpec::attention_width() const {
  return static_cast<std::int64_t>(heads) * (multi_latent_attention() ? v_head_dim : head_dim_or_default());
}

std::int64_t ModelSpec::attention_input_parameters() const {
  const std::int64_t h = hidden;
  // Gated attention's query projection gives the gate too, as wide as the queries.
  if (!multi_latent_attention()) return h * ((attention_output_gate ? 2 : 1) * attention_width() + 2 * kv_width());
  // DeepSeek-V3's MLA: the query down (h x q_lora) and up (q_lora x heads (qk + rope)), or one
  // projection without q_lora; the key/value down (h x (kv_lora + rope)), shared by the heads'
  // RoPE key, and up (kv_lora x heads (qk + v)).
  const std::int64_t a = heads;
  const std::int64_t query_width = a * (qk_head_dim + qk_pos_emb_head_dim);
  const std::int64_t query =
      q_lora_rank > 0 ? h * q_lora_rank + std::int64_t{q_lora_rank} * query_width : h * query_width;
  const std::int64_t key_value =
      h * (kv_lora_rank + qk_pos_emb_head_dim) + std::int64_t{kv_lora_rank} * a * (qk_head_dim + v_head_dim);
  return query + key_value;
}

std::int64_t ModelSpec::attention_output_parameters() const { return attention_width() * hidden; }

double ModelSpec::attention_core_head_dim() const {
  if (!multi_latent_attention()) return head_dim_or_default();
  return 0.5 * (qk_head_dim + qk_pos_emb_head_dim + v_head_dim);
}

AttentionSpan ModelSpec::attention_span(int index) const {
  if (!attention_pattern.empty())
    return index >= 0 && index < static_cast<int>(attention_pattern.size()) ? attention_pattern[index]
                                                                            : AttentionSpan::full;
  if (window_size >= 0 && (window_attn_skip_freq <= 0 || (index + 1) % window_attn_skip_freq != 0))
    return AttentionSpan::window;
  if (attention_chunk_size > 0 && (nope_layer_interval <= 0 || (index + 1) % nope_layer_interval != 0))
    return AttentionSpan::chunk;
  return AttentionSpan::full;
}

int ModelSpec::layers_with(AttentionSpan span) const {
  int count = 0;
  for (int i = 0; i < layers; ++i) count += attention_span(i) == span ? 1 : 0;
  return count;
}

double ModelSpec::causal_keys_per_query(AttentionSpan span) const {
  const double s = seq;
  if (span == AttentionSpan::window && window_size + 1.0 < s) {
    const double w = window_size + 1.0;  // the query and the keys before it
    return w - w * w / (2 * s);
  }
  if (span == AttentionSpan::chunk && attention_chunk_size > 0 && attention_chunk_size < seq) {
    const double c = attention_chunk_size;
    const double whole = std::floor(s / c);
    const double rest = s - whole * c;
    return (whole * c * c / 2 + rest * rest / 2) / s;
  }
  return s / 2;
}

double ModelSpec::attention_span_share() const {
  if (layers <= 0) return 1.0;
  double keys = 0;
  for (const AttentionSpan span : {AttentionSpan::full, AttentionSpan::window, AttentionSpan::chunk})
    keys += layers_with(span) * causal_keys_per_query(span);
  return keys / (layers * causal_keys_per_query(AttentionSpan::full));
}

LayerKind ModelSpec::layer_kind(int index) const {
  if (is_hybrid()) {
    const char symbol = index >= 0 && index < static_cast<int>(hybrid_pattern.size())
                            ? hybrid_pattern[static_cast<std::size_t>(index)]
                            : '-';
    switch (symbol) {
      case 'M': return LayerKind::mamba;
      case '*': return LayerKind::attention;
      case 'E': return LayerKind::experts;
      case 'G': return LayerKind::linear_attention;
      default: return LayerKind::mlp;
    }
  }
  return is_moe_layer(index) ? LayerKind::moe : LayerKind::dense;
}

int ModelSpec::layers_of(LayerKind kind) const {
  int count = 0;
  for (int i = 0; i < layers; ++i) count += layer_kind(i) == kind ? 1 : 0;
  return count;
}

bool ModelSpec::is_moe_layer(int index) const {
  if (is_hybrid())
    return is_moe() && index >= 0 && index < static_cast<int>(hybrid_pattern.size()) &&
           hybrid_pattern[static_cast<std::size_t>(index)] == 'E';
  if (!moe_layer_pattern.empty())
    return is_moe() && index >= 0 && index < static_cast<int>(moe_layer_pattern.size()) &&
           moe_layer_pattern[static_cast<std::size_t>(index)];
  if (!is_moe() || index < first_k_dense_layers) return false;
  return (index - first_k_dense_layers) % std::max(moe_layer_freq, 1) == 0;
}

int ModelSpec::moe_layers() const {
  int count = 0;
  for (int i = 0; i < layers; ++i) count += is_moe_layer(i) ? 1 : 0;
  return count;
}

std::int64_t ModelSpec::expert_parameters() const {
  return (gated_mlp ? 3 : 2) * static_cast<std::int64_t>(expert_width()) * moe_ffn_or_default();
}

ModelSpec ModelSpec::moe_layer_dense_part() const {
  ModelSpec part = *this;
  part.num_experts = 0;
  part.ffn_hidden = shared_expert_width();
  part.without_mlp = shared_expert_width() == 0;
  return part;
}

std::int64_t ModelSpec::layer_matrix_parameters() const {
  const std::int64_t h = hidden;
  const std::int64_t attention = attention_input_parameters() + attention_output_parameters();
  const std::int64_t mlp = (gated_mlp ? 3 : 2) * h * ffn_or_default();
  return attention + mlp;
}

std::int64_t ModelSpec::layer_parameters() const {
  const std::int64_t h = hidden;
  // Two layer norms; MLA normalises its two latents too.
  const std::int64_t norms = 4 * h + (multi_latent_attention() ? q_lora_rank + kv_lora_rank : 0);
  // GPT keeps biases on every matrix; gated (LLaMA-style) models have none.
  const std::int64_t biases = has_biases() ? 3 * h + 2 * kv_width() + ffn_or_default() : 0;
  return layer_matrix_parameters() + norms + biases;
}

std::int64_t ModelSpec::embedding_parameters() const { return static_cast<std::int64_t>(vocab) * hidden; }

namespace {

// One MoE layer's parameters with `experts` routed experts counted: its dense part (attention, the
// shared experts), the router, the latent projections, the experts.
std::int64_t moe_layer_parameters(const ModelSpec& m, int experts) {
  return m.moe_layer_dense_part().layer_parameters() + m.router_parameters() + m.latent_projection_parameters() +
         std::int64_t{experts} * m.expert_parameters();
}

// A hybrid model's layers, each one block behind its norm: attention's and the MLP's halves of a
// transformer layer (each with one of its two norms), the experts beside the router (a MoE layer
// less its attention block), a Mamba mixer, a Gated DeltaNet.
std::int64_t hybrid_layer_parameters(const ModelSpec& m, int experts_per_moe_layer) {
  ModelSpec attention_only = m.moe_layer_dense_part();
  attention_only.without_mlp = true;
  const std::int64_t attention_layer = attention_only.layer_parameters() - 2 * static_cast<std::int64_t>(m.hidden);
  ModelSpec dense = m;
  dense.num_experts = 0;
  const std::int64_t mlp_layer = dense.layer_parameters() - attention_layer;
  const std::int64_t experts_layer = m.is_moe() ? moe_layer_parameters(m, experts_per_moe_layer) - attention_layer : 0;
  return m.layers_of(LayerKind::mamba) * m.mamba_parameters() +
         m.layers_of(LayerKind::linear_attention) * m.linear_attention_parameters() +
         m.layers_of(LayerKind::attention) * attention_layer + m.layers_of(LayerKind::mlp) * mlp_layer +
         m.layers_of(LayerKind::experts) * experts_layer;
}

// Every layer's parameters with `experts_per_moe_layer` routed experts counted in each MoE layer.
// An MTP layer is a transformer layer (a hybrid model's too) of the decoder's last layer's kind.
std::int64_t parameters_with_experts(const ModelSpec& m, int experts_per_moe_layer) {
  const std::int64_t moe_layer = m.is_moe() ? moe_layer_parameters(m, experts_per_moe_layer) : 0;
  const std::int64_t mtp_layer =
      (m.mtp_layer_is_moe() ? moe_layer : m.layer_parameters()) + m.mtp_projection_parameters();
  std::int64_t decoder = 0;
  if (m.is_hybrid()) {
    decoder = hybrid_layer_parameters(m, experts_per_moe_layer);
  } else {
    const std::int64_t moe = m.moe_layers();
    decoder = (m.layers - moe) * m.layer_parameters() + moe * moe_layer;
  }
  return decoder + m.mtp_num_layers * mtp_layer + m.embedding_parameters() * (m.tied_embeddings ? 1 : 2) +
         2 * static_cast<std::int64_t>(m.hidden);
}

}  // namespace

std::int64_t ModelSpec::total_parameters() const { return parameters_with_experts(*this, num_experts); }
std::int64_t ModelSpec::active_parameters() const { return parameters_with_experts(*this, top_k); }

namespace {

std::vector<ModelSpec> presets() {
  ModelSpec gpt13;
  gpt13.name = "gpt-1.3b";
  gpt13.layers = 24;
  gpt13.hidden = 2048;
  gpt13.heads = 16;
  gpt13.seq = 2048;
  gpt13.vocab = 50257;
  ModelSpec gpt7 = gpt13;
  gpt7.name = "gpt-7b";
  gpt7.layers = 32;
  gpt7.hidden = 4096;
  gpt7.heads = 32;
  ModelSpec llama70;
  llama70.name = "llama-70b";
  llama70.layers = 80;
  llama70.hidden = 8192;
  llama70.heads = 64;
  llama70.kv_heads = 8;
  llama70.ffn_hidden = 28672;
  llama70.gated_mlp = true;
  llama70.seq = 4096;
  llama70.vocab = 32000;
  llama70.tied_embeddings = false;
  llama70.flash_attention = true;
  // Meta Llama 3 (config.json of meta-llama/Meta-Llama-3-8B and -70B; "The Llama 3 Herd of
  // Models", Table 3, for 405B): grouped-query attention with 8 kv heads, SwiGLU, a vocabulary
  // of 128256, untied embeddings, pre-trained on sequences of 8192 with FlashAttention.
  ModelSpec llama3_8 = llama70;
  llama3_8.name = "llama-3-8b";
  llama3_8.layers = 32;
  llama3_8.hidden = 4096;
  llama3_8.heads = 32;
  llama3_8.ffn_hidden = 14336;
  llama3_8.seq = 8192;
  llama3_8.vocab = 128256;
  ModelSpec llama3_70 = llama3_8;
  llama3_70.name = "llama-3-70b";
  llama3_70.layers = 80;
  llama3_70.hidden = 8192;
  llama3_70.heads = 64;
  llama3_70.ffn_hidden = 28672;
  ModelSpec llama3_405 = llama3_8;
  llama3_405.name = "llama-3-405b";
  llama3_405.layers = 126;
  llama3_405.hidden = 16384;
  llama3_405.heads = 128;
  llama3_405.ffn_hidden = 53248;
  // GPT-3 175B (Brown et al. 2020, Table 2.1), the model of Narayanan et al. 2021's runs.
  ModelSpec gpt3 = gpt13;
  gpt3.name = "gpt3-175b";
  gpt3.layers = 96;
  gpt3.hidden = 12288;
  gpt3.heads = 96;
  std::vector<ModelSpec> all{gpt13, gpt7, llama70, llama3_8, llama3_70, llama3_405, gpt3};
  for (ModelSpec& moe : detail::moe_presets()) all.push_back(std::move(moe));
  for (ModelSpec& hybrid : detail::hybrid_presets()) all.push_back(std::move(hybrid));
  return all;
}

// The mixture-of-experts fields, each refused by its name: on a dense model (no num_experts),
// or not describing a routing Megatron can run.
void check_experts(const ModelSpec& m, const std::string& source) {
  const bool moe_field = m.top_k != 0 || m.moe_ffn_hidden != 0 || m.shared_experts != 0 || m.moe_latent_size != 0 ||
                         m.shared_expert_ffn_hidden != 0 || m.moe_layer_freq != 1 || m.first_k_dense_layers != 0 ||
                         m.capacity_factor != 0 || !m.moe_layer_pattern.empty();
  if (m.num_experts < 0) throw UsageError(source + ": num_experts must be >= 0");
  if (m.num_experts == 0) {
    if (moe_field) throw UsageError(source + ": MoE fields (top_k, moe_ffn_hidden, ...) need num_experts");
    return;
  }
  if (m.top_k < 1) throw UsageError(source + ": top_k must be at least 1 with num_experts");
  if (m.top_k > m.num_experts)
    throw UsageError(source + ": top_k " + std::to_string(m.top_k) + " is more than the " +
                     std::to_string(m.num_experts) + " experts (num_experts)");
  if (m.moe_ffn_hidden < 0 || m.shared_experts < 0 || m.shared_expert_ffn_hidden < 0)
    throw UsageError(source + ": moe_ffn_hidden, shared_experts and shared_expert_ffn_hidden must be >= 0");
  if (m.moe_layer_freq < 1) throw UsageError(source + ": moe_layer_freq must be at least 1");
  if (m.first_k_dense_layers < 0) throw UsageError(source + ": first_k_dense_layers must be >= 0");
  if (m.first_k_dense_layers >= m.layers)
    throw UsageError(source + ": first_k_dense_layers must leave at least one MoE layer");
  if (!m.moe_layer_pattern.empty()) {
    if (static_cast<int>(m.moe_layer_pattern.size()) != m.layers)
      throw UsageError(
          fmt::format("{}: model field 'moe_layer_freq' lists {} layers of {}: one 0 or 1 a layer, as "
                      "Megatron requires",
                      source, m.moe_layer_pattern.size(), m.layers));
    if (std::none_of(m.moe_layer_pattern.begin(), m.moe_layer_pattern.end(), [](bool moe) { return moe; }))
      throw UsageError(source + ": model field 'moe_layer_freq' lists no MoE layer (no 1)");
    if (m.first_k_dense_layers != 0)
      throw UsageError(source +
                       ": model fields 'moe_layer_freq' (a list) and 'first_k_dense_layers' both say which "
                       "layers are dense: give one");
  }
  if (m.capacity_factor < 0) throw UsageError(source + ": capacity_factor must be > 0 (absent: dropless)");
  if (m.moe_latent_size < 0)
    throw UsageError(fmt::format("{}: model field 'moe_latent_size' is {}: it must be >= 0 (0: the hidden width)",
                                 source, m.moe_latent_size));
}

// The sliding window's and the chunks' fields, each refused by its name where it does not describe
// the layers.
void check_attention_spans(const ModelSpec& m, const std::string& source) {
  for (const auto& [value, field] : {std::pair{m.window_attn_skip_freq, "window_attn_skip_freq"},
                                     std::pair{m.attention_chunk_size, "attention_chunk_size"},
                                     std::pair{m.nope_layer_interval, "nope_layer_interval"}})
    if (value < 0) throw UsageError(fmt::format("{}: model field '{}' is {}: it must be >= 0", source, field, value));
  auto listed = [&](AttentionSpan span) {
    return std::find(m.attention_pattern.begin(), m.attention_pattern.end(), span) != m.attention_pattern.end();
  };
  if ((m.window_attn_skip_freq > 0 || listed(AttentionSpan::window)) && m.window_size < 0)
    throw UsageError(source +
                     ": windowed layers (window_attn_skip_freq or layer_types) need a window ('window_size' or "
                     "'sliding_window')");
  if ((m.nope_layer_interval > 0 || listed(AttentionSpan::chunk)) && m.attention_chunk_size == 0)
    throw UsageError(source + ": chunked layers (nope_layer_interval or layer_types) need 'attention_chunk_size'");
  if (!m.attention_pattern.empty() && static_cast<int>(m.attention_pattern.size()) != m.layers)
    throw UsageError(
        fmt::format("{}: the layers' attention pattern has {} entries for {} layers: one a layer, as Megatron requires",
                    source, m.attention_pattern.size(), m.layers));
  if (m.attention_pattern.empty() && m.window_size >= 0 && m.attention_chunk_size > 0)
    throw UsageError(source +
                     ": model fields 'window_size' and 'attention_chunk_size' both limit every layer's attention: "
                     "list which layers do which in 'layer_types'");
}

// A hybrid model's pattern and Mamba's widths, each refused by its field where Megatron would not
// build the model (MambaMixer's and MambaStack's checks) or pipescope does not price it.
void check_hybrid(const ModelSpec& m, const std::string& source) {
  for (const auto& [value, field] :
       {std::pair{m.mamba_head_dim, "mamba_head_dim"}, std::pair{m.mamba_state_dim, "mamba_state_dim"},
        std::pair{m.mamba_num_groups, "mamba_num_groups"}, std::pair{m.mamba_conv_kernel, "conv_kernel"},
        std::pair{m.mamba_chunk_size, "chunk_size"}})
    if (value < 1)
      throw UsageError(fmt::format("{}: model field '{}' is {}: it must be at least 1", source, field, value));
  if (m.mamba_num_heads < 0)
    throw UsageError(
        fmt::format("{}: model field 'mamba_num_heads' is {}: it must be >= 0 (0: 2 x hidden / "
                    "mamba_head_dim)",
                    source, m.mamba_num_heads));
  if (!m.is_hybrid()) return;
  const std::string& p = m.hybrid_pattern;
  const auto bad = p.find_first_not_of("M*-EG");
  if (bad != std::string::npos)
    throw UsageError(fmt::format(
        "{}: model field 'hybrid_override_pattern' has '{}' at position {}: pipescope reads M (Mamba), G (Gated "
        "DeltaNet), * (attention), - (MLP) and E (experts), one a layer{}",
        source, p[bad], bad + 1,
        p[bad] == '|'   ? " (pipeline boundaries: give --pipeline-model-parallel-layout)"
        : p[bad] == '/' ? " (MTP layers: give mtp_num_layers; each is attention and the experts)"
                        : ""));
  if (static_cast<int>(p.size()) != m.layers)
    throw UsageError(
        fmt::format("{}: model field 'hybrid_override_pattern' has {} layers, 'layers' says {}: one "
                    "symbol a layer, as Megatron requires",
                    source, p.size(), m.layers));
  const bool experts = p.find('E') != std::string::npos;
  if (experts && !m.is_moe())
    throw UsageError(source + ": model field 'hybrid_override_pattern' has expert layers (E): give num_experts");
  if (!experts && m.is_moe())
    throw UsageError(source + ": num_experts with a 'hybrid_override_pattern' that has no expert layer (E)");
  if (m.moe_layer_freq != 1 || m.first_k_dense_layers != 0 || !m.moe_layer_pattern.empty())
    throw UsageError(source +
                     ": model fields 'moe_layer_freq' / 'first_k_dense_layers' and 'hybrid_override_pattern' both "
                     "say which layers have experts: give the pattern alone");
  if (!m.attention_pattern.empty() || m.window_size >= 0 || m.attention_chunk_size > 0)
    throw UsageError(source + ": windowed or chunked attention in a hybrid model is not modelled");
  if (p.find('G') != std::string::npos &&
      (m.linear_num_key_heads < 1 || m.linear_num_value_heads < 1 || m.linear_key_head_dim < 1 ||
       m.linear_value_head_dim < 1 || m.linear_conv_kernel_dim < 1 ||
       m.linear_num_value_heads % m.linear_num_key_heads != 0))
    throw UsageError(
        fmt::format("{}: Gated DeltaNet layers (G) need positive linear_* widths, the key heads ({}) "
                    "dividing the value heads ({})",
                    source, m.linear_num_key_heads, m.linear_num_value_heads));
  if (p.find('M') != std::string::npos) {
    if (m.mamba_heads() < 1)
      throw UsageError(
          fmt::format("{}: Mamba layers of hidden {} with mamba_head_dim {}: no head (give "
                      "mamba_num_heads)",
                      source, m.hidden, m.mamba_head_dim));
    if (m.mamba_heads() % m.mamba_num_groups != 0)
      throw UsageError(
          fmt::format("{}: mamba_num_groups {} does not divide the {} Mamba heads (each group's B and C "
                      "serve a whole number of heads)",
                      source, m.mamba_num_groups, m.mamba_heads()));
  }
}

// Every integer field of a model file is at most this: 2^28 is far beyond any model's width,
// depth, sequence or vocabulary, and keeps the derived widths (4 x hidden) within int.
constexpr std::int64_t kMaxModelField = std::int64_t{1} << 28;
// Parameters of a whole model, at most: 2^50 (about 10^15, a thousand times the largest models),
// so that bytes of weights, gradients and optimizer state stay far inside 64 bits.
constexpr std::int64_t kMaxParameters = std::int64_t{1} << 50;

void check_model(const ModelSpec& m, const std::string& source) {
  auto positive = [&](int v, const char* field) {
    if (v < 1) throw UsageError(source + ": model field '" + field + "' must be a positive integer");
  };
  positive(m.layers, "layers");
  positive(m.hidden, "hidden");
  positive(m.heads, "heads");
  positive(m.seq, "seq");
  positive(m.vocab, "vocab");
  // A head's width is hidden / heads unless head_dim (or MLA's widths) says otherwise: GLM-4.5's 96
  // heads of 128 over a hidden of 5120.
  if (m.head_dim == 0 && !m.multi_latent_attention() && m.hidden % m.heads != 0)
    throw UsageError(source + ": hidden must be divisible by heads (or give head_dim)");
  if (m.kv_heads < 0 || m.kv_heads > m.heads || (m.kv_heads > 0 && m.heads % m.kv_heads != 0))
    throw UsageError(source + ": kv_heads must divide heads");
  if (m.ffn_hidden < 0) throw UsageError(source + ": ffn_hidden must be >= 0");
  if (m.head_dim < 0) throw UsageError(source + ": head_dim must be >= 0");
  // A negative width read as "absent" would plan ordinary attention for a latent-attention file.
  for (const auto& [value, field] :
       {std::pair{m.q_lora_rank, "q_lora_rank"}, std::pair{m.kv_lora_rank, "kv_lora_rank"},
        std::pair{m.qk_head_dim, "qk_head_dim"}, std::pair{m.qk_pos_emb_head_dim, "qk_pos_emb_head_dim"},
        std::pair{m.v_head_dim, "v_head_dim"}})
    if (value < 0) throw UsageError(fmt::format("{}: model field '{}' is {}: it must be >= 0", source, field, value));
  if (m.multi_latent_attention() &&
      (m.qk_head_dim < 1 || m.v_head_dim < 1 || m.qk_pos_emb_head_dim < 0 || m.q_lora_rank < 0))
    throw UsageError(source + ": kv_lora_rank (multi-latent attention) needs positive qk_head_dim and v_head_dim");
  check_experts(m, source);
  check_attention_spans(m, source);
  check_hybrid(m, source);
  if (m.mtp_num_layers < 0) throw UsageError(source + ": mtp_num_layers must be >= 0");
  // The count in double, whose rounding is far below the bound: every field is at most 2^28, so
  // no product overflows here, and a total within the bound keeps the int64 counts exact.
  const double h = m.hidden, kv = h * m.kv_heads_or_heads() / m.heads;
  const double ffn = m.ffn_hidden > 0 ? m.ffn_hidden : 4 * h;
  const double experts_width = static_cast<double>(m.num_experts) * (m.moe_ffn_hidden > 0 ? m.moe_ffn_hidden : ffn) +
                               static_cast<double>(m.shared_expert_ffn_hidden);
  const double layer =
      2 * h * h + 2 * h * kv + (m.gated_mlp ? 3 : 2) * h * std::max(ffn, experts_width) + 4 * h + 3 * h + 2 * kv + ffn;
  const double mamba_inner =
      m.mamba_num_heads > 0 ? static_cast<double>(m.mamba_num_heads) * std::max(m.mamba_head_dim, 1) : 2.0 * h;
  const double linear_layer =
      h * (2.0 * m.linear_num_key_heads * m.linear_key_head_dim +
           3.0 * m.linear_num_value_heads * m.linear_value_head_dim + 2.0 * m.linear_num_value_heads) +
      (2.0 * m.linear_num_key_heads * m.linear_key_head_dim +
       1.0 * m.linear_num_value_heads * m.linear_value_head_dim) *
          m.linear_conv_kernel_dim;
  const double mamba_layer =
      h * (3 * mamba_inner + 2.0 * m.mamba_num_groups * m.mamba_state_dim + m.mamba_num_heads) + 8 * mamba_inner;
  const double total = m.layers * std::max({layer, mamba_layer, linear_layer}) +
                       m.mtp_num_layers * (layer + 2 * h * h) + 2.0 * m.vocab * h + 2 * h;
  if (total > static_cast<double>(kMaxParameters))
    throw UsageError(
        fmt::format("{}: layers {} x hidden {} (ffn_hidden {}, vocab {}) give {:.3g} parameters, beyond the "
                    "limit of 2^50 (about 1.1e15)",
                    source, m.layers, m.hidden, ffn, m.vocab, total));
}

// The fields of a model file (SPEC.md section 6).
const std::vector<std::string>& known_model_fields() {
  static const std::vector<std::string> fields = {
      "name", "layers", "hidden", "heads", "seq", "vocab", "kv_heads", "ffn_hidden", "gated_mlp", "tied_embeddings",
      "flash_attention", "dropout", "biases",
      // the same in Megatron-Core's TransformerConfig names
      "num_layers", "hidden_size", "num_attention_heads", "seq_length", "vocab_size", "num_query_groups",
      "ffn_hidden_size", "gated_linear_unit", "share_embeddings_and_output_weights", "add_bias_linear",
      // attention's own widths, multi-head latent attention (DeepSeek)
      "head_dim", "kv_channels", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_nope_head_dim",
      "qk_pos_emb_head_dim", "qk_rope_head_dim", "v_head_dim",
      // sliding-window attention, Megatron's names and Hugging Face's
      "window_size", "sliding_window", "window_attn_skip_freq", "layer_types",
      // chunked attention (Llama 4), Hugging Face's and Megatron-Bridge's names
      "attention_chunk_size", "nope_layer_interval", "no_rope_layer_interval",
      // mixture of experts, SPEC's names and Megatron's / Hugging Face's
      "num_experts", "num_moe_experts", "top_k", "moe_router_topk", "moe_ffn_hidden", "moe_ffn_hidden_size",
      "shared_experts", "shared_expert_ffn_hidden", "moe_shared_expert_intermediate_size", "moe_layer_freq",
      "first_k_dense_layers", "first_k_dense_replace", "capacity_factor", "moe_expert_capacity_factor",
      // multi-token prediction (Megatron's, DeepSeek-V3's name)
      "mtp_num_layers", "num_nextn_predict_layers",
      // hybrid models' layers and Mamba-2's mixer, Megatron's names and Hugging Face's
      "hybrid_override_pattern", "hybrid_layer_pattern", "mamba_num_heads", "mamba_head_dim", "mamba_state_dim",
      "ssm_state_size", "mamba_num_groups", "n_groups", "conv_kernel", "chunk_size", "linear_num_key_heads",
      "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
      "attention_output_gate", "moe_latent_size"};
  return fields;
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& m : presets()) names.push_back(m.name);
  return names;
}

namespace {

// Reads one model file's fields into a ModelSpec, each refusal naming the file and the field.
class ModelFieldReader {
 public:
  ModelFieldReader(const nlohmann::json& j, const std::string& source) : j_(j), source_(source) {}

  void get_int(const char* field, int& out, bool required) const {
    if (!j_.contains(field)) {
      if (required) throw UsageError(source_ + ": model field '" + field + "' is missing");
      return;
    }
    const nlohmann::json& v = j_[field];
    if (!v.is_number_integer()) throw UsageError(source_ + ": model field '" + field + "' must be an integer");
    const auto value = json_integer_in(v, INT_MIN, kMaxModelField);
    if (!value)
      throw UsageError(fmt::format("{}: model field '{}' is {}, above the limit {} (2^28)", source_, field, v.dump(),
                                   kMaxModelField));
    out = static_cast<int>(*value);
  }

  void get_bool(const char* field, bool& out) const {
    if (!j_.contains(field)) return;
    if (!j_[field].is_boolean()) throw UsageError(source_ + ": model field '" + field + "' must be true or false");
    out = j_[field].get<bool>();
  }

  void get_optional_bool(const char* field, std::optional<bool>& out) const {
    if (!j_.contains(field)) return;
    bool value = false;
    get_bool(field, value);
    out = value;
  }

  // Megatron's and Hugging Face's names are taken beside pipescope's (SPEC section 6). Two names
  // of one field that disagree are a slip in one of them, not a choice: refused.
  void get_int_named(std::initializer_list<const char*> names, int& out) const {
    get_named(names, out, [this](const char* name, int& value) { get_int(name, value, false); });
  }

  // A required field: missing under every name, refused naming the first (SPEC's).
  void get_required_named(std::initializer_list<const char*> names, int& out) const {
    if (std::none_of(names.begin(), names.end(), [this](const char* name) { return j_.contains(name); }))
      throw UsageError(fmt::format("{}: model field '{}' is missing (Megatron's '{}')", source_, *names.begin(),
                                   *std::next(names.begin())));
    get_int_named(names, out);
  }

  void get_bool_named(std::initializer_list<const char*> names, bool& out) const {
    get_named(names, out, [this](const char* name, bool& value) { get_bool(name, value); });
  }

  void get_number_named(std::initializer_list<const char*> names, double& out) const {
    get_named(names, out, [this](const char* name, double& value) {
      if (!j_[name].is_number()) throw UsageError(source_ + ": model field '" + name + "' must be a number");
      value = j_[name].get<double>();
    });
  }

  void read_dense_fields(ModelSpec& m) const {
    if (j_.contains("name")) {
      if (!j_["name"].is_string()) throw UsageError(source_ + ": model field 'name' must be a string");
      m.name = j_["name"].get<std::string>();
    }
    // Each under SPEC's name or Megatron-Core's (a provider's fields pasted as they are).
    get_required_named({"layers", "num_layers"}, m.layers);
    get_required_named({"hidden", "hidden_size"}, m.hidden);
    get_required_named({"heads", "num_attention_heads"}, m.heads);
    get_required_named({"seq", "seq_length"}, m.seq);
    get_required_named({"vocab", "vocab_size"}, m.vocab);
    get_int_named({"kv_heads", "num_query_groups"}, m.kv_heads);
    get_int_named({"ffn_hidden", "ffn_hidden_size"}, m.ffn_hidden);
    get_bool_named({"gated_mlp", "gated_linear_unit"}, m.gated_mlp);
    get_bool_named({"tied_embeddings", "share_embeddings_and_output_weights"}, m.tied_embeddings);
    get_bool("flash_attention", m.flash_attention);
    get_optional_bool("dropout", m.dropout);
    if (j_.contains("biases") || j_.contains("add_bias_linear")) {
      bool biases = false;
      get_bool_named({"biases", "add_bias_linear"}, biases);
      m.biases = biases;
    }
    get_int_named({"mtp_num_layers", "num_nextn_predict_layers"}, m.mtp_num_layers);
  }

  void read_attention_fields(ModelSpec& m) const {
    get_int_named({"head_dim", "kv_channels"}, m.head_dim);
    get_int_named({"q_lora_rank"}, m.q_lora_rank);
    get_int_named({"kv_lora_rank"}, m.kv_lora_rank);
    get_int_named({"qk_head_dim", "qk_nope_head_dim"}, m.qk_head_dim);
    get_int_named({"qk_pos_emb_head_dim", "qk_rope_head_dim"}, m.qk_pos_emb_head_dim);
    get_int_named({"v_head_dim"}, m.v_head_dim);
    read_window_fields(m);
  }

  // Megatron's window_size is (left, right): the keys a query attends to before and after it, -1
  // for no bound; a causal decoder's right side is 0, and a left side of -1 (or null) is full
  // attention. Hugging Face's sliding_window is the span a query attends to, itself included:
  // Megatron's left side plus one (GPT-OSS: 128, Megatron's (127, 0)).
  void read_window_fields(ModelSpec& m) const {
    std::optional<int> megatron_left, hugging_face_left;
    if (j_.contains("window_size")) megatron_left = window_left("window_size", j_["window_size"]);
    if (j_.contains("sliding_window")) {
      const nlohmann::json& v = j_["sliding_window"];
      if (v.is_null()) {
        hugging_face_left = -1;
      } else {
        const auto span = v.is_number_integer() ? json_integer_in(v, 1, kMaxModelField) : std::nullopt;
        if (!span)
          throw UsageError(fmt::format(
              "{}: model field 'sliding_window' is {}: it must be the keys a query attends to, itself included "
              "(1 to 2^28), or null",
              source_, v.dump()));
        hugging_face_left = static_cast<int>(*span) - 1;
      }
    }
    if (megatron_left && hugging_face_left && *megatron_left != *hugging_face_left)
      throw UsageError(fmt::format(
          "{}: model fields 'window_size' ({}) and 'sliding_window' ({}) disagree: a window of w keys before the "
          "query is a sliding_window of w + 1",
          source_, j_["window_size"].dump(), j_["sliding_window"].dump()));
    m.window_size = megatron_left.value_or(hugging_face_left.value_or(-1));
    read_attention_pattern(m);
  }

  // window_attn_skip_freq: an integer N (every N-th layer full), or Megatron's list of one 1
  // (windowed) or 0 (full) a layer; Hugging Face's layer_types names each layer's attention.
  // Chunks: attention_chunk_size, and every nope_layer_interval-th layer full.
  void read_attention_pattern(ModelSpec& m) const {
    std::vector<AttentionSpan> megatron, hugging_face;
    bool listed = false;  // an empty list is a list of the wrong length, not an absent field
    if (j_.contains("window_attn_skip_freq")) {
      const nlohmann::json& v = j_["window_attn_skip_freq"];
      if (v.is_array()) {
        listed = true;
        for (std::size_t i = 0; i < v.size(); ++i) {
          if (!v[i].is_number_integer() || (v[i].get<std::int64_t>() != 0 && v[i].get<std::int64_t>() != 1))
            throw UsageError(fmt::format(
                "{}: model field 'window_attn_skip_freq' entry {} is {}: 1 (a windowed layer) or 0 (a full one)",
                source_, i, v[i].dump()));
          megatron.push_back(v[i].get<std::int64_t>() == 1 ? AttentionSpan::window : AttentionSpan::full);
        }
      } else if (!v.is_null()) {
        get_int("window_attn_skip_freq", m.window_attn_skip_freq, false);
      }
    }
    if (j_.contains("layer_types")) {
      const nlohmann::json& v = j_["layer_types"];
      if (!v.is_array()) throw UsageError(source_ + ": model field 'layer_types' must be a list, one entry a layer");
      listed = true;
      for (std::size_t i = 0; i < v.size(); ++i) hugging_face.push_back(layer_type(i, v[i]));
    }
    if (!megatron.empty() && !hugging_face.empty() && megatron != hugging_face)
      throw UsageError(source_ +
                       ": model fields 'window_attn_skip_freq' and 'layer_types' disagree on which layers "
                       "are windowed");
    m.attention_pattern = megatron.empty() ? hugging_face : megatron;
    if (listed && m.attention_pattern.empty())
      throw UsageError(
          fmt::format("{}: the layers' attention pattern has 0 entries for {} layers: one a layer, as "
                      "Megatron requires",
                      source_, m.layers));
    get_int("attention_chunk_size", m.attention_chunk_size, false);
    get_int_named({"nope_layer_interval", "no_rope_layer_interval"}, m.nope_layer_interval);
    if (!m.attention_pattern.empty() && (m.window_attn_skip_freq != 0 || m.nope_layer_interval != 0))
      throw UsageError(source_ +
                       ": an integer 'window_attn_skip_freq' or 'nope_layer_interval', and a list of the layers' "
                       "attention too: give one");
  }

  AttentionSpan layer_type(std::size_t index, const nlohmann::json& entry) const {
    const std::string kind = entry.is_string() ? entry.get<std::string>() : entry.dump();
    if (kind == "full_attention") return AttentionSpan::full;
    if (kind == "sliding_attention") return AttentionSpan::window;
    if (kind == "chunked_attention") return AttentionSpan::chunk;
    throw UsageError(fmt::format(
        "{}: model field 'layer_types' entry {} is '{}': pipescope prices 'full_attention', 'sliding_attention' and "
        "'chunked_attention' layers",
        source_, index, kind));
  }

  int window_left(const char* name, const nlohmann::json& v) const {
    if (v.is_null()) return -1;
    const nlohmann::json* left = &v;
    if (v.is_array()) {
      if (v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer())
        throw UsageError(source_ + ": model field '" + name + "' must be an integer or a pair [left, right]");
      if (v[1].get<std::int64_t>() != 0)
        throw UsageError(fmt::format(
            "{}: model field '{}' is {}: its right side must be 0 (a causal decoder attends to no later key)", source_,
            name, v.dump()));
      left = &v[0];
    } else if (!v.is_number_integer()) {
      throw UsageError(source_ + ": model field '" + name + "' must be an integer or a pair [left, right]");
    }
    const auto value = json_integer_in(*left, -1, kMaxModelField);
    if (!value)
      throw UsageError(
          fmt::format("{}: model field '{}' is {}: its left side is -1 (no window) or 0 to 2^28 keys before the query",
                      source_, name, v.dump()));
    return static_cast<int>(*value);
  }

  // Megatron's hybrid_override_pattern and Mamba-2's widths (Megatron's names, Hugging Face's).
  void read_hybrid_fields(ModelSpec& m) const {
    // Megatron's older name and its newer one (hybrid_layer_pattern), which must agree.
    for (const char* field : {"hybrid_override_pattern", "hybrid_layer_pattern"}) {
      if (!j_.contains(field)) continue;
      const nlohmann::json& v = j_[field];
      if (!v.is_string())
        throw UsageError(source_ + ": model field '" + field + "' must be a string, one symbol a layer");
      const std::string pattern = v.get<std::string>();
      if (pattern.empty())
        throw UsageError(source_ + ": model field '" + field + "' is empty: one symbol a layer (M G * - E)");
      if (!m.hybrid_pattern.empty() && pattern != m.hybrid_pattern)
        refuse_disagreement("hybrid_override_pattern", m.hybrid_pattern, field, pattern);
      m.hybrid_pattern = pattern;
    }
    get_int_named({"mamba_num_heads"}, m.mamba_num_heads);
    get_int_named({"mamba_head_dim"}, m.mamba_head_dim);
    get_int_named({"mamba_state_dim", "ssm_state_size"}, m.mamba_state_dim);
    get_int_named({"mamba_num_groups", "n_groups"}, m.mamba_num_groups);
    get_int_named({"conv_kernel"}, m.mamba_conv_kernel);
    get_int_named({"chunk_size"}, m.mamba_chunk_size);
    get_int_named({"linear_num_key_heads"}, m.linear_num_key_heads);
    get_int_named({"linear_num_value_heads"}, m.linear_num_value_heads);
    get_int_named({"linear_key_head_dim"}, m.linear_key_head_dim);
    get_int_named({"linear_value_head_dim"}, m.linear_value_head_dim);
    get_int_named({"linear_conv_kernel_dim"}, m.linear_conv_kernel_dim);
    get_bool("attention_output_gate", m.attention_output_gate);
  }

  void read_expert_fields(ModelSpec& m) const {
    get_int_named({"num_experts", "num_moe_experts"}, m.num_experts);
    get_int_named({"top_k", "moe_router_topk"}, m.top_k);
    get_int_named({"moe_ffn_hidden", "moe_ffn_hidden_size"}, m.moe_ffn_hidden);
    get_int_named({"shared_experts"}, m.shared_experts);
    get_int_named({"shared_expert_ffn_hidden"}, m.shared_expert_ffn_hidden);
    // Megatron's --moe-shared-expert-intermediate-size is all shared experts' width together.
    int shared_total = 0;
    get_int_named({"moe_shared_expert_intermediate_size"}, shared_total);
    if (shared_total > 0) {
      if (m.shared_experts == 0) m.shared_experts = 1;
      if (shared_total % m.shared_experts != 0)
        throw UsageError(source_ + ": moe_shared_expert_intermediate_size must divide by shared_experts");
      const int width = shared_total / m.shared_experts;
      if (j_.contains("shared_expert_ffn_hidden") && width != m.shared_expert_ffn_hidden)
        throw UsageError(
            fmt::format("{}: model fields 'moe_shared_expert_intermediate_size' ({}, over {} shared "
                        "experts) and 'shared_expert_ffn_hidden' ({}) disagree",
                        source_, shared_total, m.shared_experts, m.shared_expert_ffn_hidden));
      m.shared_expert_ffn_hidden = width;
    }
    read_moe_layer_freq(m);
    get_int_named({"first_k_dense_layers", "first_k_dense_replace"}, m.first_k_dense_layers);
    get_number_named({"capacity_factor", "moe_expert_capacity_factor"}, m.capacity_factor);
    get_int_named({"moe_latent_size"}, m.moe_latent_size);
  }

  // Megatron's --moe-layer-freq: an integer N (every N-th layer has experts), or a list of one 1
  // (experts) or 0 (a dense MLP) a layer.
  void read_moe_layer_freq(ModelSpec& m) const {
    if (!j_.contains("moe_layer_freq") || !j_["moe_layer_freq"].is_array()) {
      get_int_named({"moe_layer_freq"}, m.moe_layer_freq);
      return;
    }
    const nlohmann::json& v = j_["moe_layer_freq"];
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer() || (v[i].get<std::int64_t>() != 0 && v[i].get<std::int64_t>() != 1))
        throw UsageError(
            fmt::format("{}: model field 'moe_layer_freq' entry {} is {}: 1 (a layer with experts) or 0 (a dense one)",
                        source_, i, v[i].dump()));
      m.moe_layer_pattern.push_back(v[i].get<std::int64_t>() == 1);
    }
    if (m.moe_layer_pattern.empty()) throw UsageError(source_ + ": model field 'moe_layer_freq' is an empty list");
  }

 private:
  // The value of whichever of `names` the file gives, read by `read`; two that disagree refused.
  template <typename T, typename Read>
  void get_named(std::initializer_list<const char*> names, T& out, const Read& read) const {
    const char* taken = nullptr;
    for (const char* name : names) {
      if (!j_.contains(name)) continue;
      T value{};
      read(name, value);
      if (taken != nullptr && value != out)
        refuse_disagreement(taken, fmt::format("{}", out), name, fmt::format("{}", value));
      out = value;
      taken = name;
    }
  }

  [[noreturn]] void refuse_disagreement(const char* first, const std::string& first_value, const char* second,
                                        const std::string& second_value) const {
    throw UsageError(fmt::format("{}: model fields '{}' ({}) and '{}' ({}) are one field and disagree", source_, first,
                                 first_value, second, second_value));
  }

  const nlohmann::json& j_;
  const std::string& source_;
};

// The file's one JSON object: a model file's, or a Hugging Face config's.
nlohmann::json parse_json_object(const std::string& file_text, const std::string& source) {
  const std::string text = detail::with_nonfinite_as_null(file_text);
  if (auto problem = json_depth_problem(text)) throw UsageError(source + ": not a JSON model file: " + *problem);
  if (auto problem = json_duplicate_key_problem(text)) throw UsageError(source + ": " + *problem);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number beyond double
    throw UsageError(source + ": not a JSON model file: " + e.what());
  }
  if (!j.is_object()) throw UsageError(source + ": a model file holds one JSON object");
  return j;
}

// A field a model file does not have is a slip, not a default: `kv_head` read as absent would
// plan a model with as many key/value heads as heads.
void check_field_names(const nlohmann::json& j, const std::string& source) {
  for (const auto& [key, value] : j.items()) {
    const auto& known = known_model_fields();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const auto nearest = nearest_name(key, known);
    throw UsageError(fmt::format("{}: unknown model field '{}'{} (known: {})", source, key,
                                 nearest ? fmt::format(": did you mean '{}'?", *nearest) : std::string(),
                                 fmt::join(known, ", ")));
  }
}

void check_seq_length(std::optional<int> seq_length) {
  if (seq_length && (*seq_length < 1 || *seq_length > kMaxModelField))
    throw UsageError(fmt::format("--seq-length is {}: it must be from 1 to 2^28 tokens", *seq_length));
}

}  // namespace

ModelSpec parse_model_json(const std::string& text, const std::string& source, std::optional<int> seq_length) {
  check_seq_length(seq_length);
  nlohmann::json j = parse_json_object(text, source);
  const bool hugging_face = detail::is_hugging_face_config(j);
  if (hugging_face) {
    j = detail::model_fields_from_hugging_face(j, source, seq_length);
  } else {
    check_field_names(j, source);
    if (seq_length) {  // as Megatron's --seq-length overrides a recipe's
      j.erase("seq_length");
      j["seq"] = *seq_length;
    }
  }
  // What the translated fields fail is said of the config, not of a model file the user never wrote.
  const std::string named = hugging_face ? source + " (Hugging Face config, read as a model file)" : source;
  const ModelFieldReader reader(j, named);
  ModelSpec m;
  m.name = std::filesystem::path(source).stem().string();
  reader.read_dense_fields(m);
  reader.read_attention_fields(m);
  reader.read_expert_fields(m);
  reader.read_hybrid_fields(m);
  check_model(m, named);
  return m;
}

ModelSpec resolve_model(const std::string& name_or_path, std::optional<int> seq_length) {
  check_seq_length(seq_length);
  for (auto m : presets())
    if (m.name == name_or_path) {
      if (seq_length) m.seq = *seq_length;
      return m;
    }
  // A model file's object written out as the argument itself (as Megatron's model options become).
  if (!name_or_path.empty() && name_or_path.front() == '{') {
    ModelSpec m = parse_model_json(name_or_path, "--model", seq_length);
    if (m.name == "--model") m.name = "model";
    return m;
  }
  // A model's folder (a Hugging Face snapshot, as transformers' from_pretrained takes it): its config.json.
  std::error_code ignored;
  if (std::filesystem::is_directory(name_or_path, ignored)) {
    const std::string config = (std::filesystem::path(name_or_path) / "config.json").string();
    if (!std::filesystem::exists(config, ignored))
      throw UsageError("--model: " + name_or_path + " is a folder without a config.json (a Hugging Face model's)");
    return resolve_model(config, seq_length);
  }
  if (auto problem = input_file_problem(name_or_path, "a model file (JSON)")) throw UsageError("--model: " + *problem);
  if (std::filesystem::exists(name_or_path)) return parse_model_json(read_file(name_or_path), name_or_path, seq_length);
  std::string known;
  for (const auto& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw UsageError("--model: '" + name_or_path + "' is neither a preset (" + known +
                   "), a model file nor a Hugging Face config.json");
}

}  // namespace pipescope::sim
