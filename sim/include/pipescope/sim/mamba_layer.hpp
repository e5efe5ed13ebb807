// One Mamba-2 layer of a hybrid model (Megatron's MambaLayer: a norm, then MambaMixer) of one
// micro-batch on one rank: its two projections priced by shape and precision like a transformer
// layer's linears, the state-space scan in chunks as the small products it is made of plus the
// bytes it moves, the convolution and the gated norm as element-wise work; its activations under
// each recomputation; its parameters on the rank (docs/MODEL.md, "Hybrid models").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pipescope/sim/expert_layer.hpp"
#include "pipescope/sim/layer_costs.hpp"
#include "pipescope/sim/model.hpp"

namespace pipescope::sim {

// Seconds of the layer's passes, without tensor parallelism's collectives (the caller gives it a
// transformer sublayer's: one all-gather before the input projection, one reduce-scatter after
// the output projection, as attention's).
LayerTimes mamba_layer_times(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel);

// The rate chunked linear-recurrence kernels run their products at on `device`: Mamba-2's
// chunk-scan kernel's measured 134 TFLOP/s on an H100-class GPU, scaled by the BF16 peak.
double chunked_scan_flops_per_s(const DeviceSpec& device);

// FLOPs of the chunked scan's products for one token, forward, the causal half of each chunk's
// own block counted (its backward does about twice).
double mamba_scan_flops_per_token(const ModelSpec& model);

LayerMemory mamba_layer_memory(const ModelSpec& model, const ParallelConfig& parallel);

// The layer's parameters on one tensor-parallel rank (the projections, the convolution and the
// per-head figures split by T; the layer's own norm whole), and of those its matrices.
std::int64_t mamba_layer_parameters_on_rank(const ModelSpec& model, int tensor_parallel);
std::int64_t mamba_layer_matrix_parameters_on_rank(const ModelSpec& model, int tensor_parallel);

// Context parallelism over a Mamba layer (Megatron's MambaContextParallel): all-to-alls over the
// C ranks turn the rank's share of the sequence into the whole sequence of a C-th of the heads
// before the convolution and the scan, and back after them; forward and backward seconds (0 at
// C = 1). The group's links: NVLink among `members_per_node` members of a node, the network to the
// rest, at what NCCL's all-to-all achieves on them.
struct MambaContextParallel {
  double forward_s = 0;
  double backward_s = 0;
};
MambaContextParallel mamba_context_parallel(const ModelSpec& model, const DeviceSpec& device,
                                            const ParallelConfig& parallel, const ExpertLinks& group_links,
                                            int members_per_node);
// Why `parallel`'s context parallelism cannot split `model`'s Mamba layers (C not dividing a
// tensor-parallel rank's heads; C neither dividing nor a multiple of its groups), naming the
// option; nothing when it can.
std::optional<std::string> mamba_context_parallel_problem(const ModelSpec& model, const ParallelConfig& parallel);

// Why tensor parallelism `T` cannot split `model`'s Mamba layers (T not dividing the heads or the
// groups, as Megatron's MambaMixer requires), naming the option; nothing when it can.
std::optional<std::string> mamba_tensor_parallel_problem(const ModelSpec& model, int tensor_parallel);

}  // namespace pipescope::sim
