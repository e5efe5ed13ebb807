// One Gated DeltaNet layer of a hybrid model (the linear attention of Qwen3-Next and Qwen3.5;
// Megatron's GatedDeltaNet, its hybrid pattern's 'G') of one micro-batch on one rank: its two
// projections priced by shape and precision, the gated delta rule in chunks as the products it is
// made of at the chunked kernels' measured rate plus the bytes it moves, the convolution, the
// q/k normalisation and the gated norm as element-wise work; its activations under each
// recomputation; its parameters on the rank (docs/MODEL.md, "Hybrid models").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pipescope/sim/layer_costs.hpp"
#include "pipescope/sim/model.hpp"

namespace pipescope::sim {

// Seconds of the layer's passes, without tensor parallelism's collectives (the caller gives it an
// attention block's).
LayerTimes gated_delta_net_times(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel);

// FLOPs of the chunked delta rule for one token, forward, over all value heads (its backward does
// about twice).
double gated_delta_rule_flops_per_token(const ModelSpec& model);

LayerMemory gated_delta_net_memory(const ModelSpec& model, const ParallelConfig& parallel);

// The layer's parameters on one tensor-parallel rank (all but the layer's own norm split by T),
// and of those its matrices.
std::int64_t gated_delta_net_parameters_on_rank(const ModelSpec& model, int tensor_parallel);
std::int64_t gated_delta_net_matrix_parameters_on_rank(const ModelSpec& model, int tensor_parallel);

// Why tensor parallelism `T` cannot split `model`'s Gated DeltaNet layers (T not dividing the key
// and the value heads), naming the option; nothing when it can.
std::optional<std::string> gated_delta_net_tensor_parallel_problem(const ModelSpec& model, int tensor_parallel);
// Context parallelism over Gated DeltaNet layers: not modelled, refused naming the option.
std::optional<std::string> gated_delta_net_context_parallel_problem(const ModelSpec& model,
                                                                    const ParallelConfig& parallel);

}  // namespace pipescope::sim
