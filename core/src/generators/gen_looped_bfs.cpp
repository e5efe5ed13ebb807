// Breadth-first looping (torch ScheduleLoopedBFS): rank r holds stages r, r + p, ... and runs
// every micro-batch through one local stage before the next, forwards in stage order, then
// backwards in reverse stage order and reverse micro-batch order.
#include "generator_support.hpp"
#include "pipescope/core/generators.hpp"

namespace pipescope {

ComputeOrder looped_bfs_order(const ScheduleParams& params) {
  using namespace generator_support;
  const char* name = "looped-bfs";
  check_sizes(name, params);
  const int p = params.num_ranks;
  const int m = params.num_micro_batches;
  const int v = loop_chunks(params);
  if (v >= 1) check_fits(name, params, v);
  ComputeOrder order = empty_order(name, p, m, loop_placement(p, v));
  for (int r = 0; r < p; ++r) {
    auto& ops = order.per_rank[r];
    ops.reserve(2 * static_cast<std::size_t>(m) * v);
    for (int c = 0; c < v; ++c)
      for (int i = 0; i < m; ++i) ops.push_back(compute(Op::ForwardPass, c * p + r, i));
    for (int c = v - 1; c >= 0; --c)
      for (int i = m - 1; i >= 0; --i) ops.push_back(compute(Op::BackwardPass, c * p + r, i));
  }
  return order;
}

}  // namespace pipescope
