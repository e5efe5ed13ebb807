// GPipe: every rank runs all its forwards, then all its backwards, micro-batches in order
// (torch ScheduleGPipe).
#include "generator_support.hpp"
#include "pipescope/core/generators.hpp"

namespace pipescope {

ComputeOrder gpipe_order(const ScheduleParams& params) {
  using namespace generator_support;
  require_one_chunk("gpipe", params);
  const int p = params.num_ranks;
  const int m = params.num_micro_batches;
  ComputeOrder order = empty_order("gpipe", p, m, loop_placement(p, 1));
  for (int r = 0; r < p; ++r) {
    auto& ops = order.per_rank[r];
    ops.reserve(2 * static_cast<std::size_t>(m));
    for (int i = 0; i < m; ++i) ops.push_back(compute(Op::ForwardPass, r, i));
    for (int i = 0; i < m; ++i) ops.push_back(compute(Op::BackwardPass, r, i));
  }
  return order;
}

}  // namespace pipescope
