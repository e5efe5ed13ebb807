// Compute dtypes by name and dynamic loss scaling (see the precision part of runtime.hpp).
#include "pipescope/exec/runtime.hpp"

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"

namespace pipescope::exec {

at::ScalarType parse_compute_dtype(const std::string& text, const std::string& what) {
  if (text == "fp32") return at::kFloat;
  if (text == "bf16") return at::kBFloat16;
  if (text == "fp16") return at::kHalf;
  throw UsageError(fmt::format("{}: unknown dtype '{}' (known: fp32, bf16, fp16)", what, text));
}

std::string compute_dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "fp32";
    case at::kBFloat16: return "bf16";
    case at::kHalf: return "fp16";
    default: return c10::toString(dtype);
  }
}

void check_compute_dtype(at::ScalarType dtype, at::Device device) {
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf)
    throw UsageError(fmt::format("dtype {}: the stages compute in fp32, bf16 or fp16", compute_dtype_name(dtype)));
  // fp16 with loss scaling is the GPU recipe: on the CPU, bf16 (fp32's range, no scaling) is the
  // 16-bit type, and fp16 there is neither faster nor tested.
  if (dtype == at::kHalf && device.is_cpu())
    throw UsageError("dtype fp16 needs a CUDA device (fp16 with loss scaling is a GPU recipe): use bf16 on the CPU");
}

DynamicLossScaler::DynamicLossScaler(LossScaleOptions options) : options_(options), scale_(options.initial_scale) {
  if (!(options_.initial_scale > 0) || !(options_.growth_factor > 1) ||
      !(options_.backoff_factor > 0 && options_.backoff_factor < 1) || options_.growth_interval < 1)
    throw UsageError(fmt::format(
        "loss scaling: initial scale {:g} must be positive, growth factor {:g} above 1, backoff factor {:g} "
        "between 0 and 1 and growth interval {} at least 1",
        options_.initial_scale, options_.growth_factor, options_.backoff_factor, options_.growth_interval));
}

bool DynamicLossScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    clean_steps_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_steps_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    clean_steps_ = 0;
  }
  return true;
}

}  // namespace pipescope::exec
