// The model side of the first-principles costs: ModelSpec's counts, the presets and model files.
#include "pipescope/sim/model.hpp"

#include <algorithm>
#include <climits>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/input_file.hpp"
#include "pipescope/core/json_limits.hpp"
#include "pipescope/core/nearest_name.hpp"

namespace pipescope::sim {

std::string_view recomputation_name(Recomputation recomputation) {
  switch (recomputation) {
    case Recomputation::none: return "none";
    case Recomputation::selective: return "selective";
    case Recomputation::full: return "full";
  }
  return "none";
}

std::string_view fp8_format_name(Fp8Format format) {
  switch (format) {
    case Fp8Format::none: return "none";
    case Fp8Format::hybrid: return "hybrid";
    case Fp8Format::e4m3: return "e4m3";
  }
  return "none";
}

std::int64_t ModelSpec::kv_width() const {
  return static_cast<std::int64_t>(hidden) * kv_heads_or_heads() / std::max(heads, 1);
}

std::int64_t ModelSpec::layer_matrix_parameters() const {
  const std::int64_t h = hidden;
  const std::int64_t attention = 2 * h * h + 2 * h * kv_width();  // Q and O, K and V
  const std::int64_t mlp = (gated_mlp ? 3 : 2) * h * ffn_or_default();
  return attention + mlp;
}

std::int64_t ModelSpec::layer_parameters() const {
  const std::int64_t h = hidden;
  const std::int64_t norms = 4 * h;
  // GPT keeps biases on every matrix; gated (LLaMA-style) models have none.
  const std::int64_t biases = has_biases() ? 3 * h + 2 * kv_width() + ffn_or_default() : 0;
  return layer_matrix_parameters() + norms + biases;
}

std::int64_t ModelSpec::embedding_parameters() const { return static_cast<std::int64_t>(vocab) * hidden; }

std::int64_t ModelSpec::total_parameters() const {
  return static_cast<std::int64_t>(layers) * layer_parameters() + embedding_parameters() * (tied_embeddings ? 1 : 2) +
         2 * static_cast<std::int64_t>(hidden);
}

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
  return {gpt13, gpt7, llama70, llama3_8, llama3_70, llama3_405, gpt3};
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
  if (m.hidden % m.heads != 0) throw UsageError(source + ": hidden must be divisible by heads");
  if (m.kv_heads < 0 || m.kv_heads > m.heads || (m.kv_heads > 0 && m.heads % m.kv_heads != 0))
    throw UsageError(source + ": kv_heads must divide heads");
  if (m.ffn_hidden < 0) throw UsageError(source + ": ffn_hidden must be >= 0");
  // The count in double, whose rounding is far below the bound: every field is at most 2^28, so
  // no product overflows here, and a total within the bound keeps the int64 counts exact.
  const double h = m.hidden, kv = h * m.kv_heads_or_heads() / m.heads;
  const double ffn = m.ffn_hidden > 0 ? m.ffn_hidden : 4 * h;
  const double layer = 2 * h * h + 2 * h * kv + (m.gated_mlp ? 3 : 2) * h * ffn + 4 * h + 3 * h + 2 * kv + ffn;
  const double total = m.layers * layer + 2.0 * m.vocab * h + 2 * h;
  if (total > static_cast<double>(kMaxParameters))
    throw UsageError(fmt::format("{}: layers {} x hidden {} (ffn_hidden {}, vocab {}) give {:.3g} parameters, beyond the "
                                 "limit of 2^50 (about 1.1e15)",
                                 source, m.layers, m.hidden, ffn, m.vocab, total));
}

// The fields of a model file (SPEC.md section 6).
const std::vector<std::string>& known_model_fields() {
  static const std::vector<std::string> fields = {"name", "layers", "hidden", "heads", "seq", "vocab", "kv_heads",
                                                  "ffn_hidden", "gated_mlp", "tied_embeddings", "flash_attention",
                                                  "dropout", "biases"};
  return fields;
}

// Megatron's mixture-of-experts fields, which SPEC names for model files but this simulator does
// not model: refused, never read as a dense model.
bool is_mixture_of_experts_field(const std::string& key) {
  static const std::vector<std::string> fields = {"num_experts", "top_k", "moe_ffn_hidden", "shared_experts",
                                                  "shared_expert_ffn_hidden", "moe_layer_freq", "first_k_dense_layers",
                                                  "capacity_factor"};
  return std::find(fields.begin(), fields.end(), key) != fields.end();
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& m : presets()) names.push_back(m.name);
  return names;
}

ModelSpec parse_model_json(const std::string& text, const std::string& source) {
  if (auto problem = json_depth_problem(text)) throw UsageError(source + ": not a JSON model file: " + *problem);
  if (auto problem = json_duplicate_key_problem(text)) throw UsageError(source + ": " + *problem);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw UsageError(source + ": not a JSON model file: " + e.what());
  }
  if (!j.is_object()) throw UsageError(source + ": a model file holds one JSON object");
  // A field a model file does not have is a slip, not a default: `kv_head` read as absent would
  // plan a model with as many key/value heads as heads.
  for (const auto& [key, value] : j.items()) {
    const auto& known = known_model_fields();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    if (is_mixture_of_experts_field(key))
      throw UsageError(fmt::format("{}: model field '{}': mixture-of-experts models are not simulated by this ppsim", source,
                                   key));
    const auto nearest = nearest_name(key, known);
    throw UsageError(fmt::format("{}: unknown model field '{}'{} (known: {})", source, key,
                                 nearest ? fmt::format(": did you mean '{}'?", *nearest) : std::string(),
                                 fmt::join(known, ", ")));
  }
  ModelSpec m;
  m.name = std::filesystem::path(source).stem().string();
  auto get_int = [&](const char* field, int& out, bool required) {
    if (!j.contains(field)) {
      if (required) throw UsageError(source + ": model field '" + field + "' is missing");
      return;
    }
    const nlohmann::json& v = j[field];
    if (!v.is_number_integer()) throw UsageError(source + ": model field '" + field + "' must be an integer");
    const auto value = json_integer_in(v, INT_MIN, kMaxModelField);
    if (!value)
      throw UsageError(fmt::format("{}: model field '{}' is {}, above the limit {} (2^28)", source, field, v.dump(), kMaxModelField));
    out = static_cast<int>(*value);
  };
  auto get_bool = [&](const char* field, bool& out) {
    if (!j.contains(field)) return;
    if (!j[field].is_boolean()) throw UsageError(source + ": model field '" + field + "' must be true or false");
    out = j[field].get<bool>();
  };
  if (j.contains("name")) {
    if (!j["name"].is_string()) throw UsageError(source + ": model field 'name' must be a string");
    m.name = j["name"].get<std::string>();
  }
  get_int("layers", m.layers, true);
  get_int("hidden", m.hidden, true);
  get_int("heads", m.heads, true);
  get_int("seq", m.seq, true);
  get_int("vocab", m.vocab, true);
  get_int("kv_heads", m.kv_heads, false);
  get_int("ffn_hidden", m.ffn_hidden, false);
  get_bool("gated_mlp", m.gated_mlp);
  get_bool("tied_embeddings", m.tied_embeddings);
  get_bool("flash_attention", m.flash_attention);
  auto get_optional_bool = [&](const char* field, std::optional<bool>& out) {
    bool value = false;
    if (!j.contains(field)) return;
    get_bool(field, value);
    out = value;
  };
  get_optional_bool("dropout", m.dropout);
  get_optional_bool("biases", m.biases);
  check_model(m, source);
  return m;
}

ModelSpec resolve_model(const std::string& name_or_path) {
  for (const auto& m : presets())
    if (m.name == name_or_path) return m;
  if (auto problem = input_file_problem(name_or_path, "a model file (JSON)")) throw UsageError("--model: " + *problem);
  if (std::filesystem::exists(name_or_path)) return parse_model_json(read_file(name_or_path), name_or_path);
  std::string known;
  for (const auto& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw UsageError("--model: '" + name_or_path + "' is neither a preset (" + known + ") nor a model file");
}

}  // namespace pipescope::sim
