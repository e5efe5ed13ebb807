// The "all_to_all" object of a profile (AllToAllProfile in profile.hpp): read, written, and
// turned into the costs of the expert-parallel size simulated. Only profile.cpp calls these.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "pipescope/sim/costs.hpp"
#include "pipescope/sim/profile.hpp"

namespace pipescope::sim::detail {

// Throws UsageError naming `where` and the field for a value of another shape.
AllToAllProfile parse_all_to_all(const nlohmann::json& object, const std::string& where);
nlohmann::json all_to_all_json(const AllToAllProfile& all_to_all);

// Adds each MoE stage's dispatch and combine at `expert_parallel` ranks (0: the measured E) to
// its passes and to StageCost::all_to_all, and the runtime's way with overlapped steps.
void add_all_to_all_costs(const Profile& profile, int expert_parallel, CostModel& costs);

}  // namespace pipescope::sim::detail
