// One transformer layer (and the head) of one micro-batch on one rank, as Megatron splits it over
// tensor- and context-parallel GPUs: the rank's matrix products priced by their shapes and
// precision (efficiency.hpp), the tensor-parallel collectives and the context-parallel key/value
// exchange on their links, and the activations it holds under each recomputation (Korthikanti
// et al. 2022, Table 2, generalised to grouped-query attention, gated MLPs, context parallelism
// and FP8: docs/MODEL.md). derive_costs adds these up per stage.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "pipescope/sim/model.hpp"

namespace pipescope::sim {

// Seconds of one layer on one rank.
struct LayerTimes {
  double f_s = 0;  // forward compute (with the context-parallel exchange it waits for)
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
  // Of f_s and b_s: the context-parallel key/value exchange the attention waits for (what its
  // blocks do not hide).
  double cp_f_s = 0;
  double cp_b_s = 0;
};

// The links a layer's collectives run on: tensor parallelism's (a node's NVLink) and the
// context-parallel group's (NVLink while T x C fit in a node, else the network).
// Context parallelism's groups: the ring (and the all-gather) over all C ranks, and the
// all-to-all groups (a2a, a2a+p2p) at what NCCL's all-to-all achieves on theirs.
struct ContextParallelLinks {
  LinkSpec ring;
  LinkSpec all_to_all;
};
struct LayerLinks {
  LinkSpec tensor_parallel;
  ContextParallelLinks context_parallel;
};
LayerTimes layer_times(const ModelSpec& model, const DeviceSpec& device, const LayerLinks& links,
                       const ParallelConfig& parallel);
// The same with both groups on one link.
LayerTimes layer_times(const ModelSpec& model, const DeviceSpec& device, const LinkSpec& tensor_parallel_link,
                       const ParallelConfig& parallel);

// The tensor-parallel collectives of one layer's pass, each beside the product it feeds or
// follows: with sequence parallelism the all-gather before QKV, the reduce-scatter after the
// attention's output product, the all-gather before the MLP's first product, the reduce-scatter
// after its second (without it, two all-reduces: the same bytes); in the backward the same four
// beside the input-gradient products. `exposed_s` is what the compute stream waits for.
struct TensorParallelPass {
  double exposed_s = 0;
  double hidden_behind_weight_gradients_s = 0;  // of exposed_s, what a fused backward hides
};
TensorParallelPass tensor_parallel_forward(const ModelSpec& model, const DeviceSpec& device, const LinkSpec& link,
                                           const ParallelConfig& parallel);
TensorParallelPass tensor_parallel_backward(const ModelSpec& model, const DeviceSpec& device, const LinkSpec& link,
                                            const ParallelConfig& parallel);

// How much longer each of the four products (QKV, attention output, MLP first, MLP second) takes
// beside --tp-comm-overlap's communication kernels, which run on some of its SMs.
struct UserbufferSlowdown {
  std::array<double, 4> forward{1, 1, 1, 1}, input_gradient{1, 1, 1, 1}, weight_gradient{1, 1, 1, 1};
};
UserbufferSlowdown userbuffer_slowdown(const DeviceSpec& device);

// The context-parallel key/value exchange of one layer's attention that its blocks do not hide:
// forward and backward seconds (0 at C = 1).
struct ContextParallelExchange {
  double forward_s = 0;
  double backward_s = 0;
};
ContextParallelExchange context_parallel_exchange(const ModelSpec& model, const DeviceSpec& device,
                                                  const ContextParallelLinks& links, const ParallelConfig& parallel);
// The same with both groups on one link.
ContextParallelExchange context_parallel_exchange(const ModelSpec& model, const DeviceSpec& device,
                                                  const LinkSpec& link, const ParallelConfig& parallel);

// Seconds of the attention core on the rank (its s/C queries against the keys, causal blocks
// skipped by a fused kernel), forward and backward.
double attention_core_forward_s(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel);
double attention_core_backward_s(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel);

// Seconds of the head (vocabulary-parallel logits and the cross-entropy loss, in BF16 also under
// FP8) on the last stage's rank. The loss's small all-reduces (sb floats each) are left out.
struct HeadTimes {
  double f_s = 0;
  double b_s = 0;
  double w_s = 0;
};
HeadTimes head_times(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel);

// Seconds of one multi-token prediction layer's own work beside its transformer layer and its
// pass of the head (ModelSpec::mtp_num_layers): the norms of the next token's embedding and of
// the hidden state, and the projection of the two joined (2h) to h, column-parallel. Its
// tensor-parallel gathers are left out, as the head's loss all-reduces are.
HeadTimes mtp_projection_times(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel);

// Bytes of one layer of one micro-batch on one rank (16-bit activations, 1-byte dropout masks and
// FP8 copies).
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
std::int64_t memory_figure_bytes(double bytes, std::string_view figure, const ModelSpec& model,
                                 const ParallelConfig& parallel);

// Parameters of one layer on one tensor-parallel rank: the matrices and the column-parallel
// biases divided by T, the layer norms and the row-parallel biases whole.
std::int64_t layer_parameters_on_rank(const ModelSpec& model, int tensor_parallel);
// Of those, the linear layers' weights (what FP8 keeps copies of).
std::int64_t layer_matrix_parameters_on_rank(const ModelSpec& model, int tensor_parallel);

// Ring collectives of `bytes` (the whole tensor) over `group_size` GPUs on `link`: an
// all-gather or a reduce-scatter is (n-1) steps of bytes/n; an all-reduce is both.
double ring_all_gather_s(double bytes, int group_size, const LinkSpec& link);

}  // namespace pipescope::sim
