// The built-in models (mlp, tiny-gpt; tiny-moe is moe/moe_model.cpp's), their synthetic data and the stage module that holds a
// contiguous range of their layers.
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "pipescope/core/errors.hpp"
#include "pipescope/exec/model.hpp"
#include "language_model_layers.hpp"
#include "moe/moe_model.hpp"
#include "splitmix64.hpp"

namespace pipescope::exec {
namespace {

using language_model::attention_heads;
using language_model::FinalNorm;
using language_model::TiedHead;
using language_model::TokenEmbedding;

std::uint64_t key_index(const std::string& key) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a: a stable, platform-independent hash
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  return h;
}

at::Generator generator_from(std::uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// Module constructors draw from the default generator; seeding it per layer makes a layer's
// weights depend on (seed, layer index) only.
void seed_default_generator(std::uint64_t seed) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
}

class MlpBlock : public Layer {
 public:
  explicit MlpBlock(int hidden) : fc_(register_module("fc", torch::nn::Linear(hidden, hidden))) {}
  TensorList forward_layers(const TensorList& in) override { return {in[0] + at::gelu(fc_->forward(in[0]))}; }

 private:
  torch::nn::Linear fc_;
};

class LinearHead : public Layer {
 public:
  LinearHead(int hidden, int classes) : fc_(register_module("fc", torch::nn::Linear(hidden, classes))) {}
  TensorList forward_layers(const TensorList& in) override { return {fc_->forward(in[0])}; }

 private:
  torch::nn::Linear fc_;
};

class TransformerBlock : public Layer {
 public:
  TransformerBlock(int hidden, int heads)
      : heads_(heads),
        ln1_(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))),
        qkv_(register_module("qkv", torch::nn::Linear(hidden, 3 * hidden))),
        proj_(register_module("proj", torch::nn::Linear(hidden, hidden))),
        ln2_(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))),
        fc1_(register_module("fc1", torch::nn::Linear(hidden, 4 * hidden))),
        fc2_(register_module("fc2", torch::nn::Linear(4 * hidden, hidden))) {}

  TensorList forward_layers(const TensorList& in) override {
    const at::Tensor& x = in[0];
    auto h = x + language_model::causal_self_attention(ln1_->forward(x), qkv_, proj_, heads_);
    return {h + fc2_->forward(at::gelu(fc1_->forward(ln2_->forward(h))))};
  }

 private:
  std::int64_t heads_;
  torch::nn::LayerNorm ln1_;
  torch::nn::Linear qkv_, proj_;
  torch::nn::LayerNorm ln2_;
  torch::nn::Linear fc1_, fc2_;
};

std::int64_t linear_parameters(std::int64_t in, std::int64_t out) { return in * out + out; }

ModelSpec mlp_spec(const ModelConfig& c) {
  ModelSpec spec;
  const std::int64_t h = c.hidden;
  for (int i = 0; i < c.layers; ++i)
    spec.layers.push_back({fmt::format("blocks.{}", i), "MlpBlock", linear_parameters(h, h), "", "",
                           [h] { return std::make_shared<MlpBlock>(static_cast<int>(h)); }});
  spec.layers.push_back({"head", "LinearHead", linear_parameters(h, c.vocab), "", "",
                         [h, v = c.vocab] { return std::make_shared<LinearHead>(static_cast<int>(h), v); }});
  for (int i = 0; i <= c.layers; ++i) spec.boundary.push_back({TensorSpec{{c.micro_batch_size, h}, at::kFloat}});
  spec.boundary.push_back({TensorSpec{{c.micro_batch_size, c.vocab}, at::kFloat}});
  spec.loss = [](const TensorList& out, const at::Tensor& labels) { return at::cross_entropy_loss(out[0], labels); };
  return spec;
}

ModelSpec tiny_gpt_spec(const ModelConfig& c) {
  ModelSpec spec;
  const std::int64_t h = c.hidden, v = c.vocab, s = c.seq_len;
  const int heads = attention_heads(c.hidden);
  spec.layers.push_back({"embed", "TokenEmbedding", v * h + s * h, "embed", "weight",
                         [=] { return std::make_shared<TokenEmbedding>(v, h, s); }});
  const std::int64_t block_parameters = 2 * (2 * h) + linear_parameters(h, 3 * h) + linear_parameters(h, h) +
                                        linear_parameters(h, 4 * h) + linear_parameters(4 * h, h);
  for (int i = 0; i < c.layers; ++i)
    spec.layers.push_back({fmt::format("blocks.{}", i), "TransformerBlock", block_parameters, "", "",
                           [=] { return std::make_shared<TransformerBlock>(h, heads); }});
  spec.layers.push_back({"norm", "FinalNorm", 2 * h, "", "", [=] { return std::make_shared<FinalNorm>(h); }});
  spec.layers.push_back({"head", "TiedHead", v * h, "embed", "weight", [=] { return std::make_shared<TiedHead>(v, h); }});
  spec.boundary.push_back({TensorSpec{{c.micro_batch_size, s}, at::kLong}});
  for (std::size_t i = 1; i < spec.layers.size(); ++i)
    spec.boundary.push_back({TensorSpec{{c.micro_batch_size, s, h}, at::kFloat}});
  spec.boundary.push_back({TensorSpec{{c.micro_batch_size, s, v}, at::kFloat}});
  spec.loss = [v](const TensorList& out, const at::Tensor& labels) {
    return at::cross_entropy_loss(out[0].reshape({-1, v}), labels.reshape({-1}));
  };
  return spec;
}

// The mlp's teacher weights, drawn once per (seed, hidden, classes): drawing hidden x classes
// normal numbers for every micro-batch cost more than the rest of the data loading.
at::Tensor mlp_teacher(const ModelConfig& c) {
  static std::mutex mutex;
  static std::map<std::tuple<std::uint64_t, int, int>, at::Tensor> teachers;
  std::lock_guard<std::mutex> lock(mutex);
  auto& teacher = teachers[{c.seed, c.hidden, c.vocab}];
  if (!teacher.defined()) {
    at::Generator teacher_gen = generator_from(layer_seed(c.seed, key_index("teacher")));
    teacher = at::randn({c.hidden, c.vocab}, teacher_gen, at::TensorOptions().dtype(at::kFloat));
  }
  return teacher;
}

}  // namespace

std::uint64_t layer_seed(std::uint64_t seed, std::uint64_t layer_index) {
  return splitmix64(splitmix64(seed) ^ (layer_index * 0xD1B54A32D192ED03ull + 1));
}

std::vector<LayerInfo> ModelSpec::layer_infos() const {
  std::vector<LayerInfo> infos;
  for (const auto& l : layers)
    infos.push_back({l.name, l.type, l.parameters, l.cost > 0 ? l.cost : static_cast<double>(std::max<std::int64_t>(l.parameters, 1))});
  return infos;
}

ModelSpec make_model_spec(const ModelConfig& config) {
  ModelSpec spec;
  if (config.name == "mlp")
    spec = mlp_spec(config);
  else if (config.name == "tiny-gpt")
    spec = tiny_gpt_spec(config);
  else if (config.name == "tiny-moe")
    spec = tiny_moe_spec(config);
  else
    throw UsageError(fmt::format("option --model: unknown model '{}' (known: mlp, tiny-gpt, tiny-moe)", config.name));
  spec.config = config;
  return spec;
}

MicroBatch make_micro_batch(const ModelConfig& c, std::int64_t index, bool with_labels) {
  at::Generator sample_gen = generator_from(layer_seed(c.seed ^ 0x5EED'DA7Aull, static_cast<std::uint64_t>(index)));
  MicroBatch batch;
  if (c.name == "mlp") {
    // Labels come from a fixed random linear teacher, so the loss can fall.
    auto x = at::randn({c.micro_batch_size, c.hidden}, sample_gen, at::TensorOptions().dtype(at::kFloat));
    batch.inputs = {x};
    if (with_labels) batch.labels = at::matmul(x, mlp_teacher(c)).argmax(1);
  } else {
    // Arithmetic sequences modulo the vocabulary: each row has its own start and stride, so
    // predicting the next token needs the context.
    auto opts = at::TensorOptions().dtype(at::kLong);
    auto start = at::randint(0, c.vocab, {c.micro_batch_size, 1}, sample_gen, opts);
    auto stride = at::randint(1, std::max(2, c.vocab / 4), {c.micro_batch_size, 1}, sample_gen, opts);
    auto positions = at::arange(c.seq_len + 1, opts).unsqueeze(0);
    auto tokens = (start + positions * stride).remainder(c.vocab);
    batch.inputs = {tokens.slice(1, 0, c.seq_len).contiguous()};
    batch.labels = tokens.slice(1, 1, c.seq_len + 1).contiguous();
  }
  return batch;
}

StageModule::StageModule(const ModelSpec& spec, int first_layer, int end_layer)
    : first_layer_(first_layer), end_layer_(end_layer) {
  // Seeding and drawing from the process-wide generator must not interleave with another
  // thread building its stage (in-process ranks), or the weights would depend on timing.
  static std::mutex build_mutex;
  std::lock_guard<std::mutex> build_lock(build_mutex);
  for (int i = first_layer; i < end_layer; ++i) {
    const LayerSpec& ls = spec.layers.at(static_cast<std::size_t>(i));
    seed_default_generator(layer_seed(spec.config.seed, static_cast<std::uint64_t>(i)));
    auto layer = ls.build ? ls.build() : nullptr;
    if (!layer) throw UsageError(fmt::format("layer {} '{}': its factory built no layer", i, ls.name));
    if (!ls.tied_key.empty()) {
      // Every copy of a tied weight starts from the same values, drawn from the key's seed.
      at::NoGradGuard no_grad;
      const auto own = layer->named_parameters(/*recurse=*/true);
      if (!own.contains(ls.tied_parameter))
        throw UsageError(fmt::format("layer {} '{}': tied weight '{}' names no parameter of the layer (it has: {})", i,
                                     ls.name, ls.tied_parameter, fmt::join(own.keys(), ", ")));
      at::Tensor weight = own[ls.tied_parameter];
      auto gen = generator_from(layer_seed(spec.config.seed, key_index(ls.tied_key)));
      weight.copy_(at::randn(weight.sizes(), gen, weight.options()) * 0.02);
    }
    for (auto& item : layer->named_parameters(true)) {
      const bool tied = !ls.tied_key.empty() && item.key() == ls.tied_parameter;
      parameters_.push_back({fmt::format("layer{}.{}", i, item.key()), item.value(), i, tied ? ls.tied_key : ""});
    }
    layers_.push_back(std::move(layer));
    layer_names_.push_back(ls.name);
    layer_stash_.push_back(ls.stash);
    layer_pop_.push_back(ls.pop);
  }
}

void StageModule::to(at::Device device) {
  // Module::to moves each parameter's data in place, so the tensors in parameters_ follow.
  for (auto& layer : layers_) layer->to(device);
}

TensorList StageModule::forward(const TensorList& inputs) { return forward_range(inputs, first_layer_, end_layer_); }

TensorList StageModule::forward_range(const TensorList& inputs, int first_layer, int end_layer) {
  return forward_range_named({inputs, {}}, first_layer, end_layer).tensors;
}

NamedTensors StageModule::forward_named(const NamedTensors& inputs, SkipTensors* skips) {
  return forward_range_named(inputs, first_layer_, end_layer_, skips);
}

NamedTensors StageModule::forward_range_named(const NamedTensors& inputs, int first_layer, int end_layer, SkipTensors* skips) {
  NamedTensors x = inputs;
  for (int i = first_layer; i < end_layer; ++i) {
    const auto local = static_cast<std::size_t>(i - first_layer_);
    Layer& layer = *layers_.at(local);
    for (const auto& name : layer_pop_.at(local)) {
      auto it = skips ? skips->find(name) : SkipTensors::iterator();
      if (!skips || it == skips->end())
        throw UsageError(fmt::format("layer '{}' (layer {}) pops the skip tensor '{}', but it is not there (not stashed before, "
                                     "or not handed to this run of layers)",
                                     layer_names_.at(local), i, name));
      x.tensors.push_back(it->second);
      if (!x.names.empty()) x.names.push_back(name);
      skips->erase(it);
    }
    if (const auto keys = layer.input_keys(); !keys.empty()) {
      if (auto wrong = key_mismatch(keys, x.names, x.tensors.size()); !wrong.empty())
        throw UsageError(fmt::format("layer '{}' (layer {}) takes the keys [{}], but gets [{}]: {}", layer_names_.at(local), i,
                                     fmt::join(keys, ", "), fmt::join(x.names, ", "), wrong));
    }
    x = layer.forward_named(x);
    if (!x.names.empty() && x.names.size() != x.tensors.size())
      throw UsageError(fmt::format("layer '{}' (layer {}) gives {} names for {} tensors", layer_names_.at(local), i, x.names.size(),
                                   x.tensors.size()));
    // A user's layer that returns a hole fails here, naming itself, not in the next layer.
    for (std::size_t t = 0; t < x.tensors.size(); ++t)
      if (!x.tensors[t].defined())
        throw UsageError(fmt::format("output {}{} of layer '{}' (layer {}) is not a tensor (undefined)", t,
                                     x.names.empty() ? std::string() : fmt::format(" ('{}')", x.names[t]), layer_names_.at(local), i));
    const auto& stash = layer_stash_.at(local);
    if (!stash.empty()) {
      if (!skips) throw UsageError(fmt::format("layer '{}' (layer {}) stashes skip tensors here, where none are kept", layer_names_.at(local), i));
      if (x.tensors.size() <= stash.size())
        throw UsageError(fmt::format("layer '{}' (layer {}) stashes {} skip tensor(s) but gives only {} output(s); its last outputs "
                                     "are the stashed ones, after at least one that flows on",
                                     layer_names_.at(local), i, stash.size(), x.tensors.size()));
      const std::size_t kept = x.tensors.size() - stash.size();
      for (std::size_t k = 0; k < stash.size(); ++k) (*skips)[stash[k]] = x.tensors[kept + k];
      x.tensors.resize(kept);
      if (!x.names.empty()) x.names.resize(kept);
    }
  }
  return x;
}

std::vector<SkipEdge> ModelSpec::skip_edges() const {
  std::vector<SkipEdge> edges;
  std::map<std::string, std::size_t> open;  // stashed, not yet popped: index into edges
  for (std::size_t l = 0; l < layers.size(); ++l) {
    for (const auto& name : layers[l].pop) {
      auto it = open.find(name);
      if (it == open.end()) {
        const bool popped = std::any_of(edges.begin(), edges.end(), [&](const SkipEdge& e) { return e.name == name; });
        throw UsageError(fmt::format("layer '{}' (layer {}) pops the skip tensor '{}', which {}", layers[l].name, l, name,
                                     popped ? "an earlier layer already popped (pop each stash once)" : "no earlier layer stashes"));
      }
      edges[it->second].to_layer = static_cast<int>(l);
      open.erase(it);
    }
    for (const auto& name : layers[l].stash) {
      if (open.count(name) || std::any_of(edges.begin(), edges.end(), [&](const SkipEdge& e) { return e.name == name; }))
        throw UsageError(fmt::format("layer '{}' (layer {}) stashes the skip tensor '{}' a second time (names are unique)", layers[l].name, l, name));
      open[name] = edges.size();
      edges.push_back({name, static_cast<int>(l), -1});
    }
  }
  if (!open.empty()) {
    const auto& edge = edges[open.begin()->second];
    throw UsageError(fmt::format("layer '{}' (layer {}) stashes the skip tensor '{}', but no later layer pops it",
                                 layers.at(static_cast<std::size_t>(edge.from_layer)).name, edge.from_layer, edge.name));
  }
  return edges;
}

std::vector<std::string> StageModule::input_keys() const { return layers_.front()->input_keys(); }

std::string key_mismatch(const std::vector<std::string>& expected, const std::vector<std::string>& given, std::size_t given_count) {
  if (given.empty())
    return given_count == expected.size() ? std::string()
                                          : fmt::format("{} unnamed tensor(s) for {} key(s)", given_count, expected.size());
  for (const auto& key : expected)
    if (std::find(given.begin(), given.end(), key) == given.end()) return fmt::format("no key '{}'", key);
  for (const auto& key : given)
    if (std::find(expected.begin(), expected.end(), key) == expected.end()) return fmt::format("unexpected key '{}'", key);
  for (std::size_t i = 0; i < expected.size(); ++i)
    if (given.at(i) != expected[i]) return fmt::format("key '{}' comes at position {}, not {}", expected[i],
                                                       std::find(given.begin(), given.end(), expected[i]) - given.begin(), i);
  if (given.size() != expected.size()) return fmt::format("{} keys for {}", given.size(), expected.size());
  return {};
}

TensorDict tensor_dict_of(const NamedTensors& inputs, const std::vector<std::string>& keys) {
  if (auto wrong = key_mismatch(keys, inputs.names, inputs.tensors.size()); !wrong.empty())
    throw UsageError(fmt::format("a dict layer takes the keys [{}], but gets [{}]: {}", fmt::join(keys, ", "),
                                 fmt::join(inputs.names, ", "), wrong));
  TensorDict dict;
  for (std::size_t i = 0; i < keys.size(); ++i) dict.insert(keys[i], inputs.tensors.at(i));
  return dict;
}

NamedTensors named_tensors_of(const TensorDict& dict) {
  NamedTensors out;
  for (const auto& item : dict) {
    out.names.push_back(item.key());
    out.tensors.push_back(item.value());
  }
  return out;
}

TensorList StageModule::parameter_tensors() const {
  TensorList out;
  for (const auto& p : parameters_) out.push_back(p.tensor);
  return out;
}

}  // namespace pipescope::exec
