// Zero Bubble H1 and H2 (Qi et al., "Zero Bubble Pipeline Parallelism", section 3): the
// backward is split into BackwardInput (I, on the critical path: the previous stage waits
// for its gradient) and BackwardWeight (W, needed by nobody), and W passes fill the slots
// where a rank would otherwise wait.
//
// The orders are built by a unit-time list schedule over all ranks, slot by slot, with the
// handcrafted schedules' priorities: a ready I first (it unblocks the previous rank), then
// a ready F while the rank holds fewer micro-batches than its limits, then the oldest
// pending W, else the rank idles. Activations of a micro-batch are held from its F to its I
// (M_B, F's memory), and what its W still needs from its I to its W (M_W <= M_B); a W is never
// deferred further than a cap. The limits are what distinguishes the two schedules:
//   H1: rank r holds at most p - r micro-batches of activations and at most p micro-batches
//       from F to W (so at most r weight passes wait while it holds p - r activations): its
//       peak, (p - r) M_B + r M_W, never passes rank 0's p M_B, 1F1B's peak, as in the paper
//       (with the default costs f_mem 2, b_mem = w_mem = -1: 2p - r against 1F1B's 2(p - r)).
//       It defers at most p weight passes (the fewest that still fill the drain): with unit
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

// What distinguishes the two schedules, per rank.
struct ZeroBubbleRules {
  std::vector<int> activation_limit;       // micro-batches from F to I
  std::vector<int> deferred_weight_limit;  // weight passes waiting (I done, W not)
  std::vector<int> held_limit;             // micro-batches from F to W
  bool forward_first = false;              // a ready F before a ready I
};

ComputeOrder zero_bubble_order(const char* name, const ScheduleParams& params, const ZeroBubbleRules& rules) {
  const std::vector<int>& activation_limit = rules.activation_limit;
  const std::vector<int>& deferred_weight_limit = rules.deferred_weight_limit;
  const std::vector<int>& held_limit = rules.held_limit;
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
      const bool forward_ready = f < m && f - i < activation_limit[r] && f - w < held_limit[r] &&
                                 (r == 0 || (forward_slot[at(r - 1, f)] >= 0 && forward_slot[at(r - 1, f)] < slot));
      if (i - w >= deferred_weight_limit[r]) {
        ops.push_back(compute(Op::BackwardWeight, r, w));
        ++next_weight[r];
      } else if (rules.forward_first && forward_ready) {
        ops.push_back(compute(Op::ForwardPass, r, f));
        forward_slot[at(r, f)] = slot;
        ++next_forward[r];
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
  ZeroBubbleRules rules{std::vector<int>(p), std::vector<int>(p, p), std::vector<int>(p, p), true};
  for (int r = 0; r < p; ++r) rules.activation_limit[r] = p - r;
  return zero_bubble_order("zb-h1", params, rules);
}

ComputeOrder zb_h2_order(const ScheduleParams& params) {
  generator_support::require_one_chunk("zb-h2", params);
  const int p = params.num_ranks;
  // H2 bounds its activations and its pending weight passes, not the two together.
  ZeroBubbleRules rules{std::vector<int>(p), std::vector<int>(p), std::vector<int>(p, params.num_micro_batches + 1), false};
  for (int r = 0; r < p; ++r) {
    rules.activation_limit[r] = 2 * (p - r) - 1;
    rules.deferred_weight_limit[r] = p + r;
  }
  return zero_bubble_order("zb-h2", params, rules);
}

}  // namespace pipescope
