// Megatron's interleaved 1F1B. Rank r holds stages r, r + p, ..., r + (v-1)p (loop placement)
// and walks one sequence of m*v virtual micro-batches: groups of p micro-batches go through
// chunk 0, then chunk 1, ..., forwards in chunk order and backwards in reverse chunk order.
// Warm-up is (p - r - 1) * 2 + (v - 1) * p forwards (all of them when m == p), then one
// forward and one backward alternate, then the remaining backwards drain.
#include <algorithm>

#include "generator_support.hpp"
#include "pipescope/core/generators.hpp"

namespace pipescope {

ComputeOrder interleaved_1f1b_order(const ScheduleParams& params) {
  using namespace generator_support;
  const char* name = "interleaved-1f1b";
  check_sizes(name, params);
  const int p = params.num_ranks;
  const int m = params.num_micro_batches;
  const int v = loop_chunks(params);
  if (v >= 1) check_fits(name, params, v);
  if (v < 2)
    refuse(name, "needs --chunks of at least 2 model chunks per rank (with 1 chunk it is 1f1b); got "
                 "--chunks " + std::to_string(v));
  if (m % p != 0)
    refuse(name, "Megatron's interleaved schedule needs the number of micro-batches to be a multiple "
                 "of the number of pipeline ranks (it sends groups of p micro-batches through each "
                 "chunk); got --micro-batches " + std::to_string(m) + " with --stages " + std::to_string(p));

  ComputeOrder order = empty_order(name, p, m, loop_placement(p, v));
  const long long total = static_cast<long long>(m) * v;
  const long long group = static_cast<long long>(p) * v;
  auto micro_batch_of = [&](long long k) { return static_cast<int>((k / group) * p + k % p); };
  auto chunk_of = [&](long long k, bool forward) {
    const int chunk = static_cast<int>((k % group) / p);
    return forward ? chunk : v - 1 - chunk;
  };

  for (int r = 0; r < p; ++r) {
    long long warmup = m == p ? total : std::min<long long>(2LL * (p - r - 1) + static_cast<long long>(v - 1) * p, total);
    auto& ops = order.per_rank[r];
    ops.reserve(static_cast<std::size_t>(2 * total));
    auto forward = [&](long long k) {
      ops.push_back(compute(Op::ForwardPass, chunk_of(k, true) * p + r, micro_batch_of(k)));
    };
    auto backward = [&](long long k) {
      ops.push_back(compute(Op::BackwardPass, chunk_of(k, false) * p + r, micro_batch_of(k)));
    };
    for (long long k = 0; k < warmup; ++k) forward(k);
    const long long steady = total - warmup;
    for (long long i = 0; i < steady; ++i) {
      forward(warmup + i);
      backward(i);
    }
    for (long long i = steady; i < total; ++i) backward(i);
  }
  return order;
}

}  // namespace pipescope
