// Megatron's combined 1F1B step (--overlap-moe-expert-parallel-comm) as its code issues it: one
// micro-batch's forward of a chunk and another's backward, layer by layer, on a compute and a
// communication stream (megatron/core/models/common/model_chunk_schedule_plan.py). The event
// loop runs its overlapped steps through it (simulator_overlap.cpp); the pieces run on
// pair_timeline.hpp's two resources.
#pragma once

#include <vector>

#include "pair_timeline.hpp"
#include "pipescope/sim/costs.hpp"

namespace pipescope::sim::detail {

// The two passes of one step: each pass's compute without its all-to-all, and the part of the
// backward's that is weight gradients computed late (delay_wgrad_compute; 0: off, the weight
// gradients inside the data gradients' pieces as Megatron runs them without the option).
struct CombinedStepPasses {
  double forward_compute_s = 0;
  ExpertAllToAll forward;
  double backward_compute_s = 0;
  ExpertAllToAll backward;
  double backward_weight_s = 0;
};

// The pieces in the order Megatron issues them (each stream runs its own in that order).
std::vector<PairPiece> megatron_combined_issue_order(const CombinedStepPasses& passes);

// The step those pieces make, the compute slowed beside the link; the forward ends when its
// output is sent, behind the step's last all-to-all.
OverlappedStep megatron_combined_step(const CombinedStepPasses& passes);

}  // namespace pipescope::sim::detail
