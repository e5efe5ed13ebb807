// PipeDream-flush 1F1B: rank r runs p - 1 - r warm-up forwards, then alternates one forward
// and one backward, then drains the remaining backwards (torch Schedule1F1B, Megatron's
// non-interleaved schedule). At most p - r micro-batches of activations are alive on rank r.
#include <algorithm>

#include "generator_support.hpp"
#include "pipescope/core/generators.hpp"

namespace pipescope {

ComputeOrder one_f_one_b_order(const ScheduleParams& params) {
  using namespace generator_support;
  require_one_chunk("1f1b", params);
  const int p = params.num_ranks;
  const int m = params.num_micro_batches;
  if (m < p)
    refuse("1f1b", "needs at least as many micro-batches as stages (m >= p), as torch Schedule1F1B "
                   "requires; got --micro-batches " + std::to_string(m) + " with --stages " +
                       std::to_string(p));
  ComputeOrder order = empty_order("1f1b", p, m, loop_placement(p, 1));
  for (int r = 0; r < p; ++r) {
    auto& ops = order.per_rank[r];
    ops.reserve(2 * static_cast<std::size_t>(m));
    const int warmup = std::min(p - 1 - r, m);
    int next_forward = 0;
    int next_backward = 0;
    for (; next_forward < warmup; ++next_forward) ops.push_back(compute(Op::ForwardPass, r, next_forward));
    while (next_forward < m) {
      ops.push_back(compute(Op::ForwardPass, r, next_forward++));
      ops.push_back(compute(Op::BackwardPass, r, next_backward++));
    }
    while (next_backward < m) ops.push_back(compute(Op::BackwardPass, r, next_backward++));
  }
  return order;
}

}  // namespace pipescope
