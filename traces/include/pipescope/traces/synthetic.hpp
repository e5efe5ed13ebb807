// Synthetic 1F1B traces: a pipeline of `num_ranks` stages running `num_micro_batches`
// micro-batches with given forward, backward and transfer times, and an optional
// deterministic per-operation jitter that makes a plausible "measured" counterpart of the
// same run. For demos (ppview --demo), benchmarks and tests; real traces come from
// `ppsim simulate --trace` and `pprun --trace`.
#pragma once

#include <cstdint>
#include <string>

#include "pipescope/traces/trace.hpp"

namespace pipescope::traces {

struct SyntheticPipeline {
  int num_ranks = 4;
  int num_micro_batches = 8;
  double forward_us = 100;
  double backward_us = 200;
  double transfer_us = 10;
  double optimizer_us = 50;
  std::int64_t activation_bytes = 64LL << 20;  // held from a micro-batch's F until its B
  std::int64_t transfer_bytes = 4LL << 20;
  // 0: the exact list schedule ("predicted"). Above 0: each duration is scaled by a factor in
  // [1 - jitter, 1 + jitter], plus `slow_rank` running `slow_factor` times slower ("measured").
  double jitter = 0;
  int slow_rank = -1;
  double slow_factor = 1;
  std::uint64_t seed = 1;
  std::string source = "predicted";
};

// Events per rank: F, B, one send and one receive per micro-batch between neighbours, and
// one optimizer step; memory counters after each F and B; a flow per transfer.
Trace make_1f1b_trace(const SyntheticPipeline& pipeline);

}  // namespace pipescope::traces
