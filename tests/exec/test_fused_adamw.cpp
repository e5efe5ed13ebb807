// FusedAdamW against LibTorch's AdamW. Scenario: three float32 parameters ([64, 32], [32] and a
// [7, 3] one whose gradient is left undefined on step 2), lr 1e-2, weight decay 0.1, the same
// seeded gradients for both optimizers over 5 steps: the weights and both moment buffers agree to
// 1e-6 relative (1e-7 absolute near zero: the arithmetic is the same per element, only the
// rounding of fused multiply-adds may differ), the skipped parameter stays untouched on its
// skipped step, the step counts agree, and a state saved by one optimizer loads into the other
// and continues identically. A double parameter (not fusable) goes through AdamW::step and
// matches exactly.
// LibTorch's serialization headers bring glog, whose CHECK macro must come before Catch's.
#include <torch/optim/adamw.h>
#include <torch/serialize.h>

#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <type_traits>

#include "adamw_state_key.hpp"
#include "fused_adamw.hpp"

using pipescope::exec::adamw_state_key;
using pipescope::exec::FusedAdamW;

namespace {

std::vector<at::Tensor> make_parameters(at::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  std::vector<at::Tensor> params;
  for (auto sizes : std::vector<std::vector<std::int64_t>>{{64, 32}, {32}, {7, 3}})
    params.push_back(at::randn(sizes, gen, at::TensorOptions().dtype(dtype)).requires_grad_());
  return params;
}

void set_gradients(std::vector<at::Tensor>& params, int step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + step);
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (i == 2 && step == 2) {
      params[i].mutable_grad() = at::Tensor();
      continue;
    }
    params[i].mutable_grad() = at::randn(params[i].sizes(), gen, params[i].options());
  }
}

const torch::optim::AdamWParamState& state_of(const torch::optim::Optimizer& optimizer, const at::Tensor& p) {
  using Key = std::decay_t<decltype(optimizer.state())>::key_type;
  return static_cast<const torch::optim::AdamWParamState&>(*optimizer.state().at(adamw_state_key<Key>(p)));
}

torch::optim::AdamWOptions options() { return torch::optim::AdamWOptions(1e-2).weight_decay(0.1); }

}  // namespace

TEST_CASE("FusedAdamW follows AdamW step for step") {
  auto reference_params = make_parameters(at::kFloat);
  auto fused_params = make_parameters(at::kFloat);
  torch::optim::AdamW reference(reference_params, options());
  FusedAdamW fused(fused_params, options());
  for (int step = 0; step < 5; ++step) {
    set_gradients(reference_params, step);
    set_gradients(fused_params, step);
    const at::Tensor skipped_before = fused_params[2].detach().clone();
    reference.step();
    fused.step();
    if (step == 2) CHECK(at::equal(fused_params[2], skipped_before));
    for (std::size_t i = 0; i < fused_params.size(); ++i) {
      INFO("step " << step << ", parameter " << i);
      CHECK(at::allclose(fused_params[i], reference_params[i], 1e-6, 1e-7));
      const auto& a = state_of(fused, fused_params[i]);
      const auto& b = state_of(reference, reference_params[i]);
      CHECK(a.step() == b.step());
      CHECK(at::allclose(a.exp_avg(), b.exp_avg(), 1e-6, 1e-7));
      CHECK(at::allclose(a.exp_avg_sq(), b.exp_avg_sq(), 1e-6, 1e-9));
    }
  }
  CHECK(state_of(fused, fused_params[2]).step() == 4);
  CHECK(state_of(fused, fused_params[0]).step() == 5);
}

TEST_CASE("FusedAdamW state saves and loads as AdamW state") {
  auto params = make_parameters(at::kFloat);
  FusedAdamW fused(params, options());
  for (int step = 0; step < 3; ++step) {
    set_gradients(params, step);
    fused.step();
  }
  std::stringstream archive;
  torch::save(fused, archive);

  auto restored_params = make_parameters(at::kFloat);
  for (std::size_t i = 0; i < params.size(); ++i) {
    at::NoGradGuard no_grad;
    restored_params[i].copy_(params[i]);
  }
  torch::optim::AdamW restored(restored_params, options());
  torch::load(restored, archive);
  set_gradients(params, 3);
  set_gradients(restored_params, 3);
  fused.step();
  restored.step();
  for (std::size_t i = 0; i < params.size(); ++i) CHECK(at::allclose(params[i], restored_params[i], 1e-6, 1e-7));
}

TEST_CASE("FusedAdamW leaves parameters it cannot fuse to AdamW") {
  auto reference_params = make_parameters(at::kDouble);
  auto fused_params = make_parameters(at::kDouble);
  torch::optim::AdamW reference(reference_params, options());
  FusedAdamW fused(fused_params, options());
  for (int step = 0; step < 3; ++step) {
    set_gradients(reference_params, step);
    set_gradients(fused_params, step);
    reference.step();
    fused.step();
  }
  for (std::size_t i = 0; i < fused_params.size(); ++i) CHECK(at::equal(fused_params[i], reference_params[i]));
}
