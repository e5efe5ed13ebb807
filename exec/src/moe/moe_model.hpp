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

// A MoE block as the expert-call probe (moe/expert_call_probe.hpp) drives it: one of the experts
// this rank holds, on rows given to it, without the block's routing, its all-to-all or the call
// log (the probe times the call itself).
class MoeBlock : public Layer {
 public:
  // Local expert `local` (0: the first this rank holds) on `rows` (rows x hidden), recorded by
  // autograd as the block's own calls are.
  virtual at::Tensor run_local_expert(int local, const at::Tensor& rows) = 0;
  // That expert's parameters: the weights whose gradients its backward computes.
  virtual TensorList local_expert_parameters(int local) const = 0;
};

}  // namespace pipescope::exec
