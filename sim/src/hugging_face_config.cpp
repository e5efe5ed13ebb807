// Hugging Face's config.json read as a pipescope model file (docs/MODEL.md, "Hugging Face
// configurations"). Each model_type's class in transformers decides what its file leaves out: that
// Llama's MLP is gated, that GPT-2 ties its embeddings, which of Qwen3-MoE's layers have experts.
// Those rules are restated here for the model_types read; any other is refused rather than
// guessed, since a wrong guess (an ungated MLP, a dense layer) is a third off the layer's cost.
#include "hugging_face_config.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/json_limits.hpp"

namespace pipescope::sim::detail {

namespace {

using nlohmann::json;

// Where a model_type keeps its experts, and how many layers carry them.
enum class Experts { none, mixtral, qwen, deepseek, gpt_oss, llama4, olmoe, nemotron_h, qwen_next };

struct Family {
  std::string_view model_type;
  bool gated;                 // SwiGLU / GeGLU: three MLP matrices
  bool tied_by_default;       // tie_word_embeddings where the file does not say (its class's default)
  bool sliding_window_every;  // a sliding_window, when given, bounds every layer (Mistral's)
  Experts experts;
};

constexpr std::array kFamilies = {
    Family{"llama", true, false, false, Experts::none},
    Family{"mistral", true, false, true, Experts::none},
    Family{"qwen2", true, false, false, Experts::none},
    Family{"qwen3", true, false, false, Experts::none},
    Family{"qwen3_vl_text", true, false, false, Experts::none},  // Qwen3-VL's language model: Qwen3's
    Family{"mimo", true, false, false, Experts::none},           // MiMo: Qwen2's layers and MTP layers
    Family{"gemma", true, true, false, Experts::none},
    Family{"gemma2", true, true, false, Experts::none},
    Family{"gemma3_text", true, true, false, Experts::none},
    Family{"olmo2", true, false, false, Experts::none},
    Family{"granite", true, false, false, Experts::none},
    Family{"phi3", true, false, true, Experts::none},        // Phi-3/4: a sliding_window bounds every layer
    Family{"gpt_neox", false, false, false, Experts::none},  // Pythia: GELU MLP, biases
    Family{"olmoe", true, false, false, Experts::olmoe},
    Family{"mixtral", true, false, true, Experts::mixtral},
    Family{"qwen2_moe", true, false, false, Experts::qwen},
    Family{"qwen3_moe", true, false, false, Experts::qwen},
    Family{"qwen3_vl_moe_text", true, false, false, Experts::qwen},  // Qwen3-VL-MoE's: Qwen3-MoE's
    Family{"deepseek_v2", true, false, false, Experts::deepseek},
    Family{"deepseek_v3", true, false, false, Experts::deepseek},
    Family{"kimi_k2", true, false, false, Experts::deepseek},   // Kimi K2: DeepSeek-V3's architecture
    Family{"glm4_moe", true, false, false, Experts::deepseek},  // GLM-4.5: DeepSeek's experts, GQA
    Family{"gpt_oss", true, false, false, Experts::gpt_oss},
    Family{"minimax_m2", true, false, false, Experts::mixtral},  // Mixtral's names, no window
    Family{"llama4_text", true, false, false, Experts::llama4},
    Family{"gpt2", false, true, false, Experts::none},
    // Nemotron-H and Nemotron 3: hybrid_override_pattern's Mamba-2, attention, squared-ReLU MLP
    // and expert layers.
    Family{"nemotron_h", false, false, false, Experts::nemotron_h},
    // Qwen3-Next and Qwen3.5 (inside qwen3_5 / qwen3_5_moe): Gated DeltaNet and gated attention
    // layers, each with an MLP or Qwen's experts.
    Family{"qwen3_next", true, false, false, Experts::qwen_next},
    Family{"qwen3_5_text", true, false, false, Experts::qwen_next},
    Family{"qwen3_5_moe_text", true, false, false, Experts::qwen_next},
};

// Multimodal configurations (Llama 4's, Gemma 3's, Qwen3-VL's, Kimi K2.5's) keep the language
// model's fields in a text_config; its own model_type, where the file leaves it out, is the outer
// one's text model, and whether the head is tied, where it does not say, the outer one's.
constexpr std::array<std::string_view, 2> kWrappers = {"llama4", "gemma3"};

// The family of a model_type pipescope reads; none for another.
const Family* find_family(std::string_view model_type) {
  const auto it =
      std::find_if(kFamilies.begin(), kFamilies.end(), [&](const Family& f) { return f.model_type == model_type; });
  return it == kFamilies.end() ? nullptr : &*it;
}

constexpr std::int64_t kMaxField = std::int64_t{1} << 28;  // as for a model file's integers
constexpr int kMaxLayers = 1 << 16;

// Reads a config's fields, each refusal naming the file and the field as the config spells it.
class ConfigReader {
 public:
  ConfigReader(const json& config, const std::string& source, std::string prefix)
      : config_(config), source_(source), prefix_(std::move(prefix)) {}

  bool has(const char* field) const { return config_.contains(field) && !config_[field].is_null(); }

  // Absent or null: none.
  std::optional<int> integer(const char* field) const {
    if (!has(field)) return std::nullopt;
    const json& v = config_[field];
    const auto value = v.is_number_integer() ? json_integer_in(v, 0, kMaxField) : std::nullopt;
    if (!value) refuse(field, v, "an integer from 0 to 2^28");
    return static_cast<int>(*value);
  }

  int required(const char* field) const {
    if (const auto value = integer(field)) return *value;
    throw UsageError(fmt::format("{}: Hugging Face config field '{}{}' is missing", source_, prefix_, field));
  }

  std::optional<bool> boolean(const char* field) const {
    if (!has(field)) return std::nullopt;
    if (!config_[field].is_boolean()) refuse(field, config_[field], "true or false");
    return config_[field].get<bool>();
  }

  std::optional<double> number(const char* field) const {
    if (!has(field)) return std::nullopt;
    if (!config_[field].is_number()) refuse(field, config_[field], "a number");
    return config_[field].get<double>();
  }

  // A list of integers (layer indices, or 0/1 a layer).
  std::optional<std::vector<int>> integers(const char* field) const {
    if (!has(field)) return std::nullopt;
    const json& v = config_[field];
    if (!v.is_array()) refuse(field, v, "a list of integers");
    std::vector<int> out;
    for (const json& entry : v) {
      const auto value = entry.is_number_integer() ? json_integer_in(entry, 0, kMaxField) : std::nullopt;
      if (!value) refuse(field, v, "a list of integers from 0 to 2^28");
      out.push_back(static_cast<int>(*value));
    }
    return out;
  }

  const json& raw(const char* field) const { return config_[field]; }

  [[noreturn]] void refuse(const char* field, const json& value, const char* what) const {
    std::string shown = value.dump();
    if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
    throw UsageError(
        fmt::format("{}: Hugging Face config field '{}{}' is {}: it must be {}", source_, prefix_, field, shown, what));
  }

 private:
  const json& config_;
  const std::string& source_;
  std::string prefix_;
};

const Family& family_of(const std::string& model_type, const std::string& source, const std::string& prefix) {
  if (const Family* f = find_family(model_type)) return *f;
  throw UsageError(fmt::format(
      "{}: Hugging Face config field '{}model_type' is '{}', which pipescope does not read (it reads {}): write "
      "its shape as a pipescope model file (docs/MODEL.md)",
      source, prefix, model_type, fmt::join(hugging_face_model_types(), ", ")));
}

// The model's name: the Hub's id the file was saved from, else the folder holding config.json.
std::string model_name(const json& config, const std::string& source) {
  if (config.contains("_name_or_path") && config["_name_or_path"].is_string()) {
    const std::string id = config["_name_or_path"].get<std::string>();
    std::string last = std::filesystem::path(id).filename().string();
    if (!last.empty()) return last;
  }
  const std::filesystem::path path(source);
  const std::string folder = path.parent_path().filename().string();
  return path.stem() == "config" && !folder.empty() ? folder : path.stem().string();
}

// Each of `layers` layers' answer to `where` (index from 0).
template <typename Where>
std::vector<bool> layers_where(int layers, const Where& where) {
  std::vector<bool> out(static_cast<std::size_t>(std::max(layers, 0)));
  for (int i = 0; i < layers; ++i) out[static_cast<std::size_t>(i)] = where(i);
  return out;
}

// Hugging Face's layer_types: `limited` where the layer is, full_attention elsewhere.
std::vector<std::string> spans_named(const std::vector<bool>& limited_layers, const char* limited) {
  std::vector<std::string> types(limited_layers.size());
  std::transform(limited_layers.begin(), limited_layers.end(), types.begin(),
                 [&](bool l) { return l ? limited : "full_attention"; });
  return types;
}

// Which layers attend within a window, or to their chunk, as the model_type's class decides.
void translate_attention(const ConfigReader& r, const Family& f, int layers, json& out) {
  const std::string_view type = f.model_type;
  if (f.experts == Experts::qwen_next) return;  // its layer_types name the mixers (translate_linear_hybrid)
  if (r.has("layer_types")) {
    out["layer_types"] = r.raw("layer_types");  // named as pipescope's model files name them
  } else if (type == "qwen2" || type == "qwen3" || type == "qwen2_moe" || type == "qwen3_moe" ||
             type == "qwen3_vl_text" || type == "qwen3_vl_moe_text" || type == "mimo") {
    // Qwen's sliding window applies only with use_sliding_window, from max_window_layers on.
    if (r.boolean("use_sliding_window").value_or(false) && r.has("sliding_window")) {
      const int first = r.integer("max_window_layers").value_or(layers);
      out["layer_types"] = spans_named(layers_where(layers, [&](int i) { return i >= first; }), "sliding_attention");
    } else {
      return;  // its sliding_window is unused
    }
  } else if (type == "gemma2" || type == "gpt_oss") {
    if (r.has("sliding_window")) {  // every other layer, the first windowed
      out["layer_types"] = spans_named(layers_where(layers, [](int i) { return i % 2 == 0; }), "sliding_attention");
    }
  } else if (type == "gemma3_text") {
    if (r.has("sliding_window")) {  // five windowed layers to one full (sliding_window_pattern 6)
      const int pattern = std::max(1, r.integer("sliding_window_pattern").value_or(6));
      out["layer_types"] =
          spans_named(layers_where(layers, [&](int i) { return (i + 1) % pattern != 0; }), "sliding_attention");
    }
  } else if (type == "llama4_text") {
    // Llama 4's RoPE layers attend within their chunk, its NoPE layers (every 4th) to everything.
    if (const auto chunk = r.integer("attention_chunk_size")) {
      out["attention_chunk_size"] = *chunk;
      if (const auto rope = r.integers("no_rope_layers")) {
        if (static_cast<int>(rope->size()) != layers)
          r.refuse("no_rope_layers", r.raw("no_rope_layers"), "one 0 or 1 a layer");
        out["layer_types"] =
            spans_named(layers_where(layers, [&](int i) { return (*rope)[static_cast<std::size_t>(i)] != 0; }),
                        "chunked_attention");
      } else {
        out["nope_layer_interval"] = r.integer("no_rope_layer_interval").value_or(4);
      }
    }
    return;
  } else if (!f.sliding_window_every) {
    return;  // Llama, DeepSeek, GPT-2: no window
  }
  // The window's width, where a layer uses it (a Qwen file keeps one its layers do not use).
  const bool listed = out.contains("layer_types");
  const bool windowed = !listed || std::any_of(out["layer_types"].begin(), out["layer_types"].end(),
                                               [](const json& t) { return t == "sliding_attention"; });
  if (windowed && r.has("sliding_window")) out["sliding_window"] = r.required("sliding_window");
  if (listed && r.has("attention_chunk_size")) out["attention_chunk_size"] = r.required("attention_chunk_size");
}

// Nemotron-H's layers and Mamba-2 mixer in Megatron's names (Megatron-Bridge's NemotronH bridge
// maps them so); the attention heads' width under its older name.
void translate_hybrid(const ConfigReader& r, json& out) {
  if (!r.has("hybrid_override_pattern") && r.has("layers_block_type")) {
    // Newer NemotronH configs (Nemotron 3 Ultra's) name each layer instead of the pattern.
    const json& types = r.raw("layers_block_type");
    std::string pattern;
    for (const json& type : types) {
      if (type == "mamba")
        pattern += 'M';
      else if (type == "attention")
        pattern += '*';
      else if (type == "mlp")
        pattern += '-';
      else if (type == "moe")
        pattern += 'E';
      else
        r.refuse("layers_block_type", types, "one 'mamba', 'attention', 'mlp' or 'moe' a layer");
    }
    out["hybrid_override_pattern"] = pattern;
  } else {
    if (!r.has("hybrid_override_pattern") || !r.raw("hybrid_override_pattern").is_string())
      r.refuse("hybrid_override_pattern", r.has("hybrid_override_pattern") ? r.raw("hybrid_override_pattern") : json(),
               "a string, one symbol a layer (M Mamba, * attention, - MLP, E experts)");
    out["hybrid_override_pattern"] = r.raw("hybrid_override_pattern");
  }
  // Nemotron 3 Super's LatentMoE: its experts in a narrower width; its MTP layers ("*E"), a
  // transformer layer with the experts each.
  if (const int latent = r.integer("moe_latent_size").value_or(0); latent > 0) out["moe_latent_size"] = latent;
  if (const auto mtp = r.integer("num_nextn_predict_layers")) out["mtp_num_layers"] = *mtp;
  if (!out.contains("head_dim"))
    if (const auto width = r.integer("attention_head_dim")) out["head_dim"] = *width;
  for (const auto& [hugging_face, megatron] :
       {std::pair{"mamba_num_heads", "mamba_num_heads"}, std::pair{"mamba_head_dim", "mamba_head_dim"},
        std::pair{"ssm_state_size", "mamba_state_dim"}, std::pair{"n_groups", "mamba_num_groups"},
        std::pair{"conv_kernel", "conv_kernel"}, std::pair{"chunk_size", "chunk_size"}})
    if (const auto value = r.integer(hugging_face)) out[megatron] = *value;
}

// Qwen3-Next's and Qwen3.5's layers as a hybrid pattern of two blocks each (as Megatron's
// hybrid pattern writes them): the mixer, G (a Gated DeltaNet) where layer_types says
// linear_attention (else all but every full_attention_interval-th), * (gated attention) where it
// says full_attention; then E where the layer has Qwen's experts (not in mlp_only_layers, and
// (i + 1) dividing by decoder_sparse_step), - (the MLP) elsewhere. The Gated DeltaNet's widths
// and the MTP layers under their names.
void translate_linear_hybrid(const ConfigReader& r, int layers, json& out) {
  std::vector<bool> linear(static_cast<std::size_t>(layers));
  if (r.has("layer_types")) {
    const json& types = r.raw("layer_types");
    if (!types.is_array() || static_cast<int>(types.size()) != layers)
      r.refuse("layer_types", types, "one 'linear_attention' or 'full_attention' a layer");
    for (int i = 0; i < layers; ++i) {
      const json& type = types[static_cast<std::size_t>(i)];
      if (type != "linear_attention" && type != "full_attention")
        r.refuse("layer_types", types, "one 'linear_attention' or 'full_attention' a layer");
      linear[static_cast<std::size_t>(i)] = type == "linear_attention";
    }
  } else {
    const int interval = std::max(1, r.integer("full_attention_interval").value_or(4));
    for (int i = 0; i < layers; ++i) linear[static_cast<std::size_t>(i)] = (i + 1) % interval != 0;
  }
  const bool experts = r.integer("num_experts").value_or(0) > 0;
  const int step = std::max(1, r.integer("decoder_sparse_step").value_or(1));
  const std::vector<int> dense = r.integers("mlp_only_layers").value_or(std::vector<int>{});
  std::string pattern;
  for (int i = 0; i < layers; ++i) {
    pattern += linear[static_cast<std::size_t>(i)] ? 'G' : '*';
    const bool moe = experts && std::find(dense.begin(), dense.end(), i) == dense.end() && (i + 1) % step == 0;
    pattern += moe ? 'E' : '-';
  }
  out["hybrid_override_pattern"] = pattern;
  out["layers"] = 2 * layers;
  out["attention_output_gate"] = r.boolean("attn_output_gate").value_or(true);
  for (const char* field : {"linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                            "linear_value_head_dim", "linear_conv_kernel_dim"})
    if (const auto value = r.integer(field)) out[field] = *value;
  for (const char* field : {"mtp_num_hidden_layers", "num_nextn_predict_layers"})
    if (const auto mtp = r.integer(field)) out["mtp_num_layers"] = *mtp;
}

// Megatron's list form of moe_layer_freq (1 a layer with experts), or nothing where every layer
// has them.
void write_expert_layers(const std::vector<bool>& moe, json& out) {
  if (std::all_of(moe.begin(), moe.end(), [](bool m) { return m; })) return;
  std::vector<int> listed(moe.size());
  std::transform(moe.begin(), moe.end(), listed.begin(), [](bool m) { return m ? 1 : 0; });
  out["moe_layer_freq"] = listed;
}

// The routed experts: how many, how many a token meets, one's width.
void write_routed(json& out, int experts, int top_k, int width) {
  out["num_experts"] = experts;
  out["top_k"] = top_k;
  out["moe_ffn_hidden"] = width;
}

// Qwen2/3-MoE's, Qwen3-Next's and Qwen3.5's experts: num_experts of moe_intermediate_size, and one
// shared expert of shared_expert_intermediate_size; whether the model has any.
bool write_qwen_experts(const ConfigReader& r, json& out) {
  const int experts = r.integer("num_experts").value_or(0);
  if (experts == 0) return false;
  write_routed(out, experts, r.required("num_experts_per_tok"), r.required("moe_intermediate_size"));
  if (const int shared = r.integer("shared_expert_intermediate_size").value_or(0); shared > 0) {
    out["shared_experts"] = 1;
    out["shared_expert_ffn_hidden"] = shared;
  }
  return true;
}

void translate_experts(const ConfigReader& r, const Family& f, int layers, json& out) {
  const auto top_k = [&] { return r.required("num_experts_per_tok"); };
  switch (f.experts) {
    case Experts::none: return;
    case Experts::mixtral:
    case Experts::gpt_oss: {
      // Every layer's MLP is experts of intermediate_size (GPT-OSS's older files: experts_per_token).
      const int experts = r.required("num_local_experts");
      if (experts == 0) return;
      write_routed(out, experts, r.has("num_experts_per_tok") ? top_k() : r.required("experts_per_token"),
                   r.required("intermediate_size"));
      return;
    }
    case Experts::olmoe: {  // every layer's MLP is num_experts of intermediate_size
      const int experts = r.required("num_experts");
      if (experts == 0) return;
      write_routed(out, experts, top_k(), r.required("intermediate_size"));
      return;
    }
    case Experts::qwen: {
      if (!write_qwen_experts(r, out)) return;
      // transformers' Qwen2/3-MoE: experts where the layer is not in mlp_only_layers and
      // (index + 1) divides by decoder_sparse_step.
      const int step = std::max(1, r.integer("decoder_sparse_step").value_or(1));
      const std::vector<int> dense = r.integers("mlp_only_layers").value_or(std::vector<int>{});
      write_expert_layers(
          layers_where(
              layers,
              [&](int i) { return std::find(dense.begin(), dense.end(), i) == dense.end() && (i + 1) % step == 0; }),
          out);
      return;
    }
    case Experts::deepseek: {
      const int experts = r.integer("n_routed_experts").value_or(0);
      if (experts == 0) return;
      write_routed(out, experts, top_k(), r.required("moe_intermediate_size"));
      if (const int shared = r.integer("n_shared_experts").value_or(0); shared > 0) out["shared_experts"] = shared;
      // transformers' DeepSeek-V2/V3: experts from first_k_dense_replace on, where the index
      // divides by moe_layer_freq.
      const int first_dense = r.integer("first_k_dense_replace").value_or(0);
      const int freq = std::max(1, r.integer("moe_layer_freq").value_or(1));
      if (freq == 1 && first_dense < layers)
        out["first_k_dense_replace"] = first_dense;
      else
        write_expert_layers(layers_where(layers, [&](int i) { return i >= first_dense && i % freq == 0; }), out);
      return;
    }
    case Experts::nemotron_h: {
      // NemotronHConfig: experts only in the pattern's E layers; the shared experts' width is
      // moe_shared_expert_intermediate_size, all of them together, as Megatron's.
      const json& pattern = out["hybrid_override_pattern"];
      if (pattern.get<std::string>().find('E') == std::string::npos) return;
      write_routed(out, r.required("n_routed_experts"), top_k(), r.required("moe_intermediate_size"));
      if (const int shared = r.integer("moe_shared_expert_intermediate_size").value_or(0); shared > 0) {
        out["shared_experts"] = std::max(1, r.integer("n_shared_experts").value_or(1));
        out["moe_shared_expert_intermediate_size"] = shared;
      }
      return;
    }
    case Experts::qwen_next:
      // Qwen's experts and shared expert; which layers have them, the hybrid pattern says.
      write_qwen_experts(r, out);
      return;
    case Experts::llama4: {
      const int experts = r.required("num_local_experts");
      if (experts == 0) return;
      const int width = r.required("intermediate_size");
      write_routed(out, experts, top_k(), width);
      out["shared_experts"] = 1;  // Llama 4's every MoE layer has one shared expert of the experts' width
      out["shared_expert_ffn_hidden"] = width;
      std::vector<bool> moe(static_cast<std::size_t>(layers), false);
      if (const auto listed = r.integers("moe_layers")) {
        for (int i : *listed) {
          if (i >= layers) r.refuse("moe_layers", r.raw("moe_layers"), "layer indices below num_hidden_layers");
          moe[static_cast<std::size_t>(i)] = true;
        }
      } else {  // interleave_moe_layer_step N: layers N - 1, 2N - 1, ...
        const int step = std::max(1, r.integer("interleave_moe_layer_step").value_or(1));
        for (int i = step - 1; i < layers; i += step) moe[static_cast<std::size_t>(i)] = true;
      }
      // The dense layers' MLP is intermediate_size_mlp wide; with none, the experts' width stands.
      const bool any_dense = std::find(moe.begin(), moe.end(), false) != moe.end();
      out["ffn_hidden"] = any_dense ? r.required("intermediate_size_mlp") : width;
      write_expert_layers(moe, out);
      return;
    }
  }
}

// Dropout as trained: any positive rate among the ones the class has.
bool has_dropout(const ConfigReader& r, const Family& f) {
  bool any = false;
  for (const char* field : {"attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop"})
    if (const auto rate = r.number(field)) any = any || *rate > 0;
  // GPT-2's class defaults each rate to 0.1; the gated families' to 0.
  if (f.model_type == "gpt2" && !r.has("resid_pdrop")) any = true;
  return any;
}

}  // namespace

bool is_hugging_face_config(const json& j) { return j.is_object() && j.contains("model_type"); }

std::string with_nonfinite_as_null(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const std::string_view literal : {"-Infinity", "Infinity", "NaN"}) {
      if (text.substr(i, literal.size()) == literal) {
        out += "null";
        i += literal.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

const std::vector<std::string>& hugging_face_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> out(kFamilies.size());
    std::transform(kFamilies.begin(), kFamilies.end(), out.begin(),
                   [](const Family& f) { return std::string(f.model_type); });
    out.insert(out.end(), kWrappers.begin(), kWrappers.end());
    return out;
  }();
  return types;
}

json model_fields_from_hugging_face(const json& config, const std::string& source, std::optional<int> seq_length) {
  if (!config["model_type"].is_string())
    throw UsageError(source + ": Hugging Face config field 'model_type' must be a string");
  std::string model_type = config["model_type"].get<std::string>();
  const json* text = &config;
  std::string prefix;
  const bool wrapper = std::find(kWrappers.begin(), kWrappers.end(), model_type) != kWrappers.end();
  if (wrapper || (!find_family(model_type) && config.contains("text_config"))) {
    if (!config.contains("text_config") || !config["text_config"].is_object())
      throw UsageError(
          fmt::format("{}: Hugging Face config of model_type '{}' has no 'text_config' object", source, model_type));
    text = &config["text_config"];
    prefix = "text_config.";
    const json& inner = *text;
    model_type = inner.contains("model_type") && inner["model_type"].is_string()
                     ? inner["model_type"].get<std::string>()
                     : model_type + "_text";
  }
  const ConfigReader r(*text, source, prefix);
  const Family& f = family_of(model_type, source, prefix);
  const bool gpt2 = f.model_type == "gpt2";

  json out;
  out["name"] = model_name(config, source);
  const char* layers_field = gpt2 ? "n_layer" : "num_hidden_layers";
  // A NemotronH config may leave the count null and list the layers (layers_block_type) instead.
  const bool listed_layers = f.experts == Experts::nemotron_h && !r.has(layers_field) && r.has("layers_block_type") &&
                             r.raw("layers_block_type").is_array();
  if (listed_layers) layers_field = "layers_block_type";
  const int layers = listed_layers ? static_cast<int>(std::min<std::size_t>(r.raw(layers_field).size(), kMaxLayers + 1))
                                   : r.required(layers_field);
  // The translation lists some fields layer by layer: a bound far above any model's depth keeps
  // those lists small.
  if (layers > kMaxLayers) r.refuse(layers_field, r.raw(layers_field), "at most 65536 layers");
  out["layers"] = layers;
  out["hidden"] = r.required(gpt2 ? "n_embd" : "hidden_size");
  out["heads"] = r.required(gpt2 ? "n_head" : "num_attention_heads");
  out["vocab"] = r.required("vocab_size");
  if (!seq_length) {
    const char* longest = gpt2 ? "n_positions" : "max_position_embeddings";
    throw UsageError(fmt::format(
        "{}: a Hugging Face config does not say the sequence length to train at{}: give --seq-length", source,
        r.has(longest)
            ? fmt::format(" ({} {} is the longest context the model supports)", longest, r.raw(longest).dump())
            : std::string()));
  }
  out["seq"] = *seq_length;
  if (const auto kv = r.integer("num_key_value_heads")) out["kv_heads"] = *kv;
  // With multi-head latent attention a file's head_dim is the RoPE part of its heads, which the MLA
  // fields below give; elsewhere it is the head width.
  if (!r.has("kv_lora_rank"))
    if (const auto width = r.integer("head_dim")) out["head_dim"] = *width;
  if (const auto ffn = r.integer(gpt2 ? "n_inner" : "intermediate_size")) out["ffn_hidden"] = *ffn;
  out["gated_mlp"] = f.gated;
  std::optional<bool> tied = r.boolean("tie_word_embeddings");
  if (!tied && text != &config) tied = ConfigReader(config, source, "").boolean("tie_word_embeddings");
  out["tied_embeddings"] = tied.value_or(f.tied_by_default);
  out["flash_attention"] = true;  // every model_type here trains with a fused attention kernel
  out["dropout"] = has_dropout(r, f);
  if (gpt2) {
    out["biases"] = true;
  } else if (r.has("attention_bias") || r.has("mlp_bias")) {
    out["biases"] = r.boolean("attention_bias").value_or(false) || r.boolean("mlp_bias").value_or(false);
  }
  if (f.experts == Experts::deepseek) {
    if (const auto rank = r.integer("q_lora_rank")) out["q_lora_rank"] = *rank;
    if (const auto rank = r.integer("kv_lora_rank")) {
      out["kv_lora_rank"] = *rank;
      out["qk_head_dim"] = r.required("qk_nope_head_dim");
      out["qk_pos_emb_head_dim"] = r.required("qk_rope_head_dim");
      out["v_head_dim"] = r.required("v_head_dim");
    }
    if (const auto mtp = r.integer("num_nextn_predict_layers")) out["mtp_num_layers"] = *mtp;
  }
  if (f.model_type == "mimo")
    if (const auto mtp = r.integer("num_nextn_predict_layers")) out["mtp_num_layers"] = *mtp;
  if (f.experts == Experts::nemotron_h) translate_hybrid(r, out);
  if (f.experts == Experts::qwen_next) translate_linear_hybrid(r, layers, out);
  translate_attention(r, f, layers, out);
  translate_experts(r, f, layers, out);
  return out;
}

}  // namespace pipescope::sim::detail
