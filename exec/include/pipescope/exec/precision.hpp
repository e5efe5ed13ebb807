// Training precision: the dtype the stages compute in, and the dynamic loss scaling that fp16
// needs (torch.amp.GradScaler's rules). In bf16 and fp16 the weights a stage computes with are
// copies of fp32 master weights; the optimizer and its state, the checkpoints and the
// gradient sums over micro-batches stay fp32 (Megatron's --bf16 / --fp16).
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace pipescope::exec {

// "fp32" -> kFloat, "bf16" -> kBFloat16, "fp16" -> kHalf; throws UsageError naming `what` (the
// option or field) and the text for anything else.
at::ScalarType parse_compute_dtype(const std::string& text, const std::string& what);
// The inverse: "fp32", "bf16", "fp16" ("float64" etc. for any other dtype).
std::string compute_dtype_name(at::ScalarType dtype);
// Throws UsageError when `dtype` is not one of the three, or is fp16 on a CPU device.
void check_compute_dtype(at::ScalarType dtype, at::Device device);

// torch.amp.GradScaler's defaults.
struct LossScaleOptions {
  double initial_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;      // after `growth_interval` steps in a row without inf/nan
  double backoff_factor = 0.5;     // after a step with inf/nan gradients (which is skipped)
  int growth_interval = 2000;
};

// Dynamic loss scaling: the loss is multiplied by scale() before the backward, the gradients
// divided by it before the optimizer; a step whose gradients hold inf or nan is skipped and the
// scale backs off, and the scale grows after growth_interval clean steps in a row.
class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(LossScaleOptions options = {});
  double scale() const { return scale_; }
  // After a step's gradients are known (on every rank alike): true when the optimizer may step.
  bool update(bool found_inf);
  int skipped_steps() const { return skipped_; }

 private:
  LossScaleOptions options_;
  double scale_;
  int clean_steps_ = 0;
  int skipped_ = 0;
};

}  // namespace pipescope::exec
