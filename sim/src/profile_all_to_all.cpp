// A MoE profile's all-to-all (profile_all_to_all.hpp): its JSON, and the costs it adds to the
// stages for the expert-parallel size simulated, in the form the simulator already runs for a
// model's expert layers (StageCost::all_to_all, expert_layer.hpp).
#include "profile_all_to_all.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/json_limits.hpp"

namespace pipescope::sim {
namespace detail {
namespace {

using nlohmann::json;

// Bytes and seconds of one all-to-all: beyond these a file is broken, not a measurement.
constexpr double kMaxAllToAllBytes = 0x1p60;
constexpr double kMaxAllToAllSeconds = 1e6;

double number_in(const json& object, const char* field, const std::string& where, double low, double high) {
  if (!object.contains(field)) throw UsageError(where + "." + field + ": missing");
  const json& v = object[field];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < low || v.get<double>() > high)
    throw UsageError(fmt::format("{}.{}: must be a number from {:g} to {:g}", where, field, low, high));
  return v.get<double>();
}

int count_in(const json& object, const char* field, const std::string& where, int low) {
  if (!object.contains(field)) throw UsageError(where + "." + field + ": missing");
  const auto value = json_integer_in(object[field], low, INT_MAX);
  if (!value) throw UsageError(fmt::format("{}.{}: must be an integer from {} to {}", where, field, low, INT_MAX));
  return static_cast<int>(*value);
}

AllToAllCost parse_cost(const json& c, const std::string& where) {
  if (!c.is_object()) throw UsageError(where + ": must be an object");
  AllToAllCost cost;
  cost.group_size = count_in(c, "group_size", where, 2);
  cost.latency_s = number_in(c, "latency_s", where, 0, kMaxAllToAllSeconds);
  cost.bandwidth_bytes_per_s = number_in(c, "bandwidth_bytes_per_s", where, 0, kMaxAllToAllBytes);
  cost.samples = c.contains("samples") ? count_in(c, "samples", where, 0) : 0;
  return cost;
}

// The all-to-all of one pass of a stage of `moe_layers` MoE layers, at `cost`: each exchange's
// own time and the wait for the group's last member.
ExpertAllToAll stage_all_to_all(const AllToAllProfile& a, const AllToAllCost& cost, int moe_layers) {
  ExpertAllToAll out;
  const double layers = moe_layers;
  const auto exchange_s = [&](double bytes) { return cost.time_s(bytes) + a.member_wait_s; };
  out.dispatch_f_s = layers * exchange_s(a.dispatch_f_bytes);
  out.combine_f_s = layers * exchange_s(a.combine_f_bytes);
  out.dispatch_b_s = layers * exchange_s(a.dispatch_b_bytes);
  out.combine_b_s = layers * exchange_s(a.combine_b_bytes);
  out.dispatch_bytes = std::llround(a.dispatch_f_bytes);
  out.combine_bytes = std::llround(a.combine_f_bytes);
  out.group_size = cost.group_size;
  out.moe_layers = moe_layers;
  // The transport's CPU on the rank's own core: while an exchange is on the wire, the compute
  // beside it gets the rest of the core.
  const double exchange_mean_s = (out.forward_s() + out.backward_s()) / (4 * layers);
  if (a.transport_cpu_per_exchange_s > 0 && exchange_mean_s > 0)
    out.compute_slowdown = 1 / (1 - std::min(0.9, a.transport_cpu_per_exchange_s / exchange_mean_s));
  return out;
}

}  // namespace

AllToAllProfile parse_all_to_all(const json& object, const std::string& where) {
  if (!object.is_object()) throw UsageError(where + ": must be an object");
  AllToAllProfile a;
  a.expert_parallel = count_in(object, "expert_parallel", where, 1);
  a.experts = count_in(object, "experts", where, 1);
  if (!object.contains("layers") || !object["layers"].is_array())
    throw UsageError(where + ".layers: must be an array of layer names");
  for (const json& name : object["layers"]) {
    if (!name.is_string()) throw UsageError(where + ".layers: must be an array of layer names");
    a.layers.push_back(name.get<std::string>());
  }
  a.dispatch_f_bytes = number_in(object, "dispatch_f_bytes", where, 0, kMaxAllToAllBytes);
  a.combine_f_bytes = number_in(object, "combine_f_bytes", where, 0, kMaxAllToAllBytes);
  a.dispatch_b_bytes = number_in(object, "dispatch_b_bytes", where, 0, kMaxAllToAllBytes);
  a.combine_b_bytes = number_in(object, "combine_b_bytes", where, 0, kMaxAllToAllBytes);
  a.imbalance = number_in(object, "imbalance", where, 1, INT_MAX);
  a.rank_load = number_in(object, "rank_load", where, 1, INT_MAX);
  if (!object.contains("costs") || !object["costs"].is_array())
    throw UsageError(where + ".costs: must be an array of {group_size, latency_s, bandwidth_bytes_per_s}");
  const json& costs = object["costs"];
  for (std::size_t i = 0; i < costs.size(); ++i) {
    AllToAllCost cost = parse_cost(costs[i], fmt::format("{}.costs[{}]", where, i));
    if (a.cost_of(cost.group_size))
      throw UsageError(fmt::format("{}.costs[{}].group_size: {} is given twice", where, i, cost.group_size));
    a.costs.push_back(cost);
  }
  if (object.contains("member_wait_s"))
    a.member_wait_s = number_in(object, "member_wait_s", where, 0, kMaxAllToAllSeconds);
  if (object.contains("transport_cpu_per_exchange_s"))
    a.transport_cpu_per_exchange_s = number_in(object, "transport_cpu_per_exchange_s", where, 0, kMaxAllToAllSeconds);
  if (object.contains("overlapped_steps")) {
    if (!object["overlapped_steps"].is_boolean()) throw UsageError(where + ".overlapped_steps: must be true or false");
    a.overlapped_steps = object["overlapped_steps"].get<bool>();
  }
  return a;
}

json all_to_all_json(const AllToAllProfile& a) {
  json costs = json::array();
  for (const AllToAllCost& c : a.costs)
    costs.push_back({{"group_size", c.group_size},
                     {"latency_s", c.latency_s},
                     {"bandwidth_bytes_per_s", c.bandwidth_bytes_per_s},
                     {"samples", c.samples}});
  json out = {{"expert_parallel", a.expert_parallel},
              {"experts", a.experts},
              {"layers", a.layers},
              {"dispatch_f_bytes", a.dispatch_f_bytes},
              {"combine_f_bytes", a.combine_f_bytes},
              {"dispatch_b_bytes", a.dispatch_b_bytes},
              {"combine_b_bytes", a.combine_b_bytes},
              {"imbalance", a.imbalance},
              {"rank_load", a.rank_load},
              {"costs", std::move(costs)},
              {"overlapped_steps", a.overlapped_steps}};
  if (a.member_wait_s > 0) out["member_wait_s"] = a.member_wait_s;
  if (a.transport_cpu_per_exchange_s > 0) out["transport_cpu_per_exchange_s"] = a.transport_cpu_per_exchange_s;
  return out;
}

void add_all_to_all_costs(const Profile& profile, int expert_parallel, CostModel& costs) {
  if (!profile.all_to_all) return;
  const AllToAllProfile& a = *profile.all_to_all;
  costs.runtime.overlapped_steps = a.overlapped_steps;
  const int ep = expert_parallel > 0 ? expert_parallel : a.expert_parallel;
  if (ep <= 1) return;  // every expert on the rank: no all-to-all
  const AllToAllCost* cost = a.cost_of(ep);
  if (!cost)
    throw UsageError(fmt::format("--expert-parallel {}: the profile measured no all-to-all of {} ranks", ep, ep));
  for (std::size_t s = 0; s < profile.stages.size() && s < costs.stages.size(); ++s) {
    const int moe_layers = profile.stages[s].moe_layers;
    if (moe_layers <= 0) continue;
    StageCost& c = costs.stages[s];
    c.all_to_all = stage_all_to_all(a, *cost, moe_layers);
    c.f_s += c.all_to_all.forward_s();
    // The backward's all-to-all carries the input gradient: it is part of B (BackwardInput) and
    // of a full backward.
    c.b_s += c.all_to_all.backward_s();
    if (c.full_backward_s > 0) c.full_backward_s += c.all_to_all.backward_s();
  }
}

}  // namespace detail

void check_expert_parallel(const Profile& profile, int expert_parallel, const std::string& source) {
  const std::string option = fmt::format("--expert-parallel {}", expert_parallel);
  if (expert_parallel < 1) throw UsageError(option + ": must be at least 1");
  if (!profile.all_to_all) {
    if (expert_parallel != 1)
      throw UsageError(fmt::format("{}: the profile {} is of a dense model (no all-to-all measured)", option, source));
    return;
  }
  const AllToAllProfile& a = *profile.all_to_all;
  const std::string model = profile.model.value_or("the model");
  if (a.experts % expert_parallel != 0)
    throw UsageError(
        fmt::format("{}: does not divide the {} experts of {} (profile {})", option, a.experts, model, source));
  if (profile.data_parallel % expert_parallel != 0)
    throw UsageError(
        fmt::format("{}: does not divide the {} data-parallel replicas of the profile {} (experts are "
                    "placed inside the data-parallel group)",
                    option, profile.data_parallel, source));
  if (expert_parallel > 1 && !a.cost_of(expert_parallel))
    throw UsageError(
        fmt::format("{}: the profile {} measured the all-to-all of {} ranks only", option, source, a.expert_parallel));
}

}  // namespace pipescope::sim
