#include "megatron_size_names.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <utility>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/model.hpp"

namespace po = boost::program_options;

namespace pipescope::cli {

namespace {

struct SizeName {
  std::string_view megatron;
  std::string_view ours;
};

constexpr std::array<SizeName, 4> kSimulateNames{{
    {"--tensor-model-parallel-size", "--tensor-parallel"},
    {"--pipeline-model-parallel-size", "--stages"},
    {"--context-parallel-size", "--context-parallel"},
    {"--virtual-pipeline-model-parallel-size", "--chunks"},
}};

constexpr std::string_view kGlobalBatch = "--global-batch-size";

constexpr std::array<SizeName, 1> kPlanNames{{{kGlobalBatch, "--global-batch"}}};

// One option on the command line: its name, its value, and where they are.
struct Given {
  std::string value;
  std::size_t first = 0;  // index of the name (and of the value when written --name=value)
  std::size_t count = 0;  // arguments it takes: 1 (--name=value) or 2 (--name value)
};

// Where `name` is given ("--name value" or "--name=value"), or nothing; a value missing at the
// end is left to the parser, which names it.
std::optional<Given> find_option(const std::vector<std::string>& args, std::string_view name) {
  std::optional<Given> found;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    Given g;
    if (a == name && i + 1 < args.size()) {
      g = {args[i + 1], i, 2};
    } else if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 && a[name.size()] == '=') {
      g = {a.substr(name.size() + 1), i, 1};
    } else {
      continue;
    }
    if (found) throw UsageError(fmt::format("{} is given twice: give it once", name));
    found = g;
  }
  return found;
}

int positive_size(const std::string& text, std::string_view option) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 1)
    throw UsageError(fmt::format("{} '{}': must be a whole number >= 1", option, text));
  return value;
}

// The arguments without the one at `given`, and `ours value` appended when asked.
std::vector<std::string> replaced(const std::vector<std::string>& args, const Given& given,
                                  std::optional<std::pair<std::string_view, std::string>> with) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i)
    if (i < given.first || i >= given.first + given.count) out.push_back(args[i]);
  if (with) {
    out.emplace_back(with->first);
    out.push_back(with->second);
  }
  return out;
}

// Each of Megatron's names read as ours: both given must agree.
template <std::size_t N>
std::vector<std::string> with_our_names(std::vector<std::string> args, const std::array<SizeName, N>& names) {
  for (const SizeName& name : names) {
    const std::optional<Given> megatron = find_option(args, name.megatron);
    if (!megatron) continue;
    const int size = positive_size(megatron->value, name.megatron);
    const std::optional<Given> ours = find_option(args, name.ours);
    if (ours && positive_size(ours->value, name.ours) != size)
      throw UsageError(fmt::format("{} {} and {} {} name one size: give one", name.ours, ours->value, name.megatron,
                                   megatron->value));
    args = replaced(args, *megatron, ours ? std::nullopt : std::optional(std::pair(name.ours, std::to_string(size))));
  }
  return args;
}

// Megatron's model-shape arguments (megatron/training/arguments.py) and the model-file field each
// gives (SPEC section 6's names).
struct ModelName {
  std::string_view megatron;
  std::string_view field;
};

constexpr std::array<ModelName, 28> kModelSizes{{
    {"--num-layers", "layers"},
    {"--hidden-size", "hidden"},
    {"--num-attention-heads", "heads"},
    {"--num-query-groups", "kv_heads"},
    {"--ffn-hidden-size", "ffn_hidden"},
    {"--kv-channels", "head_dim"},
    {"--vocab-size", "vocab"},
    {"--num-experts", "num_experts"},
    {"--moe-router-topk", "top_k"},
    {"--moe-ffn-hidden-size", "moe_ffn_hidden"},
    {"--moe-shared-expert-intermediate-size", "moe_shared_expert_intermediate_size"},
    {"--moe-layer-freq", "moe_layer_freq"},
    {"--moe-latent-size", "moe_latent_size"},
    {"--mtp-num-layers", "mtp_num_layers"},
    {"--q-lora-rank", "q_lora_rank"},
    {"--kv-lora-rank", "kv_lora_rank"},
    {"--qk-head-dim", "qk_head_dim"},
    {"--qk-pos-emb-head-dim", "qk_pos_emb_head_dim"},
    {"--v-head-dim", "v_head_dim"},
    {"--mamba-num-heads", "mamba_num_heads"},
    {"--mamba-head-dim", "mamba_head_dim"},
    {"--mamba-state-dim", "mamba_state_dim"},
    {"--mamba-num-groups", "mamba_num_groups"},
    {"--linear-num-key-heads", "linear_num_key_heads"},
    {"--linear-num-value-heads", "linear_num_value_heads"},
    {"--linear-key-head-dim", "linear_key_head_dim"},
    {"--linear-value-head-dim", "linear_value_head_dim"},
    {"--linear-conv-kernel-dim", "linear_conv_kernel_dim"},
}};
constexpr std::array<std::string_view, 3> kModelRates = {"--hidden-dropout", "--attention-dropout",
                                                         "--moe-expert-capacity-factor"};

// Whether the switch `name` is on the command line, taken out of it.
bool take_switch(std::vector<std::string>& args, std::string_view name) {
  bool found = false;
  for (auto it = args.begin(); it != args.end();) {
    if (*it == name) {
      found = true;
      it = args.erase(it);
    } else {
      ++it;
    }
  }
  return found;
}

std::optional<std::string> take_value(std::vector<std::string>& args, std::string_view name) {
  const std::optional<Given> given = find_option(args, name);
  if (!given) return std::nullopt;
  args = replaced(args, *given, std::nullopt);
  return given->value;
}

double rate(const std::string& text, std::string_view option) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value) || value < 0)
    throw UsageError(fmt::format("{} '{}': must be a number >= 0", option, text));
  return value;
}

// Megatron's --moe-layer-freq: an integer, or its list form written as a list ("[0,1,1,...]").
nlohmann::json moe_layer_freq(const std::string& text) {
  if (!text.empty() && text.front() == '[') {
    try {
      return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
      throw UsageError("--moe-layer-freq '" + text + "': an integer, or a list of 0 and 1 such as [0,1,1,1]");
    }
  }
  return positive_size(text, "--moe-layer-freq");
}

}  // namespace

std::vector<std::string> with_megatron_model(const std::vector<std::string>& args_in) {
  std::vector<std::string> args = args_in;
  nlohmann::json model;
  std::vector<std::string> given;
  for (const ModelName& name : kModelSizes)
    if (const auto value = take_value(args, name.megatron)) {
      given.emplace_back(name.megatron);
      model[std::string(name.field)] = name.megatron == "--moe-layer-freq"
                                           ? moe_layer_freq(*value)
                                           : nlohmann::json(positive_size(*value, name.megatron));
    }
  std::array<std::optional<double>, kModelRates.size()> rates;
  for (std::size_t i = 0; i < kModelRates.size(); ++i)
    if (const auto value = take_value(args, kModelRates[i])) {
      given.emplace_back(kModelRates[i]);
      rates[i] = rate(*value, kModelRates[i]);
    }
  auto take = [&](std::string_view name) {
    const bool on = take_switch(args, name);
    if (on) given.emplace_back(name);
    return on;
  };
  // A hybrid model's layers (Megatron's pretrain_mamba.py): one symbol a layer.
  // (--hybrid-layer-pattern: Megatron's newer name for it.)
  for (const std::string_view option : {"--hybrid-override-pattern", "--hybrid-layer-pattern"})
    if (const auto pattern = take_value(args, option)) {
      given.emplace_back(option);
      model[option == "--hybrid-layer-pattern" ? "hybrid_layer_pattern" : "hybrid_override_pattern"] = *pattern;
    }
  const bool group_query = take("--group-query-attention"), swiglu = take("--swiglu"),
             untie = take("--untie-embeddings-and-output-weights"), no_bias = take("--disable-bias-linear"),
             latent = take("--multi-latent-attention"), squared_relu = take("--squared-relu"),
             output_gate = take("--attention-output-gate");
  if (swiglu && squared_relu) throw UsageError("--swiglu and --squared-relu are two activations of the MLP: give one");
  take("--use-flash-attn");  // accepted: the fused kernel is the default
  if (given.empty()) return args_in;

  if (find_option(args, "--model") || std::find(args.begin(), args.end(), "--model") != args.end())
    throw UsageError(fmt::format("--model and {} both describe the model: give one", given.front()));
  for (std::string_view required : {"--num-layers", "--hidden-size", "--num-attention-heads", "--vocab-size"})
    if (std::find(given.begin(), given.end(), required) == given.end())
      throw UsageError(
          fmt::format("{}: Megatron's model options also need {} (and --num-layers, --hidden-size, "
                      "--num-attention-heads, --vocab-size, --seq-length)",
                      given.front(), required));
  const std::optional<Given> seq = find_option(args, "--seq-length");
  if (!seq) throw UsageError(given.front() + ": Megatron's model options also need --seq-length");
  model["seq"] = positive_size(seq->value, "--seq-length");
  if (model.contains("kv_heads") && !group_query)
    throw UsageError("--num-query-groups needs --group-query-attention, as Megatron reads it only with it");
  if (!latent)
    for (const char* field : {"q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"})
      if (model.contains(field))
        throw UsageError("--q-lora-rank, --kv-lora-rank and the head dims need --multi-latent-attention");
  const int hidden = model["hidden"].get<int>();
  // Megatron's defaults (arguments.py): a SwiGLU FFN of 4h x 2/3 rounded down to a multiple of 64,
  // else 4h; embeddings tied and linear layers biased unless told otherwise; dropout 0.1.
  const std::int64_t wide = 4LL * hidden;  // in 64 bits: the model's own check bounds it
  if (!model.contains("ffn_hidden")) model["ffn_hidden"] = swiglu ? (wide * 2 / 3) / 64 * 64 : wide;
  model["gated_mlp"] = swiglu;
  model["tied_embeddings"] = !untie;
  model["biases"] = !no_bias;
  model["dropout"] = rates[0].value_or(0.1) > 0 || rates[1].value_or(0.1) > 0;
  if (rates[2]) model["capacity_factor"] = *rates[2];
  if (output_gate) model["attention_output_gate"] = true;
  model["flash_attention"] = true;  // Megatron-Core's attention backend: Transformer Engine's fused kernels
  model["name"] = fmt::format("megatron-{}x{}", model["layers"].get<int>(), hidden);
  // What the model's own checks refuse is said of these options, not of a --model never typed.
  (void)sim::parse_model_json(model.dump(), "Megatron's model options");
  args.emplace_back("--model");
  args.push_back(model.dump());
  return args;
}

void add_megatron_model_names(po::options_description& options) {
  po::options_description names(
      "Megatron's model options (instead of --model; with --seq-length; Megatron's defaults: FFN 4h, or "
      "4h x 2/3 with --swiglu; tied embeddings, biases, dropout 0.1)");
  // clang-format off
  names.add_options()
      ("num-layers", po::value<int>(), "transformer layers")
      ("hidden-size", po::value<int>(), "hidden width")
      ("num-attention-heads", po::value<int>(), "attention heads")
      ("group-query-attention", "grouped-query attention, with --num-query-groups")
      ("num-query-groups", po::value<int>(), "key/value heads")
      ("ffn-hidden-size", po::value<int>(), "the MLP's width")
      ("kv-channels", po::value<int>(), "a head's width (default hidden / heads)")
      ("vocab-size", po::value<int>(), "the vocabulary (padded as the tokenizer pads it)")
      ("swiglu", "gated MLP (SwiGLU)")
      ("untie-embeddings-and-output-weights", "separate input embedding and output layer")
      ("disable-bias-linear", "no biases on the linear layers")
      ("hidden-dropout", po::value<double>(), "dropout rate of the hidden states (0: no dropout)")
      ("attention-dropout", po::value<double>(), "dropout rate of the attention probabilities")
      ("use-flash-attn", "a fused attention kernel (the default)")
      ("num-experts", po::value<int>(), "routed experts (a mixture of experts)")
      ("moe-router-topk", po::value<int>(), "experts a token is routed to")
      ("moe-ffn-hidden-size", po::value<int>(), "one routed expert's width")
      ("moe-shared-expert-intermediate-size", po::value<int>(), "the shared experts' width together")
      ("moe-layer-freq", po::value<std::string>(), "every N-th layer MoE, or a list of 0 and 1 a layer")
      ("moe-latent-size", po::value<int>(), "the routed experts' latent width (LatentMoE; default the hidden width)")
      ("moe-expert-capacity-factor", po::value<double>(), "tokens an expert takes over the mean (absent: dropless)")
      ("mtp-num-layers", po::value<int>(), "multi-token prediction layers")
      ("multi-latent-attention", "multi-head latent attention, with the ranks and head widths below")
      ("q-lora-rank", po::value<int>(), "MLA's query rank")
      ("kv-lora-rank", po::value<int>(), "MLA's key/value rank")
      ("qk-head-dim", po::value<int>(), "MLA's query/key head width")
      ("qk-pos-emb-head-dim", po::value<int>(), "MLA's RoPE head width")
      ("v-head-dim", po::value<int>(), "MLA's value head width")
      ("squared-relu", "squared-ReLU MLP (two matrices, as GELU's)")
      ("hybrid-layer-pattern", po::value<std::string>(), "the same, Megatron's newer name")
      ("hybrid-override-pattern", po::value<std::string>(),
       "a hybrid model's layers, one symbol each: M Mamba, G Gated DeltaNet, * attention, - MLP, E experts")
      ("mamba-num-heads", po::value<int>(), "a Mamba layer's heads (default 2 x hidden / head width)")
      ("mamba-head-dim", po::value<int>(), "a Mamba head's width (default 64)")
      ("mamba-state-dim", po::value<int>(), "Mamba's state width (default 128)")
      ("mamba-num-groups", po::value<int>(), "Mamba's B and C groups (default 8)")
      ("linear-num-key-heads", po::value<int>(), "a Gated DeltaNet's key heads (default 16)")
      ("linear-num-value-heads", po::value<int>(), "a Gated DeltaNet's value heads (default 32)")
      ("linear-key-head-dim", po::value<int>(), "a Gated DeltaNet key head's width (default 128)")
      ("linear-value-head-dim", po::value<int>(), "a Gated DeltaNet value head's width (default 128)")
      ("linear-conv-kernel-dim", po::value<int>(), "a Gated DeltaNet's convolution width (default 4)")
      ("attention-output-gate", "gated attention: a sigmoid gate of the attention's output");
  // clang-format on
  options.add(names);
}

std::vector<std::string> with_megatron_plan_names(const std::vector<std::string>& args) {
  return with_our_names(args, kPlanNames);
}

std::vector<std::string> with_megatron_size_names(const std::vector<std::string>& args_in) {
  std::vector<std::string> args = with_our_names(args_in, kSimulateNames);
  const std::optional<Given> global = find_option(args, kGlobalBatch);
  if (!global) return args;
  const long long batch = positive_size(global->value, kGlobalBatch);
  const std::optional<Given> mbs = find_option(args, "--micro-batch-size");
  const std::optional<Given> dp = find_option(args, "--data-parallel");
  const int micro_batch_size = mbs ? positive_size(mbs->value, "--micro-batch-size") : 1;
  const int data_parallel = dp ? positive_size(dp->value, "--data-parallel") : 1;
  const long long per_micro_batch = static_cast<long long>(micro_batch_size) * data_parallel;
  if (batch % per_micro_batch != 0)
    throw UsageError(
        fmt::format("{} {}: not a whole number of micro-batches of {} samples (--micro-batch-size {} x "
                    "--data-parallel {})",
                    kGlobalBatch, batch, per_micro_batch, micro_batch_size, data_parallel));
  const std::string micro_batches = std::to_string(batch / per_micro_batch);
  if (const std::optional<Given> m = find_option(args, "--micro-batches")) {
    if (m->value != micro_batches)
      throw UsageError(
          fmt::format("--micro-batches {} and {} {} (= {} micro-batches of --micro-batch-size {} x "
                      "--data-parallel {}) disagree: give one",
                      m->value, kGlobalBatch, batch, micro_batches, micro_batch_size, data_parallel));
    return replaced(args, *global, std::nullopt);
  }
  return replaced(args, *global, std::pair(std::string_view("--micro-batches"), micro_batches));
}

void add_megatron_plan_names(po::options_description& options) {
  po::options_description names("Megatron's names (read as the options they name)");
  names.add_options()("global-batch-size", po::value<int>(), "the same as --global-batch");
  options.add(names);
}

void add_megatron_size_names(po::options_description& options) {
  po::options_description names("Megatron's names for the sizes (read as the options they name)");
  // clang-format off
  names.add_options()
      ("tensor-model-parallel-size", po::value<int>(), "the same as --tensor-parallel")
      ("pipeline-model-parallel-size", po::value<int>(), "the same as --stages")
      ("context-parallel-size", po::value<int>(), "the same as --context-parallel")
      ("virtual-pipeline-model-parallel-size", po::value<int>(), "the same as --chunks")
      ("global-batch-size", po::value<int>(),
       "samples per iteration: --micro-batches is it over --micro-batch-size x --data-parallel");
  // clang-format on
  options.add(names);
}

}  // namespace pipescope::cli
