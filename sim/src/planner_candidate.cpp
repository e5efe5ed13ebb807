// One candidate of the plan made concrete: its costs, topology and compiled schedule
// (planner_candidate.hpp), and simulate_candidate, which simulates one alone.
#include <algorithm>
#include <limits>
#include <optional>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/sim/calibration.hpp"
#include "pipescope/sim/zb_auto.hpp"
#include "planner_candidate.hpp"

namespace pipescope::sim {
namespace planning {
namespace {

ScheduleParams schedule_params(const PlanRequest& request, const PlanCandidate& c) {
  ScheduleParams params;
  params.num_ranks = c.parallel.pipeline;
  params.num_micro_batches = c.num_micro_batches;
  params.chunks = c.parallel.chunks;
  params.chunks_given = c.parallel.chunks != 1;
  // The group size goes to the schedules that group micro-batches; the others run as they are.
  if (traits_of(c.schedule).takes_microbatch_group_size) params.microbatch_group_size = request.microbatch_group_size;
  return params;
}

}  // namespace

const ScheduleTraits& traits_of(const std::string& schedule) {
  const ScheduleTraits* traits = schedule_traits(schedule);
  if (!traits) throw UsageError("--schedules: " + ScheduleRegistry::instance().why_unknown(schedule));
  return *traits;
}

Topology candidate_topology(const PlanRequest& request, const PlanCandidate& c) {
  // Every link of a profile is the one link it measured.
  if (request.profile) return topology_from_profile(*request.profile);
  return with_parallel_layout(request.topology, c.parallel);
}

CostModel candidate_costs(const PlanRequest& request, const PlanCandidate& c) {
  if (!request.profile) return derive_costs(request.model, request.device, request.topology, c.parallel);
  const int num_stages = c.parallel.pipeline * c.parallel.chunks;
  return cost_model_from_profile(profile_for_stages(*request.profile, num_stages, request.profile_source));
}

std::int64_t largest_static_bytes(const CostModel& costs, const std::vector<int>& placement, int num_ranks) {
  std::vector<std::int64_t> per_rank(static_cast<std::size_t>(num_ranks), 0);
  for (std::size_t s = 0; s < placement.size(); ++s) per_rank[placement[s]] += costs.stages[s].static_bytes;
  return *std::max_element(per_rank.begin(), per_rank.end());
}

std::int64_t memory_limit(const PlanRequest& request) {
  if (request.max_mem_bytes > 0) return request.max_mem_bytes;
  return request.profile ? std::numeric_limits<std::int64_t>::max() : request.device.memory_bytes;
}

CompiledSchedule compiled_candidate(const PlanRequest& request, const PlanCandidate& c, const CostModel& costs) {
  if (!traits_of(c.schedule).cost_dependent) {
    if (std::optional<ComputeOrder> order = make_compute_order(c.schedule, schedule_params(request, c)))
      return compile(std::move(*order));
    return compile(make_schedule(c.schedule, schedule_params(request, c)));
  }
  ZbAutoRequest zb;
  zb.params = schedule_params(request, c);
  zb.costs = costs;
  zb.topology = candidate_topology(request, c);
  zb.max_mem_bytes = memory_limit(request);
  return compile(make_cost_dependent_schedule(c.schedule, zb));
}

}  // namespace planning

SimResult simulate_candidate(const PlanRequest& request, const PlanCandidate& candidate, bool build_trace) {
  const CostModel costs = planning::candidate_costs(request, candidate);
  const CompiledSchedule schedule = planning::compiled_candidate(request, candidate, costs);
  if (request.profile) check_profile_fits(*request.profile, schedule, request.profile_source);
  SimOptions options;
  options.build_trace = build_trace;
  return simulate(schedule, costs, planning::candidate_topology(request, candidate), options);
}

}  // namespace pipescope::sim
