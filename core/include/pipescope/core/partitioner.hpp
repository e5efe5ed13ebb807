// Splits a model's layers into pipeline stages, with DeepSpeed's methods (uniform,
// parameters, type:REGEX) and a cost-balanced method that minimises the slowest stage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pipescope {

struct LayerInfo {
  std::string name;           // e.g. "blocks.3" or the layer's type name "TransformerBlock"
  std::string type;           // class/type name, matched by type:REGEX
  std::int64_t parameters = 0;
  double cost = 1.0;          // relative or measured time of the layer
};

struct Partition {
  // bounds[s] .. bounds[s+1]-1 are the layers of stage s; bounds.size() == num_stages + 1.
  std::vector<int> bounds;
  std::vector<double> stage_cost;
  std::vector<std::int64_t> stage_parameters;
  int num_stages() const { return static_cast<int>(bounds.size()) - 1; }
};

// method: "uniform", "parameters", "type:REGEX", "cost" (balanced by LayerInfo::cost).
// Throws ScheduleError naming the method when it is unknown or the layers cannot be split
// into that many non-empty stages.
Partition partition_layers(const std::vector<LayerInfo>& layers, int num_stages,
                           const std::string& method);

// Explicit split points: each name starts a new stage (torch SplitPoint.BEGINNING).
Partition partition_at(const std::vector<LayerInfo>& layers, const std::vector<std::string>& split_before);

}  // namespace pipescope
