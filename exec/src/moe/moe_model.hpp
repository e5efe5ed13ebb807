// tiny-moe: a GPT-like model whose blocks are mixture-of-experts blocks (see moe_model.cpp).
#pragma once

#include <cstdint>

#include "pipescope/exec/model.hpp"

namespace pipescope::exec {

// Throws UsageError naming the option when the sizes do not fit (top-k above the experts, an
// expert parallelism that does not divide them).
ModelSpec tiny_moe_spec(const ModelConfig& config);

// The layer type of tiny-moe's MoE blocks, and the parameters of all the routed experts of one
// block (wherever they are placed): what the run description gives calibration, so that a
// profile knows the experts' share of a stage's gradients.
inline constexpr const char* kMoeBlockType = "MoeTransformerBlock";
std::int64_t moe_block_expert_parameters(const ModelConfig& config);

}  // namespace pipescope::exec
