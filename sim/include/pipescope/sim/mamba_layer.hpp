// One Mamba-2 layer of a hybrid model (Megatron's MambaLayer: a norm, then MambaMixer) of one
// micro-batch on one rank: its two projections priced by shape and precision like a transformer
// layer's linears, the state-space scan in chunks as the small products it is made of plus the
// bytes it moves, the convolution and the gated norm as element-wise work; its activations under
// each recomputation; its parameters on the rank (docs/MODEL.md, "Hybrid models").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pipescope/sim/layer_costs.hpp"
#include "pipescope/sim/model.hpp"

namespace pipescope::sim {

// Seconds of the layer's passes, without tensor parallelism's collectives (the caller gives it a
// transformer sublayer's: one all-gather before the input projection, one reduce-scatter after
// the output projection, as attention's).
LayerTimes mamba_layer_times(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel);

// FLOPs of the chunked scan's products for one token, forward, the causal half of each chunk's
// own block counted (its backward does about twice).
double mamba_scan_flops_per_token(const ModelSpec& model);

LayerMemory mamba_layer_memory(const ModelSpec& model, const ParallelConfig& parallel);

// The layer's parameters on one tensor-parallel rank (the projections, the convolution and the
// per-head figures split by T; the layer's own norm whole), and of those its matrices.
std::int64_t mamba_layer_parameters_on_rank(const ModelSpec& model, int tensor_parallel);
std::int64_t mamba_layer_matrix_parameters_on_rank(const ModelSpec& model, int tensor_parallel);

// Why tensor parallelism `T` cannot split `model`'s Mamba layers (T not dividing the heads or the
// groups, as Megatron's MambaMixer requires), naming the option; nothing when it can.
std::optional<std::string> mamba_tensor_parallel_problem(const ModelSpec& model, int tensor_parallel);

}  // namespace pipescope::sim
