// The analysis behind load_torchscript_model: forward's graph, walked at its top level, cut
// into segments at the split points, with what each segment computes, calls and reads, and the
// values that cross each boundary. Every limit of the split is refused here, with a
// TorchScriptModelError naming the value, submodule or split point.
#pragma once

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace pipescope::exec::torchscript {

// A weight or buffer of the module, under its dotted name.
struct OwnedTensor {
  std::string name;  // "block1.fc.weight"
  at::Tensor tensor;
  bool is_parameter = true;
};

struct SegmentPlan {
  std::vector<torch::jit::Value*> inputs;   // segment 0: forward's arguments; then the values crossing into it
  std::vector<torch::jit::Value*> outputs;  // the values crossing out of it; the last segment: forward's result
  std::vector<torch::jit::Node*> nodes;     // the top-level nodes it computes, in order
  std::vector<std::string> called;          // submodule paths it calls (the LayerSpec's type)
  std::vector<OwnedTensor> tensors;         // the weights and buffers it reads, each once
};

struct ForwardSplit {
  std::shared_ptr<torch::jit::Graph> graph;                // forward's graph, owned by the module
  std::unordered_set<const torch::jit::Node*> replicated;  // constants and reads of self's attributes
  std::vector<SegmentPlan> segments;
};

// Splits `module`'s forward before the first call of each split point (submodule paths, in the
// order forward calls them). `path` names the file in errors. Throws TorchScriptModelError.
ForwardSplit split_forward(const torch::jit::Module& module, const std::vector<std::string>& split_points,
                           const std::string& path);

// The submodule paths forward calls at its top level, in call order.
std::vector<std::string> called_submodules(torch::jit::Graph& graph);

// How many Tensors a value of `type` becomes when it crosses a boundary; none when it cannot.
std::optional<std::size_t> flat_tensor_count(const c10::TypePtr& type);

// A value as errors name it: "'rows' (Tensor, from aten::relu)".
std::string value_label(const torch::jit::Value* v);

}  // namespace pipescope::exec::torchscript
