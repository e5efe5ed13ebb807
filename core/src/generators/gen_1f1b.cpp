// PipeDream-flush 1F1B as Megatron-Core runs it (forward_backward_pipelining_without_
// interleaving): rank r runs min(p - 1 - r, m) warm-up forwards, then alternates one forward
// and one backward, then drains the remaining backwards. With m < p the warm-up is shorter and
// the ranks near the front run every forward first, as Megatron does (torch's Schedule1F1B
// class refuses m < p; its runtime takes this order from a CSV). At most min(p - r, m)
// micro-batches of activations are alive on rank r.
#include <algorithm>

#include "generator_support.hpp"
#include "pipescope/core/generators.hpp"

namespace pipescope {

ComputeOrder one_f_one_b_order(const ScheduleParams& params) {
  using namespace generator_support;
  require_one_chunk("1f1b", params);
  const int p = params.num_ranks;
  const int m = params.num_micro_batches;
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
