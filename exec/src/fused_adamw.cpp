// One pass per parameter of AdamW's update (see fused_adamw.hpp for why). The arithmetic is
// AdamW's, in the same order per element: decoupled weight decay, the two moment averages, the
// bias-corrected denominator, the step.
#include "fused_adamw.hpp"

#include "adamw_state_key.hpp"

#include <cmath>
#include <memory>
#include <string>

namespace pipescope::exec {
namespace {

bool plain_cpu_float(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous() && !t.is_sparse();
}

}  // namespace

bool FusedAdamW::fusable() const {
  for (const auto& group : param_groups_) {
    if (static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad()) return false;
    for (const auto& p : group.params())
      if (p.grad().defined() && (!plain_cpu_float(p) || !plain_cpu_float(p.grad()))) return false;
  }
  return true;
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  if (!fusable()) return torch::optim::AdamW::step(std::move(closure));
  at::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      // The state lives where AdamW keeps it, under the same key, so save()/load() and a later
      // AdamW::step see the same moments and step count.
      const auto key = adamw_state_key<typename decltype(state_)::key_type>(p);
      auto found = state_.find(key);
      if (found == state_.end()) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        found = state_.emplace(key, std::move(fresh)).first;
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*found->second);
      if (!plain_cpu_float(state.exp_avg()) || !plain_cpu_float(state.exp_avg_sq()))
        throw std::runtime_error("FusedAdamW: optimizer state is not contiguous float32 on the CPU");
      state.step(state.step() + 1);

      const double beta1 = std::get<0>(options.betas()), beta2 = std::get<1>(options.betas());
      const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(state.step()));
      const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(state.step()));
      const float decay = static_cast<float>(1 - options.lr() * options.weight_decay());
      const float b1 = static_cast<float>(beta1), one_minus_b1 = static_cast<float>(1 - beta1);
      const float b2 = static_cast<float>(beta2), one_minus_b2 = static_cast<float>(1 - beta2);
      const float sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
      const float eps = static_cast<float>(options.eps());
      const float step_size = static_cast<float>(options.lr() / bias_correction1);

      float* param = p.data_ptr<float>();
      const float* grad = p.grad().data_ptr<float>();
      float* exp_avg = state.exp_avg().data_ptr<float>();
      float* exp_avg_sq = state.exp_avg_sq().data_ptr<float>();
      const std::int64_t n = p.numel();
      for (std::int64_t i = 0; i < n; ++i) {
        const float g = grad[i];
        const float m = exp_avg[i] * b1 + g * one_minus_b1;
        const float v = exp_avg_sq[i] * b2 + g * g * one_minus_b2;
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
        const float denom = std::sqrt(v) / sqrt_bias_correction2 + eps;
        param[i] = param[i] * decay - step_size * (m / denom);
      }
    }
  }
  return loss;
}

}  // namespace pipescope::exec
