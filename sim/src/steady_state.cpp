#include "pipescope/sim/steady_state.hpp"

#include <string>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/size_limits.hpp"
#include "pipescope/traces/bubble.hpp"

namespace pipescope::sim {

CompiledSchedule repeat_iterations(const CompiledSchedule& one, int iterations) {
  if (iterations < 1) throw UsageError("iterations to repeat must be at least 1, got " + std::to_string(iterations));
  // The compiled form indexes instructions and transfers with 32-bit integers.
  if (static_cast<std::int64_t>(one.instructions.size()) * iterations > kMaxInstructions)
    throw UsageError(std::to_string(iterations) + " iterations of " + std::to_string(one.instructions.size()) +
                     " instructions: more than the simulator indexes (" + std::to_string(kMaxInstructions) + ")");
  const std::int32_t transfers = static_cast<std::int32_t>(one.transfers.size());
  CompiledSchedule out;
  out.name = one.name;
  out.num_ranks = one.num_ranks;
  out.num_stages = one.num_stages;
  out.num_micro_batches = one.num_micro_batches * iterations;
  out.stage_to_rank = one.stage_to_rank;
  out.links = one.links;
  out.receives_post_only = one.receives_post_only;
  out.instructions.reserve(one.instructions.size() * static_cast<std::size_t>(iterations));
  out.rank_begin.assign(static_cast<std::size_t>(one.num_ranks) + 1, 0);
  out.rank_first_step.assign(static_cast<std::size_t>(one.num_ranks) + 1, 0);
  // Where instruction `index` of `one` lands in copy `copy`: its rank's block grows k-fold.
  auto moved = [&](std::int32_t index, int copy) {
    const std::int32_t rank = one.rank_of_instruction(index);
    const std::int32_t length = one.rank_begin[rank + 1] - one.rank_begin[rank];
    return out.rank_begin[rank] + copy * length + (index - one.rank_begin[rank]);
  };
  for (int rank = 0; rank < one.num_ranks; ++rank) {
    const std::int32_t begin = one.rank_begin[rank], end = one.rank_begin[rank + 1];
    const std::int32_t first_step = one.rank_first_step[rank], last_step = one.rank_first_step[rank + 1];
    out.rank_begin[rank] = static_cast<std::int32_t>(out.instructions.size());
    out.rank_first_step[rank] = static_cast<std::int32_t>(out.step_begin.size());
    for (int copy = 0; copy < iterations; ++copy) {
      const std::int32_t shift = out.rank_begin[rank] + copy * (end - begin) - begin;
      for (std::int32_t step = first_step; step < last_step; ++step) out.step_begin.push_back(one.step_begin[step] + shift);
      for (std::int32_t i = begin; i < end; ++i) {
        CompiledInstruction ci = one.instructions[i];
        if (ci.micro_batch >= 0) ci.micro_batch += copy * one.num_micro_batches;
        if (ci.transfer >= 0) ci.transfer += copy * transfers;
        out.instructions.push_back(ci);
      }
    }
  }
  out.rank_begin[one.num_ranks] = static_cast<std::int32_t>(out.instructions.size());
  out.rank_first_step[one.num_ranks] = static_cast<std::int32_t>(out.step_begin.size());
  out.transfers.reserve(static_cast<std::size_t>(transfers) * iterations);
  for (int copy = 0; copy < iterations; ++copy)
    for (CompiledTransfer t : one.transfers) {
      t.send_index = moved(t.send_index, copy);
      t.recv_index = moved(t.recv_index, copy);
      out.transfers.push_back(t);
    }
  return out;
}

bool synchronises_every_step(const RuntimeEffects& runtime) {
  return runtime.optimizer_sync || runtime.reduce_tied_sync;
}

Summary simulate_steady_state(const CompiledSchedule& schedule, const CostModel& costs, const Topology& topology,
                              const SimOptions& options, int iterations) {
  if (iterations < 2) throw UsageError("a steady state needs at least 2 iterations, got " + std::to_string(iterations));
  if (synchronises_every_step(costs.runtime))
    throw UsageError("a steady state of overlapping iterations: these costs' runtime synchronises the ranks at every "
                     "optimizer step (a calibrated profile's), so its iterations cannot overlap");
  SimOptions quiet = options;
  quiet.build_trace = false;
  const Summary single = simulate(schedule, costs, topology, quiet).summary;
  Summary many = simulate(repeat_iterations(schedule, iterations), costs, topology, quiet).summary;
  const double period = (many.iteration_time_s - single.iteration_time_s) / (iterations - 1);
  Summary out = many;
  out.num_micro_batches = schedule.num_micro_batches;
  out.iteration_time_s = period;
  out.throughput_samples_per_s =
      period > 0 ? single.throughput_samples_per_s * single.iteration_time_s / period : 0.0;
  double bubble_sum = 0;
  for (RankSummary& r : out.ranks) {
    r.busy_s /= iterations;
    r.internal_idle_s /= iterations;
    r.bubble_fraction = traces::bubble_fraction_of(r.busy_s, period);
    bubble_sum += r.bubble_fraction;
  }
  out.bubble_fraction = out.ranks.empty() ? 0.0 : bubble_sum / static_cast<double>(out.ranks.size());
  out.steady_state_iterations = iterations;
  return out;
}

}  // namespace pipescope::sim
