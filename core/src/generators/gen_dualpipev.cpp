// DualPipeV (DeepSeek's DualPipe folded onto p ranks in V placement; torch ScheduleDualPipeV).
// Rank r holds stage r (chunk 0) and stage 2p-1-r (chunk 1). Micro-batches enter from one
// end only; the steady phase pairs a forward of one chunk with a full backward of the other
// (DualPipe's overlapped "F&B", written here as F then B), and the tail switches to split
// backward so that deferred weight passes fill the drain. Phases per rank:
//   1. 2(p-r-1) chunk-0 F            2. r+1 x (chunk-0 F, chunk-1 F)
//   3. p-r-1 x (chunk-1 I, oldest pending W, chunk-1 F)
//   4. m-2p+r+1 x (chunk-0 F & chunk-1 B, chunk-1 F & chunk-0 B)
//      (the last rank starts with a plain chunk-0 F and chunk-1 B)
//   5. p-r-1 x (chunk-1 B, chunk-1 F & chunk-0 B)
//   6. r+1 x (chunk-1 backward, chunk-0 backward), switching from B to I + deferred W halfway
//   7. p-r-1 x (pending W, chunk-0 backward)   8. the W still pending
// Needs m >= 2p (at least as many micro-batches as stages), as torch requires.
#include <deque>
#include <utility>

#include "generator_support.hpp"
#include "pipescope/core/generators.hpp"

namespace pipescope {

ComputeOrder dualpipev_order(const ScheduleParams& params) {
  using namespace generator_support;
  const char* name = "dualpipev";
  require_two_chunks(name, params);
  const int p = params.num_ranks;
  const int m = params.num_micro_batches;
  if (m < 2 * p)
    refuse(name, "needs at least as many micro-batches as stages (m >= 2p = " + std::to_string(2 * p) +
                     "), as torch ScheduleDualPipeV requires; got --micro-batches " + std::to_string(m));
  ComputeOrder order = empty_order(name, p, m, v_placement(p));

  for (int r = 0; r < p; ++r) {
    const int chunk0 = r;
    const int chunk1 = 2 * p - 1 - r;
    auto& ops = order.per_rank[r];
    ops.reserve(6 * static_cast<std::size_t>(m));
    // Next micro-batch per (local chunk, forward or backward); W runs from a FIFO of I.
    int next_forward[2] = {0, 0};
    int next_backward[2] = {0, 0};
    std::deque<std::pair<int, int>> pending_weights;  // (stage, micro-batch)
    auto local = [&](int stage) { return stage == chunk0 ? 0 : 1; };

    auto forward = [&](int stage) {
      ops.push_back(compute(Op::ForwardPass, stage, next_forward[local(stage)]++));
    };
    auto full_backward = [&](int stage) {
      ops.push_back(compute(Op::BackwardPass, stage, next_backward[local(stage)]++));
    };
    auto input_backward = [&](int stage) {
      const int micro_batch = next_backward[local(stage)]++;
      ops.push_back(compute(Op::BackwardInput, stage, micro_batch));
      pending_weights.emplace_back(stage, micro_batch);
    };
    auto backward = [&](int stage, bool split) { split ? input_backward(stage) : full_backward(stage); };
    auto pending_weight = [&] {
      if (pending_weights.empty()) return;
      ops.push_back(compute(Op::BackwardWeight, pending_weights.front().first, pending_weights.front().second));
      pending_weights.pop_front();
    };
    auto overlapped = [&](int forward_stage, int backward_stage) {
      forward(forward_stage);
      ops.back().overlaps_next_backward = true;
      full_backward(backward_stage);
    };

    for (int i = 0; i < 2 * (p - r - 1); ++i) forward(chunk0);
    for (int i = 0; i < r + 1; ++i) {
      forward(chunk0);
      forward(chunk1);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      input_backward(chunk1);
      pending_weight();
      forward(chunk1);
    }
    const int steady = m - 2 * p + r + 1;
    for (int i = 0; i < steady; ++i) {
      if (i == 0 && r == p - 1) {
        forward(chunk0);
        full_backward(chunk1);
      } else {
        overlapped(chunk0, chunk1);
      }
      overlapped(chunk1, chunk0);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      full_backward(chunk1);
      overlapped(chunk1, chunk0);
    }
    bool split = false;
    const int drain = r + 1;
    for (int i = 0; i < drain; ++i) {
      if (i == drain / 2 && r % 2 == 1) split = true;
      backward(chunk1, split);
      if (i == drain / 2 && r % 2 == 0) split = true;
      backward(chunk0, split);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      pending_weight();
      backward(chunk0, split);
    }
    while (!pending_weights.empty()) pending_weight();
  }
  return order;
}

}  // namespace pipescope
