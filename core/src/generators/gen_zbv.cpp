// Zero Bubble V (Qi et al., section 6; torch ScheduleZBVZeroBubble). V placement: rank r
// holds chunk 0 = stage r and chunk 1 = stage 2p-1-r, so the last rank turns the pipeline
// around without a transfer. Per rank:
//   warm-up   2(p-r)-1 chunk-0 forwards; r pairs (chunk-1 F, chunk-0 F);
//             p-r triples (chunk-1 F, I, W)
//   steady    (chunk-0 F, I, W, chunk-1 F, I, W) until every forward is issued
//   cool-down r pairs (chunk-0 I, chunk-1 I); p-r pairs (chunk-0 I, oldest chunk-0 W);
//             then the remaining chunk-1 and chunk-0 W
// The pattern is built for max(m, 2p-1) micro-batches; with fewer, the actions of the
// micro-batches that do not exist are dropped, as torch does.
#include <algorithm>

#include "generator_support.hpp"
#include "pipescope/core/generators.hpp"

namespace pipescope {

ComputeOrder zbv_order(const ScheduleParams& params) {
  using namespace generator_support;
  const char* name = "zbv";
  require_two_chunks(name, params);
  const int p = params.num_ranks;
  const int m = params.num_micro_batches;
  const int pattern_micro_batches = std::max(m, 2 * p - 1);
  ComputeOrder order = empty_order(name, p, m, v_placement(p));

  for (int r = 0; r < p; ++r) {
    const int chunk0 = r;
    const int chunk1 = 2 * p - 1 - r;
    int forward0 = 0, forward1 = 0, input0 = 0, input1 = 0;
    auto& ops = order.per_rank[r];
    ops.reserve(6 * static_cast<std::size_t>(m));
    auto emit = [&](Op op, int stage, int micro_batch) {
      if (micro_batch < m) ops.push_back(compute(op, stage, micro_batch));
    };

    for (int i = 0; i < 2 * (p - r) - 1; ++i) emit(Op::ForwardPass, chunk0, forward0++);
    for (int i = 0; i < r; ++i) {
      emit(Op::ForwardPass, chunk1, forward1++);
      emit(Op::ForwardPass, chunk0, forward0++);
    }
    for (int i = 0; i < p - r; ++i) {
      emit(Op::ForwardPass, chunk1, forward1++);
      emit(Op::BackwardInput, chunk1, input1);
      emit(Op::BackwardWeight, chunk1, input1++);
    }
    while (forward1 < forward0 || forward0 < pattern_micro_batches) {
      if (forward0 < pattern_micro_batches) emit(Op::ForwardPass, chunk0, forward0++);
      emit(Op::BackwardInput, chunk0, input0);
      emit(Op::BackwardWeight, chunk0, input0++);
      emit(Op::ForwardPass, chunk1, forward1++);
      emit(Op::BackwardInput, chunk1, input1);
      emit(Op::BackwardWeight, chunk1, input1++);
    }
    int weight0 = input0, weight1 = input1;
    for (int i = 0; i < r; ++i) {
      emit(Op::BackwardInput, chunk0, input0++);
      emit(Op::BackwardInput, chunk1, input1++);
    }
    for (int i = 0; i < p - r; ++i) {
      emit(Op::BackwardInput, chunk0, input0++);
      emit(Op::BackwardWeight, chunk0, weight0++);
    }
    while (weight1 < input1) emit(Op::BackwardWeight, chunk1, weight1++);
    while (weight0 < input0) emit(Op::BackwardWeight, chunk0, weight0++);
  }
  return order;
}

}  // namespace pipescope
