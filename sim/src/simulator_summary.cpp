// The event loop's summary: the iteration time, each rank's busy time, bubble and peak memory,
// or the deadlock that kept a rank from finishing.
#include <algorithm>
#include <string>

#include "pipescope/core/errors.hpp"
#include "pipescope/traces/bubble.hpp"
#include "simulator_engine.hpp"

namespace pipescope::sim::event_loop {

// Every rank done (else a deadlock), the iteration time, each rank's busy time, bubble, memory.
Summary Engine::summarize() const {
  Summary summary;
  summary.schedule = s_.name;
  summary.num_ranks = s_.num_ranks;
  summary.num_stages = s_.num_stages;
  summary.num_micro_batches = s_.num_micro_batches;
  summary.instructions = static_cast<std::int64_t>(s_.instructions.size());
  double iteration = 0;
  for (const RankState& r : ranks_) {
    if (!r.done) deadlock();
    iteration = std::max(iteration, r.clock_s);
  }
  if (!s_.instructions.empty()) iteration += costs_.runtime.step_overhead_s;
  summary.iteration_time_s = iteration;
  double bubble_sum = 0;
  for (std::int32_t rank = 0; rank < s_.num_ranks; ++rank) {
    const RankState& r = ranks_[rank];
    RankSummary rs;
    rs.rank = rank;
    rs.busy_s = r.busy_s;
    rs.bubble_fraction = traces::bubble_fraction_of(r.busy_s, iteration);
    rs.peak_memory_bytes = r.peak_bytes;
    if (r.first_compute_s >= 0)
      rs.internal_idle_s = std::max(0.0, r.last_compute_end_s - r.first_compute_s - r.compute_s);
    bubble_sum += rs.bubble_fraction;
    summary.ranks.push_back(rs);
  }
  summary.bubble_fraction = s_.num_ranks > 0 ? bubble_sum / s_.num_ranks : 0.0;
  summary.throughput_samples_per_s = iteration > 0 ? static_cast<double>(s_.num_micro_batches) *
                                                         costs_.micro_batch_size * costs_.data_parallel / iteration
                                                   : 0.0;
  return summary;
}

void Engine::deadlock() const {
  for (std::int32_t rank = 0; rank < s_.num_ranks; ++rank) {
    const RankState& r = ranks_[rank];
    // A rank at a barrier waits for the stuck one, not for a send.
    const bool at_barrier =
        (r.reached_barrier[0] && !r.passed_barrier[0]) || (r.reached_barrier[1] && !r.passed_barrier[1]);
    if (r.done || at_barrier) continue;
    const CompiledInstruction& ci = s_.instructions[r.pc];
    const Instruction instr{ci.op, ci.stage, ci.micro_batch};
    throw ScheduleError(s_.name + ": deadlock: rank " + std::to_string(rank) + ", step " +
                        std::to_string(s_.step_of(r.pc)) + ", instruction " + to_string(instr) +
                        " waits forever (its send is never posted)");
  }
  throw ScheduleError(s_.name + ": deadlock");
}

}  // namespace pipescope::sim::event_loop
