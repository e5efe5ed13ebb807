// The "expert_compute" object of a profile (ExpertComputeProfile in profile.hpp): read, written,
// and turned into the expert calls and gradient reduction of the expert-parallel size
// simulated. Only profile.cpp calls these.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "pipescope/sim/costs.hpp"
#include "pipescope/sim/profile.hpp"

namespace pipescope::sim::detail {

// Throws UsageError naming `where` and the field for a value of another shape.
ExpertComputeProfile parse_expert_compute(const nlohmann::json& object, const std::string& where);
nlohmann::json expert_compute_json(const ExpertComputeProfile& expert_compute);

// Adds to each MoE stage's passes the calls its experts make at `expert_parallel` ranks (0: the
// measured E), and to its gradient reduction the experts' gradients where D / E > 1 replicas
// hold the same experts (less what the measured run reduced of them).
void add_expert_compute_costs(const Profile& profile, int expert_parallel, CostModel& costs);

// The seconds one MoE layer's expert calls take in a forward and in a backward at E.
struct ExpertLayerTimes {
  double forward_s = 0;
  double backward_s = 0;
};
ExpertLayerTimes expert_layer_times(const ExpertComputeProfile& expert_compute, int expert_parallel);

}  // namespace pipescope::sim::detail
