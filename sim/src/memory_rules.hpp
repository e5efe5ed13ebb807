// How an instruction changes its rank's memory. A rank's memory depends only on the order of
// its own instructions, not on when they run, so its peak can be found by walking the program
// without simulating it: the planner does so to drop what cannot fit before it simulates. The
// event loop and that walk share these rules, so that the two cannot disagree.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pipescope/sim/costs.hpp"
#include "pipescope/sim/simulator.hpp"

namespace pipescope::sim {

struct MemoryChange {
  // The stage's gradient accumulation buffer, allocated by its first weight gradient of the
  // iteration (BackwardPass or BackwardWeight) at the op's start, before the op's own bytes.
  std::int64_t grad_buffer_bytes = 0;
  // The op's own bytes: an allocation counts from its start, a free from its end (an
  // OptimizerStep frees the gradient buffer here).
  std::int64_t delta_bytes = 0;
};

// `grad_buffer_held` is the stage's flag: set when the buffer is allocated, cleared when the
// optimizer step frees it.
inline MemoryChange memory_change(Op op, const StageCost& cost, char& grad_buffer_held) {
  MemoryChange change;
  switch (op) {
    case Op::ForwardPass: change.delta_bytes = cost.f_mem_bytes; break;
    case Op::BackwardPass: change.delta_bytes = cost.b_mem_bytes + cost.w_mem_bytes; break;
    case Op::BackwardInput: change.delta_bytes = cost.b_mem_bytes; break;
    case Op::BackwardWeight: change.delta_bytes = cost.w_mem_bytes; break;
    default: break;
  }
  if (cost.grad_buffer_bytes > 0) {
    if ((op == Op::BackwardPass || op == Op::BackwardWeight) && !grad_buffer_held) {
      grad_buffer_held = 1;
      change.grad_buffer_bytes = cost.grad_buffer_bytes;
    } else if (op == Op::OptimizerStep && grad_buffer_held) {
      grad_buffer_held = 0;
      change.delta_bytes -= cost.grad_buffer_bytes;
    }
  }
  return change;
}

// The largest peak over the ranks of a run of `schedule` with `costs` (what
// simulate(...).summary.max_peak_memory_bytes() gives for a run that completes).
inline std::int64_t walked_peak_memory_bytes(const CompiledSchedule& schedule, const CostModel& costs) {
  std::vector<std::int64_t> memory(static_cast<std::size_t>(schedule.num_ranks), 0);
  for (int s = 0; s < schedule.num_stages; ++s) memory[schedule.stage_to_rank[s]] += costs.stage(s).static_bytes;
  std::vector<char> grad_buffer_held(static_cast<std::size_t>(schedule.num_stages), 0);
  std::int64_t peak = 0;
  for (std::int32_t rank = 0; rank < schedule.num_ranks; ++rank) {
    std::int64_t bytes = memory[rank];
    std::int64_t rank_peak = bytes;
    for (std::int32_t pc = schedule.rank_begin[rank]; pc < schedule.rank_begin[rank + 1]; ++pc) {
      const CompiledInstruction& ci = schedule.instructions[pc];
      const MemoryChange change = memory_change(ci.op, costs.stage(ci.stage), grad_buffer_held[ci.stage]);
      bytes += change.grad_buffer_bytes;
      rank_peak = std::max(rank_peak, bytes);
      bytes += change.delta_bytes;
      rank_peak = std::max(rank_peak, bytes);
    }
    peak = std::max(peak, rank_peak);
  }
  return peak;
}

}  // namespace pipescope::sim
