// Models saved from Python as TorchScript (torch.jit.script or torch.jit.trace, then save), split
// into pipeline segments without touching the model's code: a new segment begins where forward()
// first calls a named submodule (torch.distributed.pipelining's SplitPoint.BEGINNING), and the
// data flow between segments is read off forward's graph. Each segment becomes one LayerSpec of
// a ModelSpec, so everything that runs built-in models (StageModule, the runtime) runs it too.
//
// What cannot be split is refused at load time with a TorchScriptModelError naming the value,
// submodule or split point; docs/TORCHSCRIPT.md explains each limit.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "pipescope/core/errors.hpp"
#include "pipescope/exec/model.hpp"

namespace pipescope::exec {

// A TorchScript file that cannot be read or split as asked.
class TorchScriptModelError : public UsageError {
 public:
  using UsageError::UsageError;
};

struct TorchScriptSplitOptions {
  // Submodule paths ("block1", or "blocks.1" for a child that forward calls itself) before whose
  // first call a new segment starts, in the order forward calls them. Empty: one segment.
  std::vector<std::string> split_points;
  // One micro-batch of forward's arguments (all Tensors). The loader runs the model once on them
  // to learn the shapes and dtypes that cross each split point (ModelSpec::boundary).
  TensorList example_inputs;
  // Mean loss of one micro-batch from the model's outputs; unset: cross entropy of outputs[0]
  // (classes in the last dimension, any leading dimensions) against integer labels.
  std::function<at::Tensor(const TensorList& outputs, const at::Tensor& labels)> loss;
  // The module's `training` flag while it runs in the pipeline (dropout and the like).
  bool training = true;
};

// Loads `path` and splits it into 1 + split_points.size() segments: layers[i] is "segment<i>",
// its type the submodules it calls (comma separated), its build() a Layer that runs that part of
// forward on its own copy of the module and whose parameters are the weights that part uses
// (named like the script module's, "block1.fc.weight"). Throws TorchScriptModelError.
ModelSpec load_torchscript_model(const std::string& path, const TorchScriptSplitOptions& options);

// The submodule paths that forward() calls directly, in call order: the names that can be split
// points. Throws TorchScriptModelError when the file cannot be loaded.
std::vector<std::string> torchscript_split_point_candidates(const std::string& path);

}  // namespace pipescope::exec
