// Splitting a TorchScript module's forward graph into pipeline segments (torchscript_model.hpp).
//
// forward's graph is walked at its top level, without inlining, so calls of submodules stay
// visible as prim::CallMethod on prim::GetAttr chains rooted at self. A top-level node belongs to
// the segment whose split point was last passed. Reads of self's attributes (submodules,
// weights) and constants are repeated in every segment that needs them rather than crossing a
// boundary; any other value computed in one segment and used in a later one crosses every
// boundary in between, flattened to Tensors. Each segment graph takes self plus its incoming
// Tensors and returns a tuple of its outgoing Tensors; it runs in the TorchScript interpreter
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

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/input_file.hpp"

namespace pipescope::exec {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

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
  const std::string first = first_nonblank_line(text);
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
  if (fd < 0) throw TorchScriptModelError(fmt::format("TorchScript model '{}': cannot open the file: {}", path, problem));
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
        path, TORCH_VERSION, first_nonblank_line(c10_error ? c10_error->what_without_backtrace() : e.what()), TORCH_VERSION_MAJOR,
        TORCH_VERSION_MINOR));
  }
}

// How many Tensors a value of `type` becomes when it crosses a boundary; none when it cannot.
std::optional<std::size_t> flat_tensor_count(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return 1;
  if (auto tuple = type->cast<c10::TupleType>()) {
    std::size_t count = 0;
    for (const auto& element : tuple->elements()) {
      auto element_count = flat_tensor_count(element);
      if (!element_count) return std::nullopt;
      count += *element_count;
    }
    return count;
  }
  return std::nullopt;
}

// "rows" for the SSA value "rows.1" that the script variable `rows` became; "%4" when unnamed.
std::string source_name(const Value* v) { return v->hasDebugName() ? v->debugNameBase() : "%" + v->debugName(); }

std::string value_label(const Value* v) {
  return fmt::format("'{}' ({}, from {})", source_name(v), v->type()->annotation_str(), v->node()->kind().toQualString());
}

std::string join_path(const std::string& parent, const std::string& name) { return parent.empty() ? name : parent + "." + name; }

bool path_is_under(const std::string& path, const std::string& root) {
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '.');
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

void for_each_node(Block* block, const std::function<void(Node*)>& visit) {
  for (Node* n : block->nodes()) {
    visit(n);
    for (Block* inner : n->blocks()) for_each_node(inner, visit);
  }
  visit(block->return_node());  // block outputs are uses too
}

Node* top_level_ancestor(Node* n, const Block* top) {
  while (n->owningBlock() != top) n = n->owningBlock()->owningNode();
  return n;
}

// The attribute of `module` at a dotted path; none when a step does not exist.
std::optional<c10::IValue> resolve_path(const torch::jit::Module& module, const std::string& path) {
  c10::IValue current = module._ivalue();
  std::size_t start = 0;
  while (start <= path.size() && !path.empty()) {
    const std::size_t dot = path.find('.', start);
    const std::string name = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!current.isObject() || !current.toObjectRef().type()->hasAttribute(name)) return std::nullopt;
    current = current.toObjectRef().getAttr(name);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return current;
}

struct OwnedTensor {
  std::string name;  // "block1.fc.weight"
  at::Tensor tensor;
  bool is_parameter = true;
};

// The parameters and other tensors reached through an attribute path.
std::vector<OwnedTensor> tensors_under(const torch::jit::Module& module, const std::string& path) {
  std::vector<OwnedTensor> out;
  auto value = resolve_path(module, path);
  if (!value) return out;
  if (value->isTensor()) {
    const auto dot = path.rfind('.');
    auto parent = resolve_path(module, dot == std::string::npos ? "" : path.substr(0, dot));
    const auto& parent_type = parent->toObjectRef().type();
    const std::string leaf = dot == std::string::npos ? path : path.substr(dot + 1);
    out.push_back({path, value->toTensor(), parent_type->is_parameter(parent_type->getAttributeSlot(leaf))});
  } else if (value->isModule()) {
    torch::jit::Module sub(value->toObject());
    std::unordered_set<const c10::TensorImpl*> parameters;
    for (const auto& p : sub.named_parameters(true)) {
      parameters.insert(p.value.unsafeGetTensorImpl());
      out.push_back({join_path(path, p.name), p.value, true});
    }
    for (const auto& a : sub.named_attributes(true))
      if (a.value.isTensor() && a.value.toTensor().defined() && !parameters.count(a.value.toTensor().unsafeGetTensorImpl()))
        out.push_back({join_path(path, a.name), a.value.toTensor(), false});
  }
  return out;
}

struct SegmentPlan {
  std::vector<Value*> inputs;    // segment 0: forward's arguments; then the values crossing into it
  std::vector<Value*> outputs;   // the values crossing out of it; the last segment: forward's result
  std::vector<Node*> nodes;      // the top-level nodes it computes, in order
  std::vector<std::string> called;  // submodule paths it calls (the LayerSpec's type)
  std::vector<OwnedTensor> tensors;  // the weights and buffers it reads, each once
};

struct ForwardSplit {
  std::shared_ptr<Graph> graph;  // forward's graph, owned by the module
  std::unordered_set<const Node*> replicated;  // constants and reads of self's attributes
  std::vector<SegmentPlan> segments;
};

// Paths of the prim::GetAttr chains rooted at self ("" is self).
std::unordered_map<const Value*, std::string> attribute_paths(Graph& graph) {
  std::unordered_map<const Value*, std::string> path_of{{graph.inputs().at(0), ""}};
  for_each_node(graph.block(), [&](Node* n) {
    if (n->kind() != c10::prim::GetAttr) return;
    auto parent = path_of.find(n->input(0));
    if (parent != path_of.end()) path_of[n->output()] = join_path(parent->second, n->s(c10::attr::name));
  });
  return path_of;
}

// The submodule paths forward calls at its top level, in call order.
std::vector<std::string> called_submodules(Graph& graph) {
  const auto path_of = attribute_paths(graph);
  std::vector<std::string> called;
  for (Node* n : graph.nodes()) {
    if (n->kind() != c10::prim::CallMethod) continue;
    auto path = path_of.find(n->input(0));
    if (path != path_of.end() && !path->second.empty() &&
        std::find(called.begin(), called.end(), path->second) == called.end())
      called.push_back(path->second);
  }
  return called;
}

ForwardSplit split_forward(const torch::jit::Module& module, const std::vector<std::string>& split_points,
                           const std::string& path) {
  const std::string where = fmt::format("TorchScript model '{}'", path);
  auto forward = module.find_method("forward");
  if (!forward) throw TorchScriptModelError(fmt::format("{}: the module has no forward method", where));
  ForwardSplit split;
  split.graph = forward->graph();
  Graph& graph = *split.graph;
  Block* top = graph.block();
  const auto path_of = attribute_paths(graph);
  const std::string calls_hint = fmt::format("forward calls: {}", join_names(called_submodules(graph)));

  for (std::size_t i = 1; i < graph.inputs().size(); ++i) {
    const Value* arg = graph.inputs()[i];
    if (arg->type()->kind() != c10::TypeKind::TensorType)
      throw TorchScriptModelError(fmt::format(
          "{}: forward's argument '{}' has type {}: a pipeline feeds forward Tensors only", where, source_name(arg),
          arg->type()->annotation_str()));
  }
  if (graph.outputs().size() != 1 || !flat_tensor_count(graph.outputs()[0]->type()))
    throw TorchScriptModelError(fmt::format("{}: forward returns {}: the model's result must be a Tensor or a tuple of Tensors",
                                            where, graph.outputs()[0]->type()->annotation_str()));

  // Top-level positions; the graph's return comes after every node.
  std::unordered_map<const Node*, std::size_t> position;
  std::vector<Node*> top_nodes;
  for (Node* n : graph.nodes()) {
    position[n] = top_nodes.size();
    top_nodes.push_back(n);
  }
  position[graph.return_node()] = top_nodes.size();
  for (Node* n : top_nodes) {
    const bool reads_self = n->kind() == c10::prim::GetAttr && path_of.count(n->input(0));
    if (n->kind() == c10::prim::Constant || reads_self) split.replicated.insert(n);
  }

  // Every use of self's attributes by something other than a further attribute read.
  struct AttributeUse {
    std::string path;
    Node* user;
    std::size_t top_position;
  };
  std::vector<AttributeUse> uses;
  for_each_node(top, [&](Node* n) {
    if (n->kind() == c10::prim::SetAttr && path_of.count(n->input(0)))
      throw TorchScriptModelError(fmt::format("{}: forward assigns self.{}: module state written by forward cannot be split",
                                              where, join_path(path_of.at(n->input(0)), n->s(c10::attr::name))));
    if (n->kind() == c10::prim::GetAttr) return;
    for (const Value* in : n->inputs()) {
      auto p = path_of.find(in);
      if (p != path_of.end()) uses.push_back({p->second, n, position.at(top_level_ancestor(n, top))});
    }
  });

  // Split points: where forward first calls each of them, at its top level.
  std::vector<std::size_t> starts;
  for (std::size_t k = 0; k < split_points.size(); ++k) {
    const std::string& point = split_points[k];
    auto target = point.empty() ? std::nullopt : resolve_path(module, point);
    if (!target || !target->isModule())
      throw TorchScriptModelError(fmt::format("{}: split point '{}' names no submodule of the model ({})", where, point, calls_hint));
    auto first_call = std::find_if(uses.begin(), uses.end(), [&](const AttributeUse& u) {
      if (u.user->kind() != c10::prim::CallMethod) return false;
      auto callee = path_of.find(u.user->input(0));
      return callee != path_of.end() && callee->second == point;
    });
    if (first_call == uses.end())
      throw TorchScriptModelError(fmt::format(
          "{}: split point '{}' is not called by forward itself (a submodule called only from inside another "
          "submodule, such as an nn.Sequential's child, cannot start a stage; {})",
          where, point, calls_hint));
    if (first_call->user->owningBlock() != top)
      throw TorchScriptModelError(fmt::format(
          "{}: split point '{}' is first called inside a {} of forward: control flow cannot span a split point",
          where, point, top_level_ancestor(first_call->user, top)->kind().toQualString()));
    const std::size_t start = first_call->top_position;
    if (k > 0 && start <= starts.back())
      throw TorchScriptModelError(fmt::format(
          "{}: split point '{}' is called {} split point '{}': give split points in the order forward calls them", where,
          point, start == starts.back() ? "at the same place as" : "before", split_points[k - 1]));
    starts.push_back(start);
  }
  const std::size_t segment_count = split_points.size() + 1;
  auto segment_at = [&](std::size_t top_position) {
    return static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), top_position) - starts.begin());
  };
  auto segment_name = [&](std::size_t s) {
    return s == 0 ? std::string("segment 0 (before the first split point)")
                  : fmt::format("segment {} (from split point '{}')", s, split_points[s - 1]);
  };

  // A split point's weights must not be reached before the split point.
  for (std::size_t k = 0; k < split_points.size(); ++k)
    for (const auto& use : uses)
      if (path_is_under(use.path, split_points[k]) && use.top_position < starts[k])
        throw TorchScriptModelError(fmt::format(
            "{}: '{}' is used by {} before its split point '{}' (forward reaches it before it first calls it)", where,
            use.path, use.user->kind().toQualString(), split_points[k]));

  split.segments.resize(segment_count);
  for (Node* n : top_nodes)
    if (!split.replicated.count(n)) split.segments[segment_at(position.at(n))].nodes.push_back(n);
  for (const auto& use : uses) {
    auto& called = split.segments[segment_at(use.top_position)].called;
    if (use.user->kind() == c10::prim::CallMethod && use.user->owningBlock() == top && !use.path.empty() &&
        std::find(called.begin(), called.end(), use.path) == called.end())
      called.push_back(use.path);
  }

  // Weights belong to the one segment that reads them; buffers are copied to every reader.
  struct Owner {
    std::size_t segment;
    std::string via;
  };
  std::unordered_map<const c10::TensorImpl*, Owner> parameter_owner;
  std::vector<std::unordered_set<const c10::TensorImpl*>> seen(segment_count);
  for (const auto& use : uses) {
    const std::size_t s = segment_at(use.top_position);
    for (auto& owned : tensors_under(module, use.path)) {
      const c10::TensorImpl* impl = owned.tensor.unsafeGetTensorImpl();
      if (owned.is_parameter) {
        auto [it, inserted] = parameter_owner.emplace(impl, Owner{s, use.path});
        if (!inserted && it->second.segment != s)
          throw TorchScriptModelError(fmt::format(
              "{}: parameter '{}' is used by {} through '{}' and by {} through '{}': weights belong to one stage only "
              "(a submodule with weights called on both sides of a split point, or weights tied across one)",
              where, owned.name, segment_name(it->second.segment), it->second.via.empty() ? "self" : it->second.via,
              segment_name(s), use.path.empty() ? "self" : use.path));
      }
      if (seen[s].insert(impl).second) split.segments[s].tensors.push_back(std::move(owned));
    }
  }

  // Values that cross boundaries, in the order they are defined (forward's arguments first).
  using DefinitionKey = std::pair<std::size_t, std::size_t>;  // (0, argument) or (1 + position, output)
  std::vector<std::map<DefinitionKey, Value*>> crossing(segment_count);
  for_each_node(top, [&](Node* user) {
    const std::size_t user_segment = segment_at(position.at(top_level_ancestor(user, top)));
    for (Value* v : user->inputs()) {
      Node* definer = v->node();
      DefinitionKey key;
      std::size_t defined_in = 0;
      if (definer == graph.param_node()) {
        if (v->offset() == 0) continue;  // self is every segment's first input
        key = {0, v->offset()};
      } else if (definer->owningBlock() == top && !split.replicated.count(definer)) {
        key = {1 + position.at(definer), v->offset()};
        defined_in = segment_at(position.at(definer));
      } else {
        continue;  // defined inside the same top-level node, or replicated
      }
      for (std::size_t b = defined_in + 1; b <= user_segment; ++b) {
        if (!flat_tensor_count(v->type()))
          throw TorchScriptModelError(fmt::format(
              "{}: value {} is computed before split point '{}' and used after it: only Tensors and tuples of "
              "Tensors can cross a split point",
              where, value_label(v), split_points[b - 1]));
        crossing[b].emplace(key, v);
      }
    }
  });

  for (std::size_t s = 0; s < segment_count; ++s) {
    auto& plan = split.segments[s];
    if (s == 0)
      plan.inputs.assign(graph.inputs().begin() + 1, graph.inputs().end());
    else
      for (const auto& [key, v] : crossing[s]) plan.inputs.push_back(v);
    if (s + 1 < segment_count)
      for (const auto& [key, v] : crossing[s + 1]) plan.outputs.push_back(v);
    else
      plan.outputs.push_back(graph.outputs()[0]);
  }
  return split;
}

Value* repack(Graph& g, const c10::TypePtr& type, const std::function<Value*()>& next_tensor) {
  if (auto tuple = type->cast<c10::TupleType>()) {
    std::vector<Value*> elements;
    for (const auto& element : tuple->elements()) elements.push_back(repack(g, element, next_tensor));
    return g.insertNode(g.createTuple(elements, tuple->name() ? tuple : nullptr))->output();
  }
  return next_tensor();
}

void flatten(Graph& g, Value* v, std::vector<Value*>& out) {
  if (!v->type()->cast<c10::TupleType>()) {
    out.push_back(v);
    return;
  }
  Node* unpack = g.insertNode(g.createTupleUnpack(v));
  for (Value* element : unpack->outputs()) flatten(g, element, out);
}

// Segment `s` as a graph of its own: (self, incoming Tensors...) -> tuple of outgoing Tensors.
std::shared_ptr<Graph> segment_graph(const ForwardSplit& split, std::size_t s) {
  const SegmentPlan& plan = split.segments.at(s);
  auto g = std::make_shared<Graph>();
  std::unordered_map<Value*, Value*> env;
  Value* self = g->addInput("self");
  self->setType(split.graph->inputs().at(0)->type());
  env[split.graph->inputs().at(0)] = self;
  for (Value* v : plan.inputs)
    env[v] = repack(*g, v->type(), [&] { return g->addInput()->setType(c10::TensorType::get()); });

  std::function<Value*(Value*)> lookup = [&](Value* v) -> Value* {
    if (auto it = env.find(v); it != env.end()) return it->second;
    Node* definer = v->node();
    if (!split.replicated.count(definer))
      throw std::logic_error(fmt::format("segment {} uses {} that it neither computes nor receives", s, value_label(v)));
    Node* copy = g->insertNode(g->createClone(definer, lookup));
    for (std::size_t i = 0; i < definer->outputs().size(); ++i) env[definer->output(i)] = copy->output(i);
    return env.at(v);
  };
  for (Node* n : plan.nodes) {
    Node* copy = g->insertNode(g->createClone(n, lookup));
    for (std::size_t i = 0; i < n->outputs().size(); ++i) env[n->output(i)] = copy->output(i);
  }
  std::vector<Value*> flat;
  for (Value* v : plan.outputs) flatten(*g, lookup(v), flat);
  g->registerOutput(g->insertNode(g->createTuple(flat))->output());
  g->lint();
  return g;
}

// One segment of forward on its own copy of the module. Its parameters are the script module's
// own tensors, registered under the script's names, so optimizers and Module::to act on the
// tensors the graph reads.
class ScriptSegmentLayer : public Layer {
 public:
  ScriptSegmentLayer(torch::jit::Module module, std::shared_ptr<Graph> graph, std::size_t segment,
                     const std::vector<OwnedTensor>& tensors, std::size_t input_count)
      : module_(std::move(module)),
        function_(std::make_unique<torch::jit::GraphFunction>(c10::QualifiedName(fmt::format("pipescope.segment{}", segment)),
                                                             std::move(graph), nullptr)),
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
      if (!value.isTensor() || !value.toTensor().defined() || keep.count(value.toTensor().unsafeGetTensorImpl())) continue;
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
  return std::make_shared<ScriptSegmentLayer>(copy, segment_graph(split, s), s, plan.tensors, flat_count_of(plan.inputs));
}

}  // namespace

std::vector<std::string> torchscript_split_point_candidates(const std::string& path) {
  torch::jit::Module module = load_module(path, read_file_bytes(path));
  auto forward = module.find_method("forward");
  if (!forward) throw TorchScriptModelError(fmt::format("TorchScript model '{}': the module has no forward method", path));
  return called_submodules(*forward->graph());
}

ModelSpec load_torchscript_model(const std::string& path, const TorchScriptSplitOptions& options) {
  auto bytes = std::make_shared<const std::string>(read_file_bytes(path));
  torch::jit::Module module = load_module(path, *bytes);
  module.train(options.training);
  const ForwardSplit split = split_forward(module, options.split_points, path);

  const std::size_t argument_count = split.graph->inputs().size() - 1;
  if (options.example_inputs.size() != argument_count)
    throw TorchScriptModelError(fmt::format("TorchScript model '{}': forward takes {} tensors but {} example inputs were given",
                                            path, argument_count, options.example_inputs.size()));
  for (std::size_t i = 0; i < options.example_inputs.size(); ++i)
    if (!options.example_inputs[i].defined())
      throw TorchScriptModelError(fmt::format("TorchScript model '{}': example input {} is an undefined tensor", path, i));

  ModelSpec spec;
  spec.config.name = "torchscript";
  spec.config.layers = static_cast<int>(split.segments.size());
  spec.config.micro_batch_size =
      options.example_inputs.empty() || options.example_inputs[0].dim() == 0 ? 1 : static_cast<int>(options.example_inputs[0].size(0));

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
      throw TorchScriptModelError(fmt::format("TorchScript model '{}': segment {} fails on the example inputs: {}", path, s,
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
