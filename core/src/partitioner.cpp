// Layer partitioning (DeepSpeed PipelineModule's partition methods, plus cost balancing).
// Every balanced method solves the same problem: split a sequence of non-negative weights into
// k contiguous, non-empty stages so that the heaviest stage is as light as possible. The
// optimum bottleneck is found by binary search over a greedy feasibility test (exact for
// integer weights, to the last bits for costs), and the split returned is the one that fills
// stages from the front up to that bottleneck, as DeepSpeed's `_lprobe` does.
#include "pipescope/core/partitioner.hpp"

#include <algorithm>
#include <cmath>
#include <regex>
#include <cstdint>
#include <string>
#include <vector>

#include "pipescope/core/errors.hpp"

namespace pipescope {
namespace {

[[noreturn]] void refuse(const std::string& method, const std::string& why) {
  throw ScheduleError("partition '" + method + "': " + why);
}

void check_counts(std::size_t num_layers, int num_stages, const std::string& method) {
  if (num_stages < 1) refuse(method, "needs at least one stage, got " + std::to_string(num_stages));
  if (num_layers < static_cast<std::size_t>(num_stages))
    refuse(method, std::to_string(num_layers) + " layers cannot fill " + std::to_string(num_stages) +
                       " non-empty stages");
}

// DeepSpeed's partition_uniform: equal chunks, the first (layers % stages) stages one larger.
std::vector<int> uniform_bounds(int num_layers, int num_stages) {
  std::vector<int> bounds(static_cast<std::size_t>(num_stages) + 1, 0);
  const int chunk = num_layers / num_stages;
  const int residual = num_layers % num_stages;
  for (int s = 0; s < num_stages; ++s) bounds[s + 1] = bounds[s] + chunk + (s < residual ? 1 : 0);
  return bounds;
}

// The fewest stages whose weights each stay within `bottleneck`, filling from the front.
// Returns a value above num_stages when some single layer is heavier than the bottleneck.
template <typename Weight>
std::size_t stages_needed(const std::vector<Weight>& weights, Weight bottleneck) {
  std::size_t stages = 1;
  Weight sum = 0;
  for (Weight w : weights) {
    if (w > bottleneck) return weights.size() + 1;
    if (sum + w > bottleneck) {
      ++stages;
      sum = 0;
    }
    sum += w;
  }
  return stages;
}

// Front-filling split within `bottleneck`, leaving at least one layer for each later stage.
template <typename Weight>
std::vector<int> split_within(const std::vector<Weight>& weights, int num_stages, Weight bottleneck) {
  const int n = static_cast<int>(weights.size());
  std::vector<int> bounds(static_cast<std::size_t>(num_stages) + 1, 0);
  int next = 0;
  for (int s = 0; s + 1 < num_stages; ++s) {
    const int last_allowed = n - (num_stages - 1 - s);  // exclusive end that keeps later stages non-empty
    Weight sum = weights[next];
    int end = next + 1;
    while (end < last_allowed && sum + weights[end] <= bottleneck) sum += weights[end++];
    bounds[s + 1] = end;
    next = end;
  }
  bounds[num_stages] = n;
  return bounds;
}

std::vector<int> balanced_bounds(const std::vector<std::int64_t>& weights, int num_stages) {
  std::int64_t lo = *std::max_element(weights.begin(), weights.end());
  std::int64_t hi = 0;
  for (auto w : weights) hi += w;
  // Smallest bottleneck that fits in num_stages (feasible bottlenecks are upward closed).
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (stages_needed(weights, mid) <= static_cast<std::size_t>(num_stages)) hi = mid;
    else lo = mid + 1;
  }
  return split_within(weights, num_stages, lo);
}

std::vector<int> balanced_bounds(const std::vector<double>& weights, int num_stages) {
  double lo = *std::max_element(weights.begin(), weights.end());
  double hi = 0;
  for (double w : weights) hi += w;
  if (stages_needed(weights, lo) <= static_cast<std::size_t>(num_stages)) return split_within(weights, num_stages, lo);
  // Invariant: lo infeasible, hi feasible. The optimum is a sum of consecutive weights; after
  // enough halvings hi is that sum up to rounding.
  for (int iteration = 0; iteration < 200 && hi - lo > 1e-15 * hi; ++iteration) {
    const double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;
    if (stages_needed(weights, mid) <= static_cast<std::size_t>(num_stages)) hi = mid;
    else lo = mid;
  }
  return split_within(weights, num_stages, hi);
}

Partition describe(const std::vector<LayerInfo>& layers, std::vector<int> bounds) {
  Partition partition;
  partition.bounds = std::move(bounds);
  const int num_stages = partition.num_stages();
  partition.stage_cost.assign(static_cast<std::size_t>(num_stages), 0.0);
  partition.stage_parameters.assign(static_cast<std::size_t>(num_stages), 0);
  for (int s = 0; s < num_stages; ++s)
    for (int l = partition.bounds[s]; l < partition.bounds[s + 1]; ++l) {
      partition.stage_cost[s] += layers[l].cost;
      partition.stage_parameters[s] += layers[l].parameters;
    }
  return partition;
}

}  // namespace

Partition partition_layers(const std::vector<LayerInfo>& layers, int num_stages, const std::string& method) {
  const int num_layers = static_cast<int>(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].parameters < 0)
      refuse(method, "layer " + std::to_string(l) + " ('" + layers[l].name + "') has a negative parameter count");
    if (!std::isfinite(layers[l].cost) || layers[l].cost < 0)
      refuse(method, "layer " + std::to_string(l) + " ('" + layers[l].name + "') has cost " + std::to_string(layers[l].cost) +
                         "; costs must be finite and non-negative");
  }
  if (method == "uniform") {
    check_counts(layers.size(), num_stages, method);
    return describe(layers, uniform_bounds(num_layers, num_stages));
  }
  if (method == "parameters") {
    check_counts(layers.size(), num_stages, method);
    std::vector<std::int64_t> weights;
    for (const auto& layer : layers) weights.push_back(layer.parameters);
    if (*std::max_element(weights.begin(), weights.end()) == 0) refuse(method, "no layer has parameters to balance");
    return describe(layers, balanced_bounds(weights, num_stages));
  }
  if (method.rfind("type:", 0) == 0) {
    const std::string pattern = method.substr(5);
    if (pattern.empty()) refuse(method, "the type pattern is empty (use type:REGEX, e.g. type:TransformerBlock)");
    std::regex type_regex;
    try {
      // DeepSpeed searches the layer's type name, ignoring case.
      type_regex = std::regex(pattern, std::regex::ECMAScript | std::regex::icase);
    } catch (const std::regex_error& e) {
      refuse(method, std::string("bad regular expression: ") + e.what());
    }
    check_counts(layers.size(), num_stages, method);
    std::vector<std::int64_t> weights;
    for (const auto& layer : layers) weights.push_back(std::regex_search(layer.type, type_regex) ? 1 : 0);
    if (*std::max_element(weights.begin(), weights.end()) == 0) refuse(method, "no layer type matches '" + pattern + "'");
    return describe(layers, balanced_bounds(weights, num_stages));
  }
  if (method == "cost") {
    check_counts(layers.size(), num_stages, method);
    std::vector<double> weights;
    for (const auto& layer : layers) weights.push_back(layer.cost);
    if (*std::max_element(weights.begin(), weights.end()) == 0) refuse(method, "every layer has cost 0; nothing to balance");
    return describe(layers, balanced_bounds(weights, num_stages));
  }
  refuse(method, "unknown method (known: uniform, parameters, type:REGEX, cost)");
}

Partition partition_at(const std::vector<LayerInfo>& layers, const std::vector<std::string>& split_before) {
  const std::string method = "split points";
  if (layers.empty()) refuse(method, "there are no layers to split");
  std::vector<int> bounds{0};
  for (const std::string& name : split_before) {
    int found = -1;
    for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
      if (layers[l].name != name) continue;
      if (found != -1) refuse(method, "layer name '" + name + "' is ambiguous: layers " + std::to_string(found) + " and " + std::to_string(l));
      found = l;
    }
    if (found == -1) refuse(method, "no layer is named '" + name + "'");
    if (found == 0) refuse(method, "'" + name + "' is the first layer; splitting before it leaves stage 0 empty");
    if (found <= bounds.back())
      refuse(method, "'" + name + "' (layer " + std::to_string(found) + ") does not come after the previous split point (layer " +
                         std::to_string(bounds.back()) + "); split points go in model order, each once");
    bounds.push_back(found);
  }
  bounds.push_back(static_cast<int>(layers.size()));
  return describe(layers, std::move(bounds));
}

}  // namespace pipescope
