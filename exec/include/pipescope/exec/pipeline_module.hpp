// A user's model as a list of layer factories (DeepSpeed's PipelineModule of LayerSpec and
// TiedLayerSpec): a factory runs only on the rank whose stage holds the layer. The module builds
// the ModelSpec that the runtime executes and splits it into stages by the core's partitioner
// (uniform, parameters, type:REGEX, cost) or at named split points (torch's SplitPoint,
// veScale's split_points).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipescope/core/partitioner.hpp"
#include "pipescope/core/schedule.hpp"
#include "pipescope/exec/model.hpp"

namespace pipescope::exec {

using LayerFactory = std::function<std::shared_ptr<Layer>()>;
using LossFunction = std::function<at::Tensor(const TensorList& outputs, const at::Tensor& labels)>;

struct LayerOptions {
  std::string type = "Layer";    // matched by the partition method type:REGEX
  std::int64_t parameters = -1;  // < 0: counted by building the layer once, when a partition needs it
  double cost = 0;               // > 0: relative or measured time, balanced by the method "cost"
  // Skip connections: see LayerSpec::stash / pop (model.hpp).
  std::vector<std::string> stash{};
  std::vector<std::string> pop{};
};

namespace detail {
inline TensorList as_tensor_list(TensorList tensors) { return tensors; }
inline TensorList as_tensor_list(at::Tensor tensor) { return {std::move(tensor)}; }

// A parameterless layer from a function of the incoming tensors.
template <typename Fn>
class FunctionLayer : public Layer {
 public:
  explicit FunctionLayer(Fn fn) : fn_(std::move(fn)) {}
  TensorList forward_layers(const TensorList& inputs) override { return as_tensor_list(fn_(inputs)); }

 private:
  Fn fn_;
};

// A layer of named tensors: takes a dict with `keys` (in order) and gives a dict.
class DictLayerBase : public Layer {
 public:
  explicit DictLayerBase(std::vector<std::string> keys) : keys_(std::move(keys)) {}
  std::vector<std::string> input_keys() const override { return keys_; }
  TensorList forward_layers(const TensorList& inputs) override { return forward_named({inputs, {}}).tensors; }
  NamedTensors forward_named(const NamedTensors& inputs) override {
    return named_tensors_of(apply(tensor_dict_of(inputs, keys_)));
  }

 protected:
  virtual TensorDict apply(const TensorDict& inputs) = 0;

 private:
  std::vector<std::string> keys_;
};

template <typename Fn>
class FunctionDictLayer : public DictLayerBase {
 public:
  FunctionDictLayer(std::vector<std::string> keys, Fn fn) : DictLayerBase(std::move(keys)), fn_(std::move(fn)) {}

 protected:
  TensorDict apply(const TensorDict& inputs) override { return fn_(inputs); }

 private:
  Fn fn_;
};

template <typename Holder, typename Fn>
class ModuleDictLayer : public DictLayerBase {
 public:
  ModuleDictLayer(Holder module, std::vector<std::string> keys, Fn fn)
      : DictLayerBase(std::move(keys)), module_(std::move(module)), fn_(std::move(fn)) {
    register_module("module", module_);
  }

 protected:
  TensorDict apply(const TensorDict& inputs) override { return fn_(module_, inputs); }

 private:
  Holder module_;
  Fn fn_;
};

// A LibTorch module (its parameters registered as "module.*") and the function that applies it.
template <typename Holder, typename Fn>
class ModuleLayer : public Layer {
 public:
  ModuleLayer(Holder module, Fn fn) : module_(std::move(module)), fn_(std::move(fn)) {
    register_module("module", module_);
  }
  TensorList forward_layers(const TensorList& inputs) override { return as_tensor_list(fn_(module_, inputs)); }

 private:
  Holder module_;
  Fn fn_;
};
}  // namespace detail

// make_layer([](const TensorList& x) { return at::relu(x[0]); })
template <typename Fn>
std::shared_ptr<Layer> make_layer(Fn fn) {
  return std::make_shared<detail::FunctionLayer<Fn>>(std::move(fn));
}

// make_layer(torch::nn::Linear(64, 64), [](torch::nn::Linear& fc, const TensorList& x) { return fc(x[0]); })
// The function returns a tensor or a TensorList (several outputs: skip connections, masks).
template <typename Holder, typename Fn>
std::shared_ptr<Layer> make_layer(Holder module, Fn fn) {
  return std::make_shared<detail::ModuleLayer<Holder, Fn>>(std::move(module), std::move(fn));
}

// Dict layers: named tensors in and out, e.g. a block taking {"hidden", "mask"}:
// make_dict_layer(torch::nn::Linear(16, 16), {"hidden", "mask"},
//                 [](torch::nn::Linear& fc, const TensorDict& x) {
//                   TensorDict out;
//                   out.insert("hidden", x["hidden"] + fc(x["hidden"]));
//                   out.insert("mask", x["mask"]);
//                   return out;
//                 });
// The keys are checked where the dict arrives (a stage boundary or the layer before): other keys
// fail naming the stage or layer and the key. Unnamed tensors (the data loader's inputs, a
// tuple layer's outputs) take the keys in order when their count fits.
template <typename Fn>
std::shared_ptr<Layer> make_dict_layer(std::vector<std::string> input_keys, Fn fn) {
  return std::make_shared<detail::FunctionDictLayer<Fn>>(std::move(input_keys), std::move(fn));
}

template <typename Holder, typename Fn>
std::shared_ptr<Layer> make_dict_layer(Holder module, std::vector<std::string> input_keys, Fn fn) {
  return std::make_shared<detail::ModuleDictLayer<Holder, Fn>>(std::move(module), std::move(input_keys), std::move(fn));
}

class PipelineModule {
 public:
  // `seed` seeds every layer from (seed, layer index): weights do not depend on the partition.
  explicit PipelineModule(std::uint64_t seed = 1234);
  // Adopts a model built elsewhere (a built-in model, a TorchScript file).
  explicit PipelineModule(ModelSpec spec);

  // A layer (DeepSpeed's LayerSpec). Names must be unique: split points name them.
  PipelineModule& add(std::string name, LayerFactory factory, LayerOptions options = {});
  // A layer sharing the weight `parameter` (e.g. "module.weight") with every other layer of
  // `key` (TiedLayerSpec): each holder keeps a copy, initialised alike and kept equal by
  // ReduceTiedGrads, which sums the copies' gradients.
  PipelineModule& add_tied(std::string name, std::string key, std::string parameter, LayerFactory factory,
                           LayerOptions options = {});
  PipelineModule& add(LayerSpec spec);
  PipelineModule& set_loss(LossFunction loss);
  // Declares the tensors flowing into the first layer and out of every layer (static shapes,
  // checked at every stage boundary). Without it, shapes may change and travel with the data.
  PipelineModule& set_static_shapes(std::vector<std::vector<TensorSpec>> boundary);

  const ModelSpec& spec() const { return spec_; }
  ModelSpec& spec() { return spec_; }
  int num_layers() const { return static_cast<int>(spec_.layers.size()); }
  // Throws UsageError naming the layer when there is none of that name.
  int layer_index(const std::string& name) const;

  // Splits into `num_stages` by a partition method; "parameters" builds layers whose count is
  // unknown once to count them (as DeepSpeed does). Throws UsageError naming the method.
  Partition partition(int num_stages, const std::string& method);
  // Each named layer starts a new stage. Throws UsageError naming an unknown or repeated layer.
  Partition split_at(const std::vector<std::string>& split_points) const;

 private:
  ModelSpec spec_;
};

// Measures every layer's forward + backward time (us, mean of `repetitions`) on `sample`, layer
// after layer on this process, and stores it as the layer's cost for the partition method
// "cost". Builds every layer here once (the random state is restored). With `world`, every rank
// takes rank 0's figures, so all ranks split alike. Returns the costs.
class Transport;
std::vector<double> measure_layer_costs(PipelineModule& module, const MicroBatch& sample, int repetitions,
                                        Transport* world = nullptr);

// ---- skip connections between stages --------------------------------------------------------
// Skip connections between pipeline stages (torchgpipe's stash and pop, carried by the
// schedule's peer_stage of SPEC.md section 3). A skip tensor from stage A to stage B travels:
// not at all when A and B are the same stage or on the same rank (it stays in memory), with the
// activation message when B is A + 1 (it rides along), and otherwise directly from A's rank to
// B's rank, by SendActivation/RecvActivation with peer_stage (its gradient back by
// SendGrad/RecvGrad), never through the stages in between.

enum class SkipCarrier {
  SameStage,       // produced and consumed inside one stage
  Memory,          // other stage, same rank: handed over in memory
  WithActivation,  // the next stage, another rank: an extra message with the activation
  Direct,          // a later stage on another rank: its own transfers, peer_stage = the other end
};

struct SkipRoute {
  std::string name;
  int from_layer = 0, to_layer = 0;
  int from_stage = 0, to_stage = 0;
  SkipCarrier carrier = SkipCarrier::SameStage;
};

// The routes of the model's skip edges (ModelSpec::skip_edges) for this split and placement,
// in name order. Throws UsageError (from skip_edges) for badly declared skips.
std::vector<SkipRoute> skip_routes(const ModelSpec& model, const Partition& partition,
                                   const std::vector<int>& stage_to_rank);

// `schedule` with the transfers of the Direct routes added to the programs of the two ranks:
// per (producer stage A, consumer stage B) and micro-batch, SendActivation(A, peer B) right
// after A's ForwardPass and RecvActivation(B, peer A) right before B's ForwardPass; in training
// RecvGrad(A, peer B) right before A's backward (BackwardPass or BackwardInput) and
// SendGrad(B, peer A) right after B's. The ordinary transfers already order A before B (and B's
// backward before A's), and sends do not wait, so the additions cannot deadlock; the result is
// checked by the core's validator all the same (ValidationError naming the instruction).
// Returns `schedule` unchanged when no route is Direct.
Schedule with_skip_transfers(const Schedule& schedule, const std::vector<SkipRoute>& routes);

}  // namespace pipescope::exec
