// One overlapped F&B step's two passes on a rank's two resources, its compute and its
// expert-parallel link, run as events: each piece starts once its pass's previous piece has
// ended and its resource is free, and the compute runs slower while an all-to-all is on the
// wire, whose kernel holds some of the SMs (ExpertAllToAll::compute_slowdown). DualPipeV's pairs
// (overlapped_step) and Megatron's combined step (simulator_overlap.cpp) differ only in how a
// free resource picks its next piece.
#pragma once

#include <vector>

#include "pipescope/sim/costs.hpp"

namespace pipescope::sim::detail {

enum class PairResource { Compute, Link };

struct PairPiece {
  PairResource resource = PairResource::Compute;
  bool backward_pass = false;
  double work_s = 0;                                          // its time alone, not slowed
  AllToAllPiece::Kind kind = AllToAllPiece::Kind::DispatchF;  // link pieces only
  // A delayed weight gradient (Megatron's delay_wgrad_compute): it waits for its pass's previous
  // piece like any other, but its pass's next piece does not wait for it, only for that one.
  bool off_chain = false;
};

// How a free resource picks its next piece: in the order the pieces were issued to it (CUDA
// streams: Megatron's combined step), or the next piece of whichever pass is ready, the
// backward's when both are, a delayed weight gradient only when the compute has nothing else
// ready (DualPipeV's list scheduling).
enum class PairOrder { IssueOrder, FirstReady };

struct PairTimeline {
  double forward_end_s = 0;   // when the forward's last piece ends, from the step's start
  double backward_end_s = 0;  // likewise the backward's
  double compute_free_s = 0;  // when each resource ends its last piece
  double link_free_s = 0;
  std::vector<AllToAllPiece> link_pieces;  // in the order they start
};

// Runs `issued` (each pass's pieces in its order; for IssueOrder also each resource's) with the
// compute's rate divided by `compute_slowdown` (>= 1) while a link piece runs. With a slowdown of
// 1 each piece takes its work_s and the result is plain list scheduling.
PairTimeline run_pair_timeline(const std::vector<PairPiece>& issued, PairOrder order, double compute_slowdown);

}  // namespace pipescope::sim::detail
