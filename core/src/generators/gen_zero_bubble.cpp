// Zero Bubble H1 and H2 (Qi et al., "Zero Bubble Pipeline Parallelism", section 3): the
// backward is split into BackwardInput (I, on the critical path: the previous stage waits
// for its gradient) and BackwardWeight (W, needed by nobody), and W passes fill the slots
// where a rank would otherwise wait.
//
// The orders are built by a unit-time list schedule over all ranks, slot by slot, with the
// handcrafted schedules' priorities: a ready I first (it unblocks the previous rank), then
// a ready F while the rank holds fewer micro-batches of activations than its limit, then
// the oldest pending W, else the rank idles. Activations of a micro-batch are held from its
// F to its I; a W is never deferred further than a cap, so the inputs a pending W keeps stay
// bounded too. The limits are what distinguishes the two schedules:
//   H1: rank r holds at most p - r micro-batches, exactly 1F1B's activation memory, and
//       defers at most p weight passes (the fewest that still fill the drain): with unit
//       costs the makespan is m(F+B+W) + (p-1)(F+B-W) = 3m + p - 1;
//   H2: rank r holds at most 2(p - r) - 1, about twice that, which lets the first rank keep
//       forwarding until the first gradient returns, and defers at most p + r weight
//       passes; with unit costs and m >= 2p - 1 no rank waits between its first and last
//       instruction (the makespan stays 3m + p - 1: the last rank cannot start before the
//       first micro-batch reaches it).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "generator_support.hpp"
#include "pipescope/core/generators.hpp"

namespace pipescope {
namespace {

ComputeOrder zero_bubble_order(const char* name, const ScheduleParams& params,
                               const std::vector<int>& activation_limit,
                               const std::vector<int>& deferred_weight_limit) {
  using namespace generator_support;
  const int p = params.num_ranks;
  const int m = params.num_micro_batches;
  ComputeOrder order = empty_order(name, p, m, loop_placement(p, 1));

  // Slot in which F / I of (stage, micro-batch) ran; -1 until it has.
  std::vector<int> forward_slot(static_cast<std::size_t>(p) * m, -1);
  std::vector<int> input_slot(static_cast<std::size_t>(p) * m, -1);
  std::vector<int> next_forward(p, 0), next_input(p, 0), next_weight(p, 0);
  auto at = [m](int stage, int micro_batch) { return static_cast<std::size_t>(stage) * m + micro_batch; };

  int finished_ranks = 0;
  for (int slot = 0; finished_ranks < p; ++slot) {
    bool progressed = false;
    finished_ranks = 0;
    for (int r = 0; r < p; ++r) {
      auto& ops = order.per_rank[r];
      const int f = next_forward[r], i = next_input[r], w = next_weight[r];
      if (w == m) {
        ++finished_ranks;
        continue;
      }
      // Values produced in this slot are not visible before the next one.
      const bool input_ready = i < f && forward_slot[at(r, i)] < slot &&
                               (r == p - 1 || (input_slot[at(r + 1, i)] >= 0 && input_slot[at(r + 1, i)] < slot));
      const bool forward_ready = f < m && f - i < activation_limit[r] &&
                                 (r == 0 || (forward_slot[at(r - 1, f)] >= 0 && forward_slot[at(r - 1, f)] < slot));
      if (i - w >= deferred_weight_limit[r]) {
        ops.push_back(compute(Op::BackwardWeight, r, w));
        ++next_weight[r];
      } else if (input_ready) {
        ops.push_back(compute(Op::BackwardInput, r, i));
        input_slot[at(r, i)] = slot;
        ++next_input[r];
      } else if (forward_ready) {
        ops.push_back(compute(Op::ForwardPass, r, f));
        forward_slot[at(r, f)] = slot;
        ++next_forward[r];
      } else if (w < i) {
        ops.push_back(compute(Op::BackwardWeight, r, w));
        ++next_weight[r];
      } else {
        continue;  // idle slot
      }
      progressed = true;
    }
    // Some rank always progresses: the oldest unfinished micro-batch has a ready op.
    if (!progressed && finished_ranks < p)
      throw std::logic_error(std::string(name) + ": the list schedule stalled at slot " + std::to_string(slot));
  }
  return order;
}

}  // namespace

ComputeOrder zb_h1_order(const ScheduleParams& params) {
  generator_support::require_one_chunk("zb-h1", params);
  const int p = params.num_ranks;
  std::vector<int> activations(p), deferred_weights(p, p);
  for (int r = 0; r < p; ++r) activations[r] = p - r;
  return zero_bubble_order("zb-h1", params, activations, deferred_weights);
}

ComputeOrder zb_h2_order(const ScheduleParams& params) {
  generator_support::require_one_chunk("zb-h2", params);
  const int p = params.num_ranks;
  std::vector<int> activations(p), deferred_weights(p);
  for (int r = 0; r < p; ++r) {
    activations[r] = 2 * (p - r) - 1;
    deferred_weights[r] = p + r;
  }
  return zero_bubble_order("zb-h2", params, activations, deferred_weights);
}

}  // namespace pipescope
