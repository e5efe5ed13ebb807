// What the planner's files share about one candidate: its schedule's traits, its costs, its
// topology, its compiled schedule and the memory limit it must fit. Internal to pipescope::sim.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipescope/core/registry.hpp"
#include "pipescope/sim/planner.hpp"

namespace pipescope::sim::planning {

// The registry's traits of a schedule the request names (cmd_plan checked the names; a name
// the registry lost since is a usage error, not a crash).
const ScheduleTraits& traits_of(const std::string& schedule);

// Every link of a profile is the one link it measured; otherwise the request's topology laid
// out for the candidate's parallelism.
Topology candidate_topology(const PlanRequest& request, const PlanCandidate& c);

// The candidate's per-stage costs: derived from the model on the device, or the profile's
// measured stages re-split to the candidate's stage count. Throws UsageError when the profile
// cannot describe the candidate.
CostModel candidate_costs(const PlanRequest& request, const PlanCandidate& c);

// The largest static memory (weights, optimizer state) of one rank under `placement`.
std::int64_t largest_static_bytes(const CostModel& costs, const std::vector<int>& placement, int num_ranks);

// Bytes per GPU: --max-mem, else the device's (no limit with a profile).
std::int64_t memory_limit(const PlanRequest& request);

// The candidate's schedule, compiled. A cost-dependent schedule (zb-auto) is searched with the
// candidate's own costs and the memory limit; the others come from the registry and depend on
// their shape only, and those made from a compute order are compiled straight from it.
CompiledSchedule compiled_candidate(const PlanRequest& request, const PlanCandidate& c, const CostModel& costs);

}  // namespace pipescope::sim::planning
