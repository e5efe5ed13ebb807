// Models as lists of layer specifications (DeepSpeed's LayerSpec / TiedLayerSpec idea): a spec
// knows its size and how to build itself, so a rank builds only the layers of its own stages.
// Each layer is seeded from (seed, layer index), so weights do not depend on the partition, and
// a tied weight is a separate copy on every layer that uses it, initialised identically and kept
// identical by ReduceTiedGrads (DeepSpeed's tied modules).
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pipescope/core/partitioner.hpp"

namespace pipescope::exec {

using TensorList = std::vector<at::Tensor>;

// A layer maps the tensors that flow between layers to the next ones (several tensors allowed).
class Layer : public torch::nn::Module {
 public:
  virtual TensorList forward_layers(const TensorList& inputs) = 0;
};

struct TensorSpec {
  std::vector<std::int64_t> sizes;
  at::ScalarType dtype = at::kFloat;
};

struct LayerSpec {
  std::string name;                  // "blocks.3"
  std::string type;                  // "TransformerBlock" (matched by --partition type:REGEX)
  std::int64_t parameters = 0;
  std::string tied_key;              // non-empty: a weight shared with other layers of this key
  std::string tied_parameter;        // the parameter of this layer that holds the tied weight
  std::function<std::shared_ptr<Layer>()> build;
  double cost = 0;                   // > 0: the layer's relative or measured time (--partition cost);
                                     // otherwise the partitioner's cost is the parameter count
};

struct ModelConfig {
  std::string name = "mlp";          // mlp | tiny-gpt
  int layers = 4;
  int hidden = 64;
  int seq_len = 16;
  int vocab = 128;
  int micro_batch_size = 8;
  std::uint64_t seed = 1234;
};

struct MicroBatch {
  TensorList inputs;                 // what the first layer takes
  at::Tensor labels;                 // what the loss compares with
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

  std::vector<LayerInfo> layer_infos() const;  // for the core's partitioner
};

// Throws UsageError naming --model when the name is unknown.
ModelSpec make_model_spec(const ModelConfig& config);

// The deterministic synthetic data set: sample `index` (a micro-batch) depends only on the
// configuration, the seed and the index.
MicroBatch make_micro_batch(const ModelConfig& config, std::int64_t index);

// The seed of layer `layer_index` (and of a tied weight, from its key).
std::uint64_t layer_seed(std::uint64_t seed, std::uint64_t layer_index);

// Layers [first, end) of a model, built and seeded on this process.
class StageModule {
 public:
  StageModule(const ModelSpec& spec, int first_layer, int end_layer);

  TensorList forward(const TensorList& inputs);
  // Layers [first, end) of this stage only (model-wide indices), for recomputation.
  TensorList forward_range(const TensorList& inputs, int first_layer, int end_layer);
  // Moves the weights to `device` (before an optimizer holds them).
  void to(at::Device device);
  int first_layer() const { return first_layer_; }
  int end_layer() const { return end_layer_; }

  struct Parameter {
    std::string name;       // "layer3.fc.weight": unique in the whole model
    at::Tensor tensor;
    int layer = 0;
    std::string tied_key;   // non-empty for a tied weight
  };
  const std::vector<Parameter>& parameters() const { return parameters_; }
  TensorList parameter_tensors() const;

 private:
  int first_layer_ = 0;
  int end_layer_ = 0;
  std::vector<std::shared_ptr<Layer>> layers_;
  std::vector<std::string> layer_names_;
  std::vector<Parameter> parameters_;
};

}  // namespace pipescope::exec
