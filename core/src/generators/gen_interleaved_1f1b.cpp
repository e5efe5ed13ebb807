// Megatron's interleaved 1F1B (megatron-core schedules.py, forward_backward_pipelining_with_
// interleaving). Rank r holds stages r, r + p, ..., r + (v-1)p (loop placement) and walks one
// table of m*v virtual micro-batches: groups of G micro-batches (`microbatch_group_size_per_vp_
// stage`, default p) go through chunk 0, then chunk 1, ..., and a last group too short for
// another one takes all the micro-batches left (get_schedule_table). The k-th forward runs entry
// k; the k-th backward runs entry k in the reverse chunk. Warm-up is (p - r - 1) * 2 + (v - 1) * G
// forwards (all of them when that reaches m*v), then one forward and one backward alternate,
// then the remaining backwards drain. With Megatron's --overlap-moe-expert-parallel-comm every
// rank runs one more warm-up forward (get_pp_rank_microbatches: "to ensure the forward and
// backward computations are independent in all 1f1b steps"), still capped at m*v; the steady
// state and the drain are the same walk, shifted by one.
//
// megatron-core 0.1.0 .. 0.9.x (and the Megatron-LM of 2021 it came from) had no group size (G
// was p), refused m not a multiple of p, and ran every forward first whenever m == p; 0.10.0
// brought the table and dropped that rule (tests/golden/megatron/README.md).
#include <algorithm>
#include <utility>
#include <vector>

#include "generator_support.hpp"
#include "pipescope/core/generators.hpp"

namespace pipescope {
namespace {

using generator_support::refuse;

// The group size Megatron would run with, or a refusal with its reason.
int checked_group_size(const std::string& name, const ScheduleParams& params, MegatronRelease release) {
  const int p = params.num_ranks;
  const int m = params.num_micro_batches;
  const int given = params.microbatch_group_size;
  const std::string sizes = "--micro-batches " + std::to_string(m) + " with --stages " + std::to_string(p);
  if (release == MegatronRelease::v0_1) {
    if (given != 0 && given != p)
      refuse(name, "megatron-core before 0.10 has no micro-batch group size (it is always --stages, " +
                       std::to_string(p) + "), so --microbatch-group-size-per-vp-stage " + std::to_string(given) +
                       " cannot be honoured (use interleaved-1f1b, or leave it out)");
    if (m % p != 0)
      refuse(name,
             "megatron-core before 0.10 needs the number of micro-batches to be a multiple of the number of "
             "pipeline ranks (it sends groups of p micro-batches through each chunk); got " +
                 sizes);
    return p;
  }
  const int group = given != 0 ? given : p;
  const std::string option = given != 0 ? "--microbatch-group-size-per-vp-stage " + std::to_string(group)
                                        : "the micro-batch group size (--microbatch-group-size-per-vp-stage, default "
                                          "--stages, " +
                                              std::to_string(group) + ")";
  if (group < p || group > m)
    refuse(name, option +
                     " must lie between --stages and --micro-batches, as Megatron-Core requires (\"the number of "
                     "contiguous micro-batches in a virtual pipeline stage should range in [PP=" +
                     std::to_string(p) + ", M=" + std::to_string(m) + "]\"); got " + sizes);
  const int remainder = m % group;
  if (remainder > 0 && remainder < p)
    refuse(name, "--micro-batches " + std::to_string(m) + " in groups of " + std::to_string(group) +
                     " leaves a remainder of " + std::to_string(remainder) +
                     "; Megatron-Core requires it to be 0 or at least --stages (" + std::to_string(p) +
                     "), since a shorter last group leaves dependency bubbles (change --micro-batches or " + option +
                     ")");
  return group;
}

// Megatron's get_schedule_table: (micro-batch, chunk) of each virtual micro-batch, in order.
std::vector<std::pair<int, int>> schedule_table(int m, int v, int group) {
  std::vector<std::pair<int, int>> table;
  table.reserve(static_cast<std::size_t>(m) * v);
  for (int first = 0; first < m; first += group) {
    const int last = first + group >= m ? m : first + group;  // a short remainder joins the last group
    for (int chunk = 0; chunk < v; ++chunk)
      for (int micro_batch = first; micro_batch < last; ++micro_batch) table.emplace_back(micro_batch, chunk);
    if (last == m) break;
  }
  return table;
}

}  // namespace

ComputeOrder megatron_interleaved_order(const ScheduleParams& params, MegatronRelease release,
                                        const std::string& name) {
  using namespace generator_support;
  check_sizes(name, params);
  const int p = params.num_ranks;
  const int m = params.num_micro_batches;
  const int v = loop_chunks(params);
  if (v >= 1) check_fits(name, params, v);
  if (v < 2)
    refuse(name,
           "needs --chunks of at least 2 model chunks per rank (with 1 chunk it is 1f1b); got "
           "--chunks " +
               std::to_string(v));
  const int group = checked_group_size(name, params, release);
  if (params.overlap_moe_expert_parallel_comm && release == MegatronRelease::v0_1)
    refuse(name, "megatron-core before 0.10 has no --overlap-moe-expert-parallel-comm (use interleaved-1f1b)");

  ComputeOrder order = empty_order(name, p, m, loop_placement(p, v));
  const std::vector<std::pair<int, int>> table = schedule_table(m, v, group);
  const long long total = static_cast<long long>(table.size());
  for (int r = 0; r < p; ++r) {
    long long warmup = 2LL * (p - r - 1) + static_cast<long long>(v - 1) * group;
    if (release == MegatronRelease::v0_1 && m == p) warmup = total;  // the old all-forwards-first rule
    if (params.overlap_moe_expert_parallel_comm) ++warmup;
    warmup = std::min(warmup, total);
    auto& ops = order.per_rank[r];
    ops.reserve(static_cast<std::size_t>(2 * total));
    auto forward = [&](long long k) {
      const auto [micro_batch, chunk] = table[static_cast<std::size_t>(k)];
      ops.push_back(compute(Op::ForwardPass, chunk * p + r, micro_batch));
    };
    auto backward = [&](long long k) {
      const auto [micro_batch, chunk] = table[static_cast<std::size_t>(k)];
      ops.push_back(compute(Op::BackwardPass, (v - 1 - chunk) * p + r, micro_batch));
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

ComputeOrder interleaved_1f1b_order(const ScheduleParams& params) {
  return megatron_interleaved_order(params, kCurrentMegatronRelease, "interleaved-1f1b");
}

}  // namespace pipescope
