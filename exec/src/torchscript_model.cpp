// TorchScript models as pipeline layers (torchscript_model.hpp): the file is loaded, forward is
// split (torchscript/forward_split.hpp), and each segment runs as one Layer on its own copy of the
// module. A segment graph (torchscript/segment_graph.hpp) runs in the TorchScript interpreter
// with the graph optimiser off, so autograd records the same eager operations as the unsplit
// module and the split run reproduces it bit for bit.
#include "pipescope/exec/torchscript_model.hpp"

#include <unistd.h>

#include <fmt/format.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/version.h>

#include <map>
#include <sstream>
#include <unordered_set>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/input_file.hpp"
#include "torchscript/forward_split.hpp"
#include "torchscript/segment_graph.hpp"

namespace pipescope::exec {
namespace {

using torch::jit::Graph;
using torch::jit::Value;
using torchscript::called_submodules;
using torchscript::flat_tensor_count;
using torchscript::ForwardSplit;
using torchscript::OwnedTensor;
using torchscript::segment_graph;
using torchscript::SegmentPlan;
using torchscript::split_forward;

// The first non-blank line of a LibTorch message (TorchScript errors start with a newline).
std::string first_nonblank_line(const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) return line;
  return text;
}

// The TorchScript interpreter's errors open with a fixed header and a script traceback; the
// cause ("RuntimeError: mat1 and mat2 shapes cannot be multiplied ...") is the last line.
std::string cause_line(const std::string& text) {
  std::string first = first_nonblank_line(text);
  if (first.rfind("The following operation failed in the TorchScript interpreter", 0) != 0) return first;
  std::istringstream lines(text);
  std::string cause;
  for (std::string line; std::getline(lines, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) cause = line;
  return cause;
}

// A regular file only, opened without blocking: a FIFO given as the model is refused, not waited on.
std::string read_file_bytes(const std::string& path) {
  std::string problem;
  const int fd = open_regular_file(path, problem);
  if (fd < 0)
    throw TorchScriptModelError(fmt::format("TorchScript model '{}': cannot open the file: {}", path, problem));
  ::close(fd);
  try {
    return read_file(path);
  } catch (const std::exception& e) {
    throw TorchScriptModelError(fmt::format("TorchScript model '{}': {}", path, e.what()));
  }
}

// Every copy is loaded from the same bytes, so stages built on different ranks (or twice in one
// process) start from the same weights and never share tensors.
torch::jit::Module load_module(const std::string& path, const std::string& bytes) {
  std::istringstream in(bytes);
  try {
    return torch::jit::load(in);
  } catch (const std::exception& e) {  // c10::Error, or the compiler's ErrorReport for unknown operators
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    throw TorchScriptModelError(fmt::format(
        "TorchScript model '{}': LibTorch {} cannot load it: {} (a file saved by a newer PyTorch may use a file "
        "format version or operators this LibTorch does not know: save it with torch {}.{} or older, see "
        "docs/TORCHSCRIPT.md)",
        path, TORCH_VERSION, first_nonblank_line(c10_error ? c10_error->what_without_backtrace() : e.what()),
        TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR));
  }
}

// One segment of forward on its own copy of the module. Its parameters are the script module's
// own tensors, registered under the script's names, so optimizers and Module::to act on the
// tensors the graph reads.
class ScriptSegmentLayer : public Layer {
 public:
  ScriptSegmentLayer(torch::jit::Module module, std::shared_ptr<Graph> graph, std::size_t segment,
                     const std::vector<OwnedTensor>& tensors, std::size_t input_count)
      : module_(std::move(module)),
        function_(std::make_unique<torch::jit::GraphFunction>(
            c10::QualifiedName(fmt::format("pipescope.segment{}", segment)), std::move(graph), nullptr)),
        segment_(segment),
        input_count_(input_count) {
    for (const auto& t : tensors) {
      const auto dot = t.name.rfind('.');
      torch::nn::Module& owner = mirror(dot == std::string::npos ? "" : t.name.substr(0, dot));
      const std::string leaf = dot == std::string::npos ? t.name : t.name.substr(dot + 1);
      if (t.is_parameter)
        owner.register_parameter(leaf, t.tensor, t.tensor.requires_grad());
      else
        owner.register_buffer(leaf, t.tensor);
    }
  }

  TensorList forward_layers(const TensorList& inputs) override {
    if (inputs.size() != input_count_)
      throw std::invalid_argument(
          fmt::format("TorchScript segment {} takes {} tensors, got {}", segment_, input_count_, inputs.size()));
    torch::jit::GraphOptimizerEnabledGuard plain_interpreter(false);
    torch::jit::Stack stack;
    stack.reserve(inputs.size() + 1);
    stack.emplace_back(module_._ivalue());
    for (const auto& t : inputs) stack.emplace_back(t);
    function_->run(stack);
    TensorList outputs;
    for (const c10::IValue& element : stack.back().toTuple()->elements()) outputs.push_back(element.toTensor());
    return outputs;
  }

 private:
  // The torch::nn::Module that holds tensors named "<prefix>.*", created on first use.
  torch::nn::Module& mirror(const std::string& prefix) {
    if (prefix.empty()) return *this;
    auto it = mirrors_.find(prefix);
    if (it != mirrors_.end()) return *it->second;
    const auto dot = prefix.rfind('.');
    torch::nn::Module& parent = mirror(dot == std::string::npos ? "" : prefix.substr(0, dot));
    auto child = std::make_shared<torch::nn::Module>();
    parent.register_module(dot == std::string::npos ? prefix : prefix.substr(dot + 1), child);
    return *mirrors_.emplace(prefix, child).first->second;
  }

  torch::jit::Module module_;
  std::unique_ptr<torch::jit::GraphFunction> function_;
  std::size_t segment_;
  std::size_t input_count_;
  std::map<std::string, std::shared_ptr<torch::nn::Module>> mirrors_;
};

std::size_t flat_count_of(const std::vector<Value*>& values) {
  std::size_t count = 0;
  for (const Value* v : values) count += *flat_tensor_count(v->type());
  return count;
}

// A stage's copy keeps only the tensors its segment reads; the rest of the model is released.
void release_unread_tensors(torch::jit::Module& module, const std::vector<OwnedTensor>& kept) {
  std::unordered_set<const c10::TensorImpl*> keep;
  for (const auto& t : kept) keep.insert(t.tensor.unsafeGetTensorImpl());
  for (const torch::jit::Module& m : module.modules()) {
    const auto& type = m.type();
    for (std::size_t slot = 0; slot < type->numAttributes(); ++slot) {
      c10::IValue value = m._ivalue()->getSlot(slot);
      if (!value.isTensor() || !value.toTensor().defined() || keep.count(value.toTensor().unsafeGetTensorImpl()))
        continue;
      const at::Tensor& unread = value.toTensor();
      m._ivalue()->setSlot(slot, at::empty({0}, unread.options()).requires_grad_(unread.requires_grad()));
    }
  }
}

std::shared_ptr<Layer> build_segment_layer(const std::string& path, const std::string& bytes,
                                           const std::vector<std::string>& split_points, bool training, std::size_t s) {
  torch::jit::Module copy = load_module(path, bytes);
  copy.train(training);
  const ForwardSplit split = split_forward(copy, split_points, path);
  const SegmentPlan& plan = split.segments.at(s);
  release_unread_tensors(copy, plan.tensors);
  return std::make_shared<ScriptSegmentLayer>(copy, segment_graph(split, s), s, plan.tensors,
                                              flat_count_of(plan.inputs));
}

}  // namespace

std::vector<std::string> torchscript_split_point_candidates(const std::string& path) {
  torch::jit::Module module = load_module(path, read_file_bytes(path));
  auto forward = module.find_method("forward");
  if (!forward)
    throw TorchScriptModelError(fmt::format("TorchScript model '{}': the module has no forward method", path));
  return called_submodules(*forward->graph());
}

ModelSpec load_torchscript_model(const std::string& path, const TorchScriptSplitOptions& options) {
  auto bytes = std::make_shared<const std::string>(read_file_bytes(path));
  torch::jit::Module module = load_module(path, *bytes);
  module.train(options.training);
  const ForwardSplit split = split_forward(module, options.split_points, path);

  const std::size_t argument_count = split.graph->inputs().size() - 1;
  if (options.example_inputs.size() != argument_count)
    throw TorchScriptModelError(
        fmt::format("TorchScript model '{}': forward takes {} tensors but {} example inputs were given", path,
                    argument_count, options.example_inputs.size()));
  for (std::size_t i = 0; i < options.example_inputs.size(); ++i)
    if (!options.example_inputs[i].defined())
      throw TorchScriptModelError(
          fmt::format("TorchScript model '{}': example input {} is an undefined tensor", path, i));

  ModelSpec spec;
  spec.config.name = "torchscript";
  spec.config.layers = static_cast<int>(split.segments.size());
  spec.config.micro_batch_size = options.example_inputs.empty() || options.example_inputs[0].dim() == 0
                                     ? 1
                                     : static_cast<int>(options.example_inputs[0].size(0));

  // One run of the example through the segments gives the tensors at every boundary.
  auto specs_of = [](const TensorList& tensors) {
    std::vector<TensorSpec> out;
    for (const auto& t : tensors) out.push_back({t.sizes().vec(), t.scalar_type()});
    return out;
  };
  TensorList flowing = options.example_inputs;
  spec.boundary.push_back(specs_of(flowing));
  for (std::size_t s = 0; s < split.segments.size(); ++s) {
    const SegmentPlan& plan = split.segments[s];
    ScriptSegmentLayer probe(module, segment_graph(split, s), s, {}, flat_count_of(plan.inputs));
    try {
      at::NoGradGuard no_grad;
      flowing = probe.forward_layers(flowing);
    } catch (const std::exception& e) {
      const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
      throw TorchScriptModelError(fmt::format("TorchScript model '{}': segment {} fails on the example inputs: {}",
                                              path, s,
                                              cause_line(c10_error ? c10_error->what_without_backtrace() : e.what())));
    }
    spec.boundary.push_back(specs_of(flowing));

    std::int64_t parameter_count = 0;
    for (const auto& t : plan.tensors)
      if (t.is_parameter) parameter_count += t.tensor.numel();
    std::string type;
    for (const auto& called : plan.called) type += (type.empty() ? "" : ",") + called;
    spec.layers.push_back({fmt::format("segment{}", s), type, parameter_count, "", "",
                           [path, bytes, points = options.split_points, training = options.training, s] {
                             return build_segment_layer(path, *bytes, points, training, s);
                           }});
  }

  spec.loss = options.loss ? options.loss : [](const TensorList& outputs, const at::Tensor& labels) {
    const at::Tensor& logits = outputs.at(0);
    return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}));
  };
  return spec;
}

}  // namespace pipescope::exec
