// Routing skip tensors between stages and adding their direct transfers to a schedule.
#include "pipescope/exec/pipeline_module.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <utility>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/validator.hpp"

namespace pipescope::exec {
namespace {

int stage_of_layer(const Partition& partition, int layer) {
  for (int s = 0; s < partition.num_stages(); ++s)
    if (layer >= partition.bounds[s] && layer < partition.bounds[s + 1]) return s;
  return -1;
}

}  // namespace

std::vector<SkipRoute> skip_routes(const ModelSpec& model, const Partition& partition,
                                   const std::vector<int>& stage_to_rank) {
  std::vector<SkipRoute> routes;
  for (const SkipEdge& edge : model.skip_edges()) {
    SkipRoute route;
    route.name = edge.name;
    route.from_layer = edge.from_layer;
    route.to_layer = edge.to_layer;
    route.from_stage = stage_of_layer(partition, edge.from_layer);
    route.to_stage = stage_of_layer(partition, edge.to_layer);
    if (route.from_stage < 0 || route.to_stage < 0 || route.from_stage >= static_cast<int>(stage_to_rank.size()) ||
        route.to_stage >= static_cast<int>(stage_to_rank.size()))
      throw UsageError(fmt::format("skip tensor '{}' (layer {} to layer {}) lies outside the {} stages", edge.name,
                                   edge.from_layer, edge.to_layer, stage_to_rank.size()));
    if (route.from_stage == route.to_stage)
      route.carrier = SkipCarrier::SameStage;
    else if (stage_to_rank[static_cast<std::size_t>(route.from_stage)] ==
             stage_to_rank[static_cast<std::size_t>(route.to_stage)])
      route.carrier = SkipCarrier::Memory;
    else if (route.to_stage == route.from_stage + 1)
      route.carrier = SkipCarrier::WithActivation;
    else
      route.carrier = SkipCarrier::Direct;
    routes.push_back(std::move(route));
  }
  std::sort(routes.begin(), routes.end(), [](const SkipRoute& a, const SkipRoute& b) { return a.name < b.name; });
  return routes;
}

Schedule with_skip_transfers(const Schedule& schedule, const std::vector<SkipRoute>& routes) {
  std::set<std::pair<int, int>> direct;  // (producer stage, consumer stage)
  for (const auto& r : routes)
    if (r.carrier == SkipCarrier::Direct) direct.insert({r.from_stage, r.to_stage});
  if (direct.empty()) return schedule;
  const bool training = schedule.is_training();
  Schedule out = schedule;
  for (auto& program : out.programs)
    for (auto& step : program) {
      Step rewritten;
      for (const Instruction& in : step) {
        auto transfer = [&](Op op, int peer) {
          Instruction t;
          t.op = op;
          t.stage = in.stage;
          t.micro_batch = in.micro_batch;
          t.peer_stage = peer;
          rewritten.push_back(t);
        };
        const bool backward = training && (in.op == Op::BackwardPass || in.op == Op::BackwardInput);
        if (in.op == Op::ForwardPass)
          for (const auto& [from, to] : direct)
            if (to == in.stage) transfer(Op::RecvActivation, from);
        if (backward)
          for (const auto& [from, to] : direct)
            if (from == in.stage) transfer(Op::RecvGrad, to);
        rewritten.push_back(in);
        if (in.op == Op::ForwardPass)
          for (const auto& [from, to] : direct)
            if (from == in.stage) transfer(Op::SendActivation, to);
        if (backward)
          for (const auto& [from, to] : direct)
            if (to == in.stage) transfer(Op::SendGrad, from);
      }
      step = std::move(rewritten);
    }
  validate(out);
  return out;
}

}  // namespace pipescope::exec
