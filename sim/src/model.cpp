#include "pipescope/sim/model.hpp"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/input_file.hpp"

namespace pipescope::sim {

std::string_view recomputation_name(Recomputation recomputation) {
  switch (recomputation) {
    case Recomputation::none: return "none";
    case Recomputation::selective: return "selective";
    case Recomputation::full: return "full";
  }
  return "none";
}

std::int64_t ModelSpec::layer_matrix_parameters() const {
  const std::int64_t h = hidden;
  const std::int64_t kv_width = h * kv_heads_or_heads() / std::max(heads, 1);
  const std::int64_t attention = 2 * h * h + 2 * h * kv_width;  // Q and O, K and V
  const std::int64_t mlp = (gated_mlp ? 3 : 2) * h * ffn_or_default();
  return attention + mlp;
}

std::int64_t ModelSpec::layer_parameters() const {
  const std::int64_t h = hidden;
  const std::int64_t norms = 4 * h;
  // GPT keeps biases on every matrix; gated (LLaMA-style) models have none.
  const std::int64_t biases = gated_mlp ? 0 : 5 * h + ffn_or_default();
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
  return {gpt13, gpt7, llama70};
}

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
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& m : presets()) names.push_back(m.name);
  return names;
}

ModelSpec parse_model_json(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw UsageError(source + ": not a JSON model file: " + e.what());
  }
  if (!j.is_object()) throw UsageError(source + ": a model file holds one JSON object");
  ModelSpec m;
  m.name = std::filesystem::path(source).stem().string();
  auto get_int = [&](const char* field, int& out, bool required) {
    if (!j.contains(field)) {
      if (required) throw UsageError(source + ": model field '" + field + "' is missing");
      return;
    }
    if (!j[field].is_number_integer()) throw UsageError(source + ": model field '" + field + "' must be an integer");
    out = j[field].get<int>();
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

DeviceSpec device_preset(const std::string& name) {
  if (name == "h100") return {"h100", 989e12, 0.5, 80'000'000'000, 3.35e12, {450e9, 2e-6}};
  if (name == "h200") return {"h200", 989e12, 0.5, 141'000'000'000, 4.8e12, {450e9, 2e-6}};
  if (name == "a100") return {"a100", 312e12, 0.5, 80'000'000'000, 2.0e12, {300e9, 2e-6}};
  throw UsageError("--gpu: unknown device '" + name + "' (known: h100, h200, a100)");
}

std::vector<std::string> device_preset_names() { return {"h100", "h200", "a100"}; }

LayerFigures layer_figures(const ModelSpec& model, int micro_batch_size) {
  const double s = model.seq;
  const double b = micro_batch_size;
  const double h = model.hidden;
  const double a = model.heads;
  const double matrix_flops = 2.0 * s * b * static_cast<double>(model.layer_matrix_parameters());
  LayerFigures out;
  out.f_flops = matrix_flops + 4.0 * s * s * b * h;
  out.b_flops = matrix_flops + 8.0 * s * s * b * h;
  out.w_flops = matrix_flops;
  out.activation_bytes = static_cast<std::int64_t>(s * b * (34.0 * h + 5.0 * a * s));
  out.weight_stash_bytes = static_cast<std::int64_t>(32.0 * s * b * h);
  return out;
}

std::vector<int> split_layers(int layers, int num_stages) {
  if (num_stages < 1) throw UsageError("the model needs at least one stage");
  if (layers < num_stages)
    throw UsageError("the model has " + std::to_string(layers) + " layers, fewer than the " +
                     std::to_string(num_stages) + " stages");
  std::vector<int> per_stage(static_cast<std::size_t>(num_stages), layers / num_stages);
  int extra = layers % num_stages;
  // Middle stages first: the first and last already carry the embedding and the head.
  const int middle = num_stages / 2;
  std::vector<int> order{middle};
  for (int d = 1; static_cast<int>(order.size()) < num_stages; ++d) {
    if (middle - d >= 0) order.push_back(middle - d);
    if (middle + d < num_stages) order.push_back(middle + d);
  }
  for (int i = 0; i < extra; ++i) ++per_stage[order[i]];
  return per_stage;
}

Topology with_parallel_layout(Topology topology, const ParallelConfig& parallel) {
  topology.data_parallel = parallel.data_parallel;
  topology.pipeline_rank_stride = parallel.data_parallel;
  return topology;
}

CostModel derive_costs(const ModelSpec& model, const DeviceSpec& device, const Topology& topology_in,
                       const ParallelConfig& parallel) {
  if (parallel.pipeline < 1 || parallel.chunks < 1 || parallel.data_parallel < 1 || parallel.micro_batch_size < 1)
    throw UsageError("pipeline, chunks, data-parallel and micro-batch sizes must be at least 1");
  const Topology topology = with_parallel_layout(topology_in, parallel);
  const int num_stages = parallel.pipeline * parallel.chunks;
  const std::vector<int> layers = split_layers(model.layers, num_stages);
  const LayerFigures layer = layer_figures(model, parallel.micro_batch_size);
  const double flops_per_s = device.peak_flops_per_s * device.efficiency;
  const double s = model.seq;
  const double b = parallel.micro_batch_size;
  const double h = model.hidden;
  const double v = model.vocab;
  const double head_flops = 2.0 * s * b * h * v;  // logits: one matrix product per pass
  const int dp = parallel.data_parallel;
  const double optimizer_bytes_per_parameter = parallel.zero1 ? 16.0 / dp : 16.0;
  const LinkSpec& dp_link = topology.data_parallel_link();

  CostModel costs;
  costs.transfer_model = TransferModel::Links;
  costs.micro_batch_size = parallel.micro_batch_size;
  costs.data_parallel = dp;
  for (int st = 0; st < num_stages; ++st) {
    const bool first = st == 0;
    const bool last = st == num_stages - 1;
    const double n = layers[st];
    std::int64_t parameters = static_cast<std::int64_t>(layers[st]) * model.layer_parameters();
    if (first) parameters += model.embedding_parameters();
    if (last && !(first && model.tied_embeddings)) parameters += model.embedding_parameters() + 2 * model.hidden;

    StageCost c;
    double f = n * layer.f_flops;
    double bwd = n * layer.b_flops;
    double w = n * layer.w_flops;
    if (last) {
      f += head_flops;
      bwd += head_flops;
      w += head_flops;
    }
    if (parallel.recomputation == Recomputation::full) bwd += n * layer.f_flops;  // the layers' forward runs again before B
    c.f_s = f / flops_per_s;
    c.b_s = bwd / flops_per_s;
    c.w_s = w / flops_per_s;

    const double layer_input_bytes = 2.0 * s * b * h;
    double held = n * (parallel.recomputation == Recomputation::full ? layer_input_bytes : static_cast<double>(layer.activation_bytes));
    double stash = n * static_cast<double>(layer.weight_stash_bytes);
    if (last) {
      held += 4.0 * s * b * v;  // fp32 logits for the loss
      stash += layer_input_bytes;
    }
    c.f_mem_bytes = static_cast<std::int64_t>(held);
    c.w_mem_bytes = -static_cast<std::int64_t>(stash);
    c.b_mem_bytes = -c.f_mem_bytes - c.w_mem_bytes;

    // 16-bit weights and gradients, plus fp32 master weights, momentum and variance (and fp32
    // gradient accumulation): 16 bytes per parameter, sharded by ZeRO-1.
    c.static_bytes = static_cast<std::int64_t>(static_cast<double>(parameters) * (4.0 + optimizer_bytes_per_parameter));
    if (parallel.recomputation == Recomputation::full) c.static_bytes += layer.activation_bytes;  // one layer rebuilt at a time
    c.activation_bytes = static_cast<std::int64_t>(layer_input_bytes);
    c.reduce_grads_s = ring_all_reduce_s(parameters * 2, dp, dp_link);
    c.optimizer_s = static_cast<double>(parameters) / (parallel.zero1 ? dp : 1) * 32.0 /
                    device.memory_bandwidth_bytes_per_s;
    if (model.tied_embeddings && num_stages > 1 && (first || last))
      c.reduce_tied_s = ring_all_reduce_s(model.embedding_parameters() * 2, 2,
                                          topology.link_between(0, parallel.pipeline - 1));
    costs.stages.push_back(c);
  }
  return costs;
}

StageCost recompute_measured_stage(StageCost c, int stage_layers, int run_layers) {
  if (stage_layers < 1 || run_layers < 1)
    throw UsageError("recomputation in runs of " + std::to_string(run_layers) + " layer(s) of a stage of " +
                     std::to_string(stage_layers) + ": both must be at least 1");
  if (c.activation_bytes <= 0)
    throw UsageError("--recompute: the profile has no stage-to-stage transfer size to take a layer's input from "
                     "(a profile of one stage): calibrate on two pipeline ranks or more");
  const int run = std::min(run_layers, stage_layers);
  const std::int64_t runs = (stage_layers + run - 1) / run;
  const std::int64_t measured_held = c.f_mem_bytes;
  // Never more than without recomputation: a run of every layer still keeps its input.
  const std::int64_t kept = std::min(measured_held, (runs + 1) * c.activation_bytes);
  const std::int64_t stash = -c.w_mem_bytes;  // what B keeps for W, as measured
  c.f_mem_bytes = kept;
  c.b_mem_bytes = -kept + stash;
  // One run rebuilt at a time in the backward, charged throughout as derive_costs does.
  c.static_bytes += measured_held * run / stage_layers;
  // The backward first runs its runs' forwards again.
  c.b_s += c.f_s;
  if (c.full_backward_s > 0) c.full_backward_s += c.f_s;
  return c;
}

}  // namespace pipescope::sim
