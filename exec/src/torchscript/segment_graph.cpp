// A segment of forward as a graph of its own (segment_graph.hpp).
#include "torchscript/segment_graph.hpp"

#include <fmt/format.h>

#include <functional>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace pipescope::exec::torchscript {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// A value of `type` rebuilt from the flat Tensors that carried it across a boundary.
Value* repack(Graph& g, const c10::TypePtr& type, const std::function<Value*()>& next_tensor) {
  if (auto tuple = type->cast<c10::TupleType>()) {
    std::vector<Value*> elements;
    for (const auto& element : tuple->elements()) elements.push_back(repack(g, element, next_tensor));
    return g.insertNode(g.createTuple(elements, tuple->name() ? tuple : nullptr))->output();
  }
  return next_tensor();
}

// The Tensors of `v`, tuples unpacked, in order.
void flatten(Graph& g, Value* v, std::vector<Value*>& out) {
  if (!v->type()->cast<c10::TupleType>()) {
    out.push_back(v);
    return;
  }
  Node* unpack = g.insertNode(g.createTupleUnpack(v));
  for (Value* element : unpack->outputs()) flatten(g, element, out);
}

}  // namespace

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
      throw std::logic_error(
          fmt::format("segment {} uses {} that it neither computes nor receives", s, value_label(v)));
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

}  // namespace pipescope::exec::torchscript
