// Models as lists of layer specifications (DeepSpeed's LayerSpec / TiedLayerSpec idea): a spec
// knows its size and how to build itself, so a rank builds only the layers of its own stages.
// Each layer is seeded from (seed, layer index), so weights do not depend on the partition, and
// a tied weight is a separate copy on every layer that uses it, initialised identically and kept
// identical by ReduceTiedGrads (DeepSpeed's tied modules).
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/ordered_dict.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pipescope/core/partitioner.hpp"
#include "pipescope/exec/expert_parallel.hpp"

namespace pipescope::exec {

using TensorList = std::vector<at::Tensor>;
// Named tensors in order: {"hidden": ..., "mask": ...}.
using TensorDict = torch::OrderedDict<std::string, at::Tensor>;

// What flows between layers: a tuple (no names) or a dict (one name per tensor, in order).
struct NamedTensors {
  TensorList tensors;
  std::vector<std::string> names;  // empty: a tuple
};

// A layer maps the tensors that flow between layers to the next ones (several tensors allowed).
class Layer : public torch::nn::Module {
 public:
  virtual TensorList forward_layers(const TensorList& inputs) = 0;
  // Layers that take or give dicts override this; a tuple layer drops the names it gets.
  virtual NamedTensors forward_named(const NamedTensors& inputs) { return {forward_layers(inputs.tensors), {}}; }
  // The keys a dict layer takes, in order; empty for a tuple layer (which takes anything).
  virtual std::vector<std::string> input_keys() const { return {}; }
};

// "" when `given` names are what a layer taking `expected` keys accepts (the same keys in the
// same order; unnamed tensors of the right count take the keys in order), else what is wrong,
// naming the key: "no key 'mask'", "unexpected key 'msk'", "key 'mask' is at 0, not 1".
std::string key_mismatch(const std::vector<std::string>& expected, const std::vector<std::string>& given,
                         std::size_t given_count);
// The dict of `inputs` for a layer taking `keys`; throws UsageError naming the key that does not fit.
TensorDict tensor_dict_of(const NamedTensors& inputs, const std::vector<std::string>& keys);
NamedTensors named_tensors_of(const TensorDict& dict);

struct TensorSpec {
  std::vector<std::int64_t> sizes;
  at::ScalarType dtype = at::kFloat;
  std::string name{};  // dict entries: the key (checked between stages); "" in a tuple
};

struct LayerSpec {
  std::string name;  // "blocks.3"
  std::string type;  // "TransformerBlock" (matched by --partition type:REGEX)
  std::int64_t parameters = 0;
  std::string tied_key;        // non-empty: a weight shared with other layers of this key
  std::string tied_parameter;  // the parameter of this layer that holds the tied weight
  std::function<std::shared_ptr<Layer>()> build;
  double cost = 0;  // > 0: the layer's relative or measured time (--partition cost);
                    // otherwise the partitioner's cost is the parameter count
  // Skip connections (torchgpipe's stash and pop): the layer's last outputs, one per name of
  // `stash`, leave the flow and are kept under those names; a later layer naming them in `pop`
  // gets them appended to its inputs, in `pop` order. Between stages on different ranks they
  // travel directly from the producing stage to the consuming one (peer_stage), not through
  // the stages in between.
  std::vector<std::string> stash{};
  std::vector<std::string> pop{};
};

// A skip connection: the tensor `name` stashed by layer `from_layer`, popped by `to_layer`.
struct SkipEdge {
  std::string name;
  int from_layer = 0;
  int to_layer = 0;
};

struct ModelConfig {
  std::string name = "mlp";  // mlp | tiny-gpt | tiny-moe
  int layers = 4;
  int hidden = 64;
  int seq_len = 16;
  int vocab = 128;
  int micro_batch_size = 8;
  std::uint64_t seed = 1234;
  // tiny-moe: experts per MoE block, the experts each token goes to, each expert's (and the
  // shared expert's, 0: none) FFN width, the weight of the auxiliary load-balancing loss, and E,
  // the ranks sharing a block's experts (expert_parallel.hpp).
  int experts = 4;
  int top_k = 2;
  int moe_ffn_hidden = 128;
  int shared_expert_ffn_hidden = 0;
  double aux_loss_coefficient = 0.01;
  int expert_parallel = 1;
};

struct MicroBatch {
  TensorList inputs;  // what the first layer takes
  at::Tensor labels;  // what the loss compares with
};

struct ModelSpec {
  ModelConfig config;
  std::vector<LayerSpec> layers;
  // boundary[i]: the tensors flowing into layer i; boundary[layers.size()] is the model output.
  std::vector<std::vector<TensorSpec>> boundary;
  // Mean loss of one micro-batch from the model output.
  std::function<at::Tensor(const TensorList& outputs, const at::Tensor& labels)> loss;
  // True when the tensors between stages may change shape from one micro-batch to the next, or
  // `boundary` is empty (not declared): every activation transfer then carries its shapes and
  // dtypes in a small header message first (DeepSpeed's dynamic shapes). With declared static
  // shapes, a stage whose output does not match them fails naming the stage and the tensor.
  bool dynamic_shapes = false;
  // MoE models: the expert parallelism their MoE layers share (connected by the caller once the
  // world is up); null for dense models.
  std::shared_ptr<ExpertParallel> expert_parallel;

  std::vector<LayerInfo> layer_infos() const;  // for the core's partitioner
  // The skip connections in stash order; throws UsageError naming the layer and the name when
  // a name is stashed twice, popped twice, popped before (or without) its stash, or never popped.
  std::vector<SkipEdge> skip_edges() const;
};

// Skip tensors by name, between the runs of layers that stash and pop them.
using SkipTensors = std::map<std::string, at::Tensor>;

// Throws UsageError naming --model when the name is unknown.
ModelSpec make_model_spec(const ModelConfig& config);

// The deterministic synthetic data set: sample `index` (a micro-batch) depends only on the
// configuration, the seed and the index. `with_labels` false leaves the labels undefined: the
// first stage of a pipeline needs only the inputs, and the mlp's labels cost a matrix product.
MicroBatch make_micro_batch(const ModelConfig& config, std::int64_t index, bool with_labels = true);

// The seed of layer `layer_index` (and of a tied weight, from its key).
std::uint64_t layer_seed(std::uint64_t seed, std::uint64_t layer_index);

// Layers [first, end) of a model, built and seeded on this process.
class StageModule {
 public:
  StageModule(const ModelSpec& spec, int first_layer, int end_layer);

  TensorList forward(const TensorList& inputs);
  // Layers [first, end) of this stage only (model-wide indices), for recomputation.
  TensorList forward_range(const TensorList& inputs, int first_layer, int end_layer);
  // The same with names (dicts): a dict layer whose input keys differ throws UsageError naming
  // the layer and the key.
  // `skips` (optional) holds the skip tensors the layers may pop (taken out when popped) and
  // receives those they stash; without it a layer that stashes or pops throws UsageError.
  NamedTensors forward_named(const NamedTensors& inputs, SkipTensors* skips = nullptr);
  NamedTensors forward_range_named(const NamedTensors& inputs, int first_layer, int end_layer,
                                   SkipTensors* skips = nullptr);
  // The keys the stage's first layer takes (empty: a tuple layer), and its name.
  std::vector<std::string> input_keys() const;
  const std::string& first_layer_name() const { return layer_names_.front(); }
  // Moves the weights to `device` (before an optimizer holds them).
  void to(at::Device device);
  int first_layer() const { return first_layer_; }
  int end_layer() const { return end_layer_; }
  // Layer `index` (model-wide, in [first_layer, end_layer)), for what asks a layer of a given
  // type more than its forward (the expert-call probe asks MoE blocks for their experts).
  Layer& layer(int index) { return *layers_.at(static_cast<std::size_t>(index - first_layer_)); }

  struct Parameter {
    std::string name;  // "layer3.fc.weight": unique in the whole model
    at::Tensor tensor;
    int layer = 0;
    std::string tied_key;  // non-empty for a tied weight
  };
  const std::vector<Parameter>& parameters() const { return parameters_; }
  TensorList parameter_tensors() const;

 private:
  int first_layer_ = 0;
  int end_layer_ = 0;
  std::vector<std::shared_ptr<Layer>> layers_;
  std::vector<std::string> layer_names_;
  std::vector<std::vector<std::string>> layer_stash_, layer_pop_;
  std::vector<Parameter> parameters_;
};

}  // namespace pipescope::exec
