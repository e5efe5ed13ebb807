// The weights a stage computes with in bf16 or fp16, and the dtype of the tensors around them.
// Between steps a stage's parameters hold its fp32 master weights: what the optimizer steps,
// what its state and the checkpoints are keyed by. A 16-bit step swaps a 16-bit copy into each
// parameter (the same parameter object, so layers, names and optimizer keys do not change) and
// keeps the masters aside; the masters go back before the gradients meet the optimizer, which
// then steps them, and the next step's copies carry its update (Megatron's --bf16). Nothing of
// this happens in fp32.
#pragma once

#include "runtime/rank_context.hpp"

namespace pipescope::exec::runtime {

// Gives the stage's parameters 16-bit copies of their masters (once per step; idempotent).
void use_compute_weights(StageState& st, at::ScalarType compute_dtype);
// Puts the fp32 masters back (idempotent; nothing to do when they are in place).
void restore_master_weights(StageState& st);
// The floating-point tensors converted to `dtype`, the others (token ids, masks) as they are.
TensorList floats_as(const TensorList& tensors, at::ScalarType dtype);
// A weight gradient of one micro-batch in fp32, the dtype the sums over micro-batches are
// kept in (a zero gradient for a parameter the micro-batch did not reach when undefined).
at::Tensor fp32_gradient(const at::Tensor& grad, const at::Tensor& parameter);

}  // namespace pipescope::exec::runtime
