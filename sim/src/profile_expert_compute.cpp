// A MoE profile's expert compute (profile_expert_compute.hpp): its JSON, and what it adds to the
// stages for the expert-parallel size simulated.
#include "profile_expert_compute.hpp"

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

// Beyond these a file is broken, not a measurement.
constexpr double kMaxExpertSeconds = 1e6;
constexpr double kMaxExpertRows = 0x1p53;

double expert_number(const json& object, const char* field, const std::string& where, double high) {
  if (!object.contains(field)) throw UsageError(where + "." + field + ": missing");
  const json& v = object[field];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 || v.get<double>() > high)
    throw UsageError(fmt::format("{}.{}: must be a number from 0 to {:g}", where, field, high));
  return v.get<double>();
}

std::int64_t expert_count(const json& object, const char* field, const std::string& where, std::int64_t low) {
  if (!object.contains(field)) throw UsageError(where + "." + field + ": missing");
  const auto value = json_integer_in(object[field], low, INT64_MAX);
  if (!value) throw UsageError(fmt::format("{}.{}: must be an integer >= {}", where, field, low));
  return *value;
}

ExpertCallCost parse_call_cost(const json& object, const char* field, const std::string& where) {
  if (!object.contains(field) || !object[field].is_object())
    throw UsageError(fmt::format("{}.{}: must be an object {{call_s, row_s}}", where, field));
  const json& c = object[field];
  const std::string at = fmt::format("{}.{}", where, field);
  ExpertCallCost cost;
  cost.call_s = expert_number(c, "call_s", at, kMaxExpertSeconds);
  cost.row_s = expert_number(c, "row_s", at, kMaxExpertSeconds);
  cost.samples = c.contains("samples") ? expert_count(c, "samples", at, 0) : 0;
  if (c.contains("per_row_only")) {
    if (!c["per_row_only"].is_boolean()) throw UsageError(at + ".per_row_only: must be true or false");
    cost.per_row_only = c["per_row_only"].get<bool>();
  }
  cost.probe_samples = c.contains("probe_samples") ? expert_count(c, "probe_samples", at, 0) : 0;
  return cost;
}

json call_cost_json(const ExpertCallCost& c) {
  json j = {{"call_s", c.call_s}, {"row_s", c.row_s}, {"samples", c.samples}, {"per_row_only", c.per_row_only}};
  if (c.probe_samples > 0) j["probe_samples"] = c.probe_samples;
  return j;
}

// The share of a full data-parallel all-reduce (a ring over `replicas`) that one over `group`
// replicas costs: 2 (g - 1) / g of the bytes cross each link; none for a group of one.
double reduction_share(double group, double replicas) {
  if (group <= 1 || replicas <= 1) return 0;
  return ((group - 1) / group) / ((replicas - 1) / replicas);
}

}  // namespace

ExpertComputeProfile parse_expert_compute(const json& object, const std::string& where) {
  if (!object.is_object()) throw UsageError(where + ": must be an object");
  ExpertComputeProfile x;
  x.expert_parallel =
      static_cast<int>(std::min<std::int64_t>(expert_count(object, "expert_parallel", where, 1), INT_MAX));
  x.experts = static_cast<int>(std::min<std::int64_t>(expert_count(object, "experts", where, 1), INT_MAX));
  if (x.experts % x.expert_parallel != 0)
    throw UsageError(
        fmt::format("{}.expert_parallel: {} does not divide the {} experts", where, x.expert_parallel, x.experts));
  x.rows_per_layer = expert_number(object, "rows_per_layer", where, kMaxExpertRows);
  x.forward = parse_call_cost(object, "forward", where);
  x.backward = parse_call_cost(object, "backward", where);
  x.expert_parameters_per_layer = object.contains("expert_parameters_per_layer")
                                      ? expert_count(object, "expert_parameters_per_layer", where, 0)
                                      : 0;
  x.reduce_s_per_parameter = object.contains("reduce_s_per_parameter")
                                 ? expert_number(object, "reduce_s_per_parameter", where, kMaxExpertSeconds)
                                 : 0.0;
  return x;
}

json expert_compute_json(const ExpertComputeProfile& x) {
  return {{"expert_parallel", x.expert_parallel},
          {"experts", x.experts},
          {"rows_per_layer", x.rows_per_layer},
          {"forward", call_cost_json(x.forward)},
          {"backward", call_cost_json(x.backward)},
          {"expert_parameters_per_layer", x.expert_parameters_per_layer},
          {"reduce_s_per_parameter", x.reduce_s_per_parameter}};
}

ExpertLayerTimes expert_layer_times(const ExpertComputeProfile& x, int expert_parallel) {
  // At E the X / E local experts get the rows of E replicas' micro-batches for X / E of the X
  // experts: rows_per_layer in all, whatever E, in X / E calls.
  const double calls = static_cast<double>(x.experts) / std::max(expert_parallel, 1);
  const double rows_each = calls > 0 ? x.rows_per_layer / calls : 0.0;
  return {calls * x.forward.time_s(rows_each), calls * x.backward.time_s(rows_each)};
}

void add_expert_compute_costs(const Profile& profile, int expert_parallel, CostModel& costs) {
  if (!profile.expert_compute) return;
  const ExpertComputeProfile& x = *profile.expert_compute;
  const int ep = expert_parallel > 0 ? expert_parallel : x.expert_parallel;
  const ExpertLayerTimes per_layer = expert_layer_times(x, ep);
  // The experts' gradients are all-reduced over the D / E replicas that hold the same experts:
  // all D of them at E = 1, none at E = D. The measured reduction holds the measured E's share.
  const double replicas = profile.data_parallel;
  const double reduce_per_layer_s =
      x.reduce_s_per_parameter * static_cast<double>(x.expert_parameters_per_layer) *
      (reduction_share(replicas / ep, replicas) - reduction_share(replicas / x.expert_parallel, replicas));
  for (std::size_t s = 0; s < profile.stages.size() && s < costs.stages.size(); ++s) {
    const int moe_layers = profile.stages[s].moe_layers;
    if (moe_layers <= 0) continue;
    StageCost& c = costs.stages[s];
    const double layers = moe_layers;
    c.f_s += layers * per_layer.forward_s;
    // A split backward takes the experts' backward in the stage's own proportion of B to W.
    const double backward_s = layers * per_layer.backward_s;
    const double input_share = c.w_s > 0 && c.b_s + c.w_s > 0 ? c.b_s / (c.b_s + c.w_s) : 1.0;
    c.b_s += backward_s * input_share;
    c.w_s += backward_s * (1 - input_share);
    if (c.full_backward_s > 0) c.full_backward_s += backward_s;
    c.reduce_grads_s = std::max(0.0, c.reduce_grads_s + layers * reduce_per_layer_s);
  }
}

}  // namespace detail
}  // namespace pipescope::sim
