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
  // What a weight pass deferring its output-layer weight gradient keeps for the flush (its
  // input and output gradient), from the op's start, like the buffer.
  std::int64_t deferred_bytes = 0;
  // The op's own bytes: an allocation counts from its start, a free from its end (an
  // OptimizerStep frees the gradient buffer here).
  std::int64_t delta_bytes = 0;
};

inline bool is_weight_pass(Op op) { return op == Op::BackwardPass || op == Op::BackwardWeight; }
inline bool is_iteration_end(Op op) {
  return op == Op::ReduceTiedGrads || op == Op::ReduceGrads || op == Op::OptimizerStep;
}

// Megatron's deferred output-layer weight gradients (StageCost::deferred_weight_s). In each
// iteration of a rank's program, a stage's first `deferred_micro_batches` weight passes (0: all)
// leave them out; the flush runs them all just before the rank's first reduction or optimizer
// step after those passes (Megatron: after the schedule's last backward and its sends, before
// finalizing the gradients), freeing what the deferred passes held. A program with no such
// instruction after them runs its flush inside its last weight pass. Per instruction, and empty
// when no stage defers anything, or where overlapped F&B steps hide the experts' all-to-all.
struct DeferredWeights {
  std::vector<char> defers;               // a weight pass that leaves its output layer's for the flush
  std::vector<double> flush_s;            // the flush that runs before (or, flush_in_pass, inside) it
  std::vector<std::int64_t> flush_bytes;  // what the flush frees
  std::vector<std::int32_t> flush_stage;  // the stage whose weight gradients it computes (the last)
  std::vector<char> flush_in_pass;
  bool any() const { return !defers.empty(); }
  double flush_before_s(std::int32_t pc) const { return any() && !flush_in_pass[pc] ? flush_s[pc] : 0.0; }
  // What a weight pass takes less (its deferred part) or more (a flush inside it).
  double pass_change_s(std::int32_t pc, const StageCost& cost) const {
    if (!any()) return 0.0;
    return (defers[pc] ? -cost.deferred_weight_s : 0.0) + (flush_in_pass[pc] ? flush_s[pc] : 0.0);
  }
};

inline DeferredWeights deferred_weights(const CompiledSchedule& schedule, const CostModel& costs) {
  DeferredWeights d;
  bool any = false, all_to_all = false;
  for (int s = 0; s < schedule.num_stages; ++s) {
    any = any || costs.stage(s).deferred_weight_s > 0;
    all_to_all = all_to_all || costs.stage(s).all_to_all.any();
  }
  if (!any) return d;
  // Not modelled inside overlapped F&B steps (their backward's time is the pair's): a schedule
  // that overlaps its experts' all-to-all runs undeferred.
  bool overlapped = costs.overlap_moe_all_to_all;
  for (const CompiledInstruction& ci : schedule.instructions) overlapped = overlapped || ci.overlaps_next_backward;
  if (all_to_all && overlapped) return d;
  const std::size_t n = schedule.instructions.size();
  d.defers.assign(n, 0);
  d.flush_s.assign(n, 0.0);
  d.flush_bytes.assign(n, 0);
  d.flush_stage.assign(n, -1);
  d.flush_in_pass.assign(n, 0);
  std::vector<int> deferred_in_iteration(static_cast<std::size_t>(schedule.num_stages), 0);
  for (std::int32_t rank = 0; rank < schedule.num_ranks; ++rank) {
    double pending_s = 0;
    std::int64_t pending_bytes = 0;
    std::int32_t pending_stage = -1, last_deferring_pc = -1;
    std::fill(deferred_in_iteration.begin(), deferred_in_iteration.end(), 0);
    const auto flush_at = [&](std::int32_t pc, bool in_pass) {
      d.flush_s[pc] += pending_s;
      d.flush_bytes[pc] += pending_bytes;
      d.flush_stage[pc] = pending_stage;
      d.flush_in_pass[pc] = in_pass ? 1 : 0;
      pending_s = 0;
      pending_bytes = 0;
      std::fill(deferred_in_iteration.begin(), deferred_in_iteration.end(), 0);
    };
    for (std::int32_t pc = schedule.rank_begin[rank]; pc < schedule.rank_begin[rank + 1]; ++pc) {
      const CompiledInstruction& ci = schedule.instructions[pc];
      if (is_iteration_end(ci.op) && pending_s > 0) flush_at(pc, false);
      if (!is_weight_pass(ci.op)) continue;
      const StageCost& cost = costs.stage(ci.stage);
      int& count = deferred_in_iteration[static_cast<std::size_t>(ci.stage)];
      if (cost.deferred_weight_s <= 0 || (cost.deferred_micro_batches > 0 && count >= cost.deferred_micro_batches))
        continue;
      ++count;
      d.defers[pc] = 1;
      pending_s += cost.deferred_weight_s;
      pending_bytes += cost.deferred_bytes;
      pending_stage = ci.stage;
      last_deferring_pc = pc;
    }
    if (pending_s > 0) flush_at(last_deferring_pc, true);
  }
  return d;
}

// `grad_buffer_held` is the stage's flag: set when the buffer is allocated, cleared when the
// optimizer step frees it. Instruction `pc`'s part in the deferred weight gradients: what it
// keeps for the flush, and what a flush inside it frees at its end (DeferredWeights).
inline MemoryChange memory_change(Op op, const StageCost& cost, char& grad_buffer_held, const DeferredWeights& deferred,
                                  std::int32_t pc) {
  MemoryChange change;
  if (deferred.any()) {
    if (deferred.defers[pc]) change.deferred_bytes = cost.deferred_bytes;
    if (deferred.flush_in_pass[pc]) change.delta_bytes -= deferred.flush_bytes[pc];
  }
  switch (op) {
    case Op::ForwardPass: change.delta_bytes += cost.f_mem_bytes; break;
    case Op::BackwardPass: change.delta_bytes += cost.b_mem_bytes + cost.w_mem_bytes; break;
    case Op::BackwardInput: change.delta_bytes += cost.b_mem_bytes; break;
    case Op::BackwardWeight: change.delta_bytes += cost.w_mem_bytes; break;
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
  const DeferredWeights deferred = deferred_weights(schedule, costs);
  std::int64_t peak = 0;
  for (std::int32_t rank = 0; rank < schedule.num_ranks; ++rank) {
    std::int64_t bytes = memory[rank];
    std::int64_t rank_peak = bytes;
    for (std::int32_t pc = schedule.rank_begin[rank]; pc < schedule.rank_begin[rank + 1]; ++pc) {
      const CompiledInstruction& ci = schedule.instructions[pc];
      if (deferred.flush_before_s(pc) > 0) bytes -= deferred.flush_bytes[pc];  // freed before it
      const MemoryChange change = memory_change(ci.op, costs.stage(ci.stage), grad_buffer_held[ci.stage], deferred, pc);
      bytes += change.grad_buffer_bytes + change.deferred_bytes;
      rank_peak = std::max(rank_peak, bytes);
      bytes += change.delta_bytes;
      rank_peak = std::max(rank_peak, bytes);
    }
    peak = std::max(peak, rank_peak);
  }
  return peak;
}

}  // namespace pipescope::sim
