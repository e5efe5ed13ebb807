// One transformer layer (and the head) of one micro-batch on one tensor-parallel rank, as
// Megatron splits it: the rank's matrix products priced by their shapes (efficiency.hpp), the
// tensor-parallel collectives on the node's link, and the activations it holds under each
// recomputation (Korthikanti et al. 2022, Table 2, generalised to grouped-query attention and
// gated MLPs: docs/MODEL.md). derive_costs adds these up per stage.
#pragma once

#include <cstdint>
#include <string_view>

#include "pipescope/sim/model.hpp"

namespace pipescope::sim {

// Seconds of one layer on one tensor-parallel rank.
struct LayerTimes {
  double f_s = 0;  // forward compute
  double b_s = 0;  // backward for inputs (the attention core's backward included)
  double w_s = 0;  // backward for weights
  // What the backward first runs again: selective, the attention core's forward; full, the
  // whole forward (its collectives apart, in recompute_tp_s).
  double recompute_s = 0;
  double recompute_tp_s = 0;
  // Tensor-parallel collectives (2 all-reduces per pass, or 2 all-gathers and 2
  // reduce-scatters with sequence parallelism) on the compute stream; of the backward's, a fused
  // backward hides tp_b_hidden_s.
  double tp_f_s = 0;
  double tp_b_s = 0;
  // Of tp_b_s, what a fused backward hides behind the weight-gradient products: Megatron starts
  // the input gradient's all-reduce (reduce-scatter with SP) of each column-parallel linear
  // asynchronously and computes that linear's weight gradient meanwhile. A split backward (B,
  // then W later) has no weight gradient to hide it behind.
  double tp_b_hidden_s = 0;
};
LayerTimes layer_times(const ModelSpec& model, const DeviceSpec& device, const LinkSpec& tensor_parallel_link,
                       const ParallelConfig& parallel);

// Seconds of the head (vocabulary-parallel logits and the cross-entropy loss) on the last
// stage's tensor-parallel rank. The loss's small all-reduces (sb floats each) are left out.
struct HeadTimes {
  double f_s = 0;
  double b_s = 0;
  double w_s = 0;
};
HeadTimes head_times(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel);

// Bytes of one layer of one micro-batch on one tensor-parallel rank (16-bit activations, 1-byte
// dropout masks).
struct LayerMemory {
  std::int64_t held_bytes = 0;  // from F until B under the recomputation
  // Recomputation rebuilds one layer at a time in the backward: its rebuilt activations (0
  // without recomputation).
  std::int64_t rebuilt_bytes = 0;
  std::int64_t weight_stash_bytes = 0;  // from B until W: Zero Bubble's 32 sbh, divided by T
};
LayerMemory layer_memory(const ModelSpec& model, const ParallelConfig& parallel);

// A memory figure of the first-principles model, computed in double, as whole bytes. Refused
// beyond 2^60 bytes (1 EiB: a model and micro-batch no device holds), naming the figure and the
// sizes it comes from: a plain conversion would wrap it to a small or negative figure that
// "fits" in memory.
std::int64_t memory_figure_bytes(double bytes, std::string_view figure, const ModelSpec& model, const ParallelConfig& parallel);

// Parameters of one layer on one tensor-parallel rank: the matrices and the column-parallel
// biases divided by T, the layer norms and the row-parallel biases whole.
std::int64_t layer_parameters_on_rank(const ModelSpec& model, int tensor_parallel);

// Ring collectives of `bytes` (the whole tensor) over `group_size` GPUs on `link`: an
// all-gather or a reduce-scatter is (n-1) steps of bytes/n; an all-reduce is both.
double ring_all_gather_s(double bytes, int group_size, const LinkSpec& link);

}  // namespace pipescope::sim
