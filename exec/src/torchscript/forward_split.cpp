// Splitting a TorchScript module's forward graph into pipeline segments (forward_split.hpp).
//
// forward's graph is walked at its top level, without inlining, so calls of submodules stay
// visible as prim::CallMethod on prim::GetAttr chains rooted at self. A top-level node belongs to
// the segment whose split point was last passed. Reads of self's attributes (submodules,
// weights) and constants are repeated in every segment that needs them rather than crossing a
// boundary; any other value computed in one segment and used in a later one crosses every
// boundary in between, flattened to Tensors.
#include "torchscript/forward_split.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>

#include "pipescope/exec/torchscript_model.hpp"

namespace pipescope::exec::torchscript {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// "rows" for the SSA value "rows.1" that the script variable `rows` became; "%4" when unnamed.
std::string source_name(const Value* v) { return v->hasDebugName() ? v->debugNameBase() : "%" + v->debugName(); }

std::string join_path(const std::string& parent, const std::string& name) {
  return parent.empty() ? name : parent + "." + name;
}

bool path_is_under(const std::string& path, const std::string& root) {
  return path == root ||
         (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '.');
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
      if (a.value.isTensor() && a.value.toTensor().defined() &&
          !parameters.count(a.value.toTensor().unsafeGetTensorImpl()))
        out.push_back({join_path(path, a.name), a.value.toTensor(), false});
  }
  return out;
}

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

// Every use of self's attributes by something other than a further attribute read.
struct AttributeUse {
  std::string path;
  Node* user;
  std::size_t top_position;
};

// split_forward's steps, in the order they run: each refuses what it finds first, so a model
// with several problems is told about the same one every time.
class ForwardSplitter {
 public:
  ForwardSplitter(const torch::jit::Module& module, const std::vector<std::string>& split_points,
                  const std::string& path)
      : module_(module), split_points_(split_points), where_(fmt::format("TorchScript model '{}'", path)) {}

  ForwardSplit run() {
    auto forward = module_.find_method("forward");
    if (!forward) throw TorchScriptModelError(fmt::format("{}: the module has no forward method", where_));
    split_.graph = forward->graph();
    graph_ = split_.graph.get();
    top_ = graph_->block();
    path_of_ = attribute_paths(*graph_);
    calls_hint_ = fmt::format("forward calls: {}", join_names(called_submodules(*graph_)));
    check_signature();
    order_top_level_nodes();
    collect_attribute_uses();
    find_split_point_starts();
    check_weights_follow_split_points();
    assign_nodes_and_calls();
    assign_tensors();
    assign_boundaries(crossing_values());
    return std::move(split_);
  }

 private:
  // forward takes Tensors and returns a Tensor or a tuple of them: what a pipeline feeds and sends.
  void check_signature() const {
    for (std::size_t i = 1; i < graph_->inputs().size(); ++i) {
      const Value* arg = graph_->inputs()[i];
      if (arg->type()->kind() != c10::TypeKind::TensorType)
        throw TorchScriptModelError(
            fmt::format("{}: forward's argument '{}' has type {}: a pipeline feeds forward Tensors only", where_,
                        source_name(arg), arg->type()->annotation_str()));
    }
    if (graph_->outputs().size() != 1 || !flat_tensor_count(graph_->outputs()[0]->type()))
      throw TorchScriptModelError(
          fmt::format("{}: forward returns {}: the model's result must be a Tensor or a tuple of Tensors", where_,
                      graph_->outputs()[0]->type()->annotation_str()));
  }

  // Top-level positions (the graph's return comes after every node), and the nodes every
  // segment repeats.
  void order_top_level_nodes() {
    for (Node* n : graph_->nodes()) {
      position_[n] = top_nodes_.size();
      top_nodes_.push_back(n);
    }
    position_[graph_->return_node()] = top_nodes_.size();
    for (Node* n : top_nodes_) {
      const bool reads_self = n->kind() == c10::prim::GetAttr && path_of_.count(n->input(0));
      if (n->kind() == c10::prim::Constant || reads_self) split_.replicated.insert(n);
    }
  }

  void collect_attribute_uses() {
    for_each_node(top_, [this](Node* n) {
      if (n->kind() == c10::prim::SetAttr && path_of_.count(n->input(0)))
        throw TorchScriptModelError(
            fmt::format("{}: forward assigns self.{}: module state written by forward cannot be split", where_,
                        join_path(path_of_.at(n->input(0)), n->s(c10::attr::name))));
      if (n->kind() == c10::prim::GetAttr) return;
      for (const Value* in : n->inputs()) {
        auto p = path_of_.find(in);
        if (p != path_of_.end()) uses_.push_back({p->second, n, position_.at(top_level_ancestor(n, top_))});
      }
    });
  }

  // Split points: where forward first calls each of them, at its top level.
  void find_split_point_starts() {
    for (std::size_t k = 0; k < split_points_.size(); ++k) {
      const std::string& point = split_points_[k];
      auto target = point.empty() ? std::nullopt : resolve_path(module_, point);
      if (!target || !target->isModule())
        throw TorchScriptModelError(
            fmt::format("{}: split point '{}' names no submodule of the model ({})", where_, point, calls_hint_));
      auto first_call = std::find_if(uses_.begin(), uses_.end(), [&](const AttributeUse& u) {
        if (u.user->kind() != c10::prim::CallMethod) return false;
        auto callee = path_of_.find(u.user->input(0));
        return callee != path_of_.end() && callee->second == point;
      });
      if (first_call == uses_.end())
        throw TorchScriptModelError(fmt::format(
            "{}: split point '{}' is not called by forward itself (a submodule called only from inside another "
            "submodule, such as an nn.Sequential's child, cannot start a stage; {})",
            where_, point, calls_hint_));
      if (first_call->user->owningBlock() != top_)
        throw TorchScriptModelError(fmt::format(
            "{}: split point '{}' is first called inside a {} of forward: control flow cannot span a split point",
            where_, point, top_level_ancestor(first_call->user, top_)->kind().toQualString()));
      const std::size_t start = first_call->top_position;
      if (k > 0 && start <= starts_.back())
        throw TorchScriptModelError(fmt::format(
            "{}: split point '{}' is called {} split point '{}': give split points in the order forward calls them",
            where_, point, start == starts_.back() ? "at the same place as" : "before", split_points_[k - 1]));
      starts_.push_back(start);
    }
  }

  // A split point's weights must not be reached before the split point.
  void check_weights_follow_split_points() const {
    for (std::size_t k = 0; k < split_points_.size(); ++k)
      for (const auto& use : uses_)
        if (path_is_under(use.path, split_points_[k]) && use.top_position < starts_[k])
          throw TorchScriptModelError(fmt::format(
              "{}: '{}' is used by {} before its split point '{}' (forward reaches it before it first calls it)",
              where_, use.path, use.user->kind().toQualString(), split_points_[k]));
  }

  void assign_nodes_and_calls() {
    split_.segments.resize(segment_count());
    for (Node* n : top_nodes_)
      if (!split_.replicated.count(n)) split_.segments[segment_at(position_.at(n))].nodes.push_back(n);
    for (const auto& use : uses_) {
      auto& called = split_.segments[segment_at(use.top_position)].called;
      if (use.user->kind() == c10::prim::CallMethod && use.user->owningBlock() == top_ && !use.path.empty() &&
          std::find(called.begin(), called.end(), use.path) == called.end())
        called.push_back(use.path);
    }
  }

  // Weights belong to the one segment that reads them; buffers are copied to every reader.
  void assign_tensors() {
    struct Owner {
      std::size_t segment;
      std::string via;
    };
    std::unordered_map<const c10::TensorImpl*, Owner> parameter_owner;
    std::vector<std::unordered_set<const c10::TensorImpl*>> seen(segment_count());
    for (const auto& use : uses_) {
      const std::size_t s = segment_at(use.top_position);
      for (auto& owned : tensors_under(module_, use.path)) {
        const c10::TensorImpl* impl = owned.tensor.unsafeGetTensorImpl();
        if (owned.is_parameter) {
          auto [it, inserted] = parameter_owner.emplace(impl, Owner{s, use.path});
          if (!inserted && it->second.segment != s)
            throw TorchScriptModelError(fmt::format(
                "{}: parameter '{}' is used by {} through '{}' and by {} through '{}': weights belong to one stage "
                "only (a submodule with weights called on both sides of a split point, or weights tied across one)",
                where_, owned.name, segment_name(it->second.segment), it->second.via.empty() ? "self" : it->second.via,
                segment_name(s), use.path.empty() ? "self" : use.path));
        }
        if (seen[s].insert(impl).second) split_.segments[s].tensors.push_back(std::move(owned));
      }
    }
  }

  // (0, argument) or (1 + position, output): the order values are defined in, arguments first.
  using DefinitionKey = std::pair<std::size_t, std::size_t>;
  using Crossing = std::vector<std::map<DefinitionKey, Value*>>;

  // Values that cross boundaries: crossing[b] holds those that cross into segment b.
  Crossing crossing_values() const {
    Crossing crossing(segment_count());
    for_each_node(top_, [&](Node* user) {
      const std::size_t user_segment = segment_at(position_.at(top_level_ancestor(user, top_)));
      for (Value* v : user->inputs()) {
        Node* definer = v->node();
        DefinitionKey key;
        std::size_t defined_in = 0;
        if (definer == graph_->param_node()) {
          if (v->offset() == 0) continue;  // self is every segment's first input
          key = {0, v->offset()};
        } else if (definer->owningBlock() == top_ && !split_.replicated.count(definer)) {
          key = {1 + position_.at(definer), v->offset()};
          defined_in = segment_at(position_.at(definer));
        } else {
          continue;  // defined inside the same top-level node, or replicated
        }
        for (std::size_t b = defined_in + 1; b <= user_segment; ++b) {
          if (!flat_tensor_count(v->type()))
            throw TorchScriptModelError(fmt::format(
                "{}: value {} is computed before split point '{}' and used after it: only Tensors and tuples of "
                "Tensors can cross a split point",
                where_, value_label(v), split_points_[b - 1]));
          crossing[b].emplace(key, v);
        }
      }
    });
    return crossing;
  }

  void assign_boundaries(const Crossing& crossing) {
    for (std::size_t s = 0; s < segment_count(); ++s) {
      auto& plan = split_.segments[s];
      if (s == 0)
        plan.inputs.assign(graph_->inputs().begin() + 1, graph_->inputs().end());
      else
        for (const auto& [key, v] : crossing[s]) plan.inputs.push_back(v);
      if (s + 1 < segment_count())
        for (const auto& [key, v] : crossing[s + 1]) plan.outputs.push_back(v);
      else
        plan.outputs.push_back(graph_->outputs()[0]);
    }
  }

  std::size_t segment_count() const { return split_points_.size() + 1; }

  std::size_t segment_at(std::size_t top_position) const {
    return static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), top_position) - starts_.begin());
  }

  std::string segment_name(std::size_t s) const {
    return s == 0 ? std::string("segment 0 (before the first split point)")
                  : fmt::format("segment {} (from split point '{}')", s, split_points_[s - 1]);
  }

  const torch::jit::Module& module_;
  const std::vector<std::string>& split_points_;
  const std::string where_;
  ForwardSplit split_;
  Graph* graph_ = nullptr;
  Block* top_ = nullptr;
  std::unordered_map<const Value*, std::string> path_of_;
  std::string calls_hint_;
  std::unordered_map<const Node*, std::size_t> position_;
  std::vector<Node*> top_nodes_;
  std::vector<AttributeUse> uses_;
  std::vector<std::size_t> starts_;  // each split point's top-level position
};

}  // namespace

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

std::string value_label(const Value* v) {
  return fmt::format("'{}' ({}, from {})", source_name(v), v->type()->annotation_str(),
                     v->node()->kind().toQualString());
}

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
  return ForwardSplitter(module, split_points, path).run();
}

}  // namespace pipescope::exec::torchscript
