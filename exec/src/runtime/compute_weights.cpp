// 16-bit compute weights over fp32 masters (see compute_weights.hpp).
#include "runtime/compute_weights.hpp"

#include <unordered_set>

namespace pipescope::exec::runtime {
namespace {

// A weight shared by two layers of one stage is one parameter object: cast it once.
TensorList distinct_parameters(const StageModule& module) {
  TensorList out;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& p : module.parameter_tensors())
    if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  return out;
}

}  // namespace

void use_compute_weights(StageState& st, at::ScalarType compute_dtype) {
  if (compute_dtype == at::kFloat || !st.masters.empty()) return;
  at::NoGradGuard no_grad;
  for (auto& p : distinct_parameters(*st.module)) {
    // The master keeps the fp32 storage; set_data gives the parameter object the copy's (and
    // resets its cached gradient accumulator, whose dtype changes with it).
    at::Tensor master = p.detach();
    p.set_data(master.to(compute_dtype));
    st.masters.push_back(std::move(master));
  }
}

void restore_master_weights(StageState& st) {
  if (st.masters.empty()) return;
  TensorList params = distinct_parameters(*st.module);
  for (std::size_t i = 0; i < params.size(); ++i) params[i].set_data(st.masters[i]);
  st.masters.clear();
}

TensorList floats_as(const TensorList& tensors, at::ScalarType dtype) {
  TensorList out;
  out.reserve(tensors.size());
  for (const auto& t : tensors)
    out.push_back(t.defined() && at::isFloatingType(t.scalar_type()) && t.scalar_type() != dtype ? t.to(dtype) : t);
  return out;
}

at::Tensor fp32_gradient(const at::Tensor& grad, const at::Tensor& parameter) {
  if (!grad.defined()) return at::zeros_like(parameter, at::TensorOptions().dtype(at::kFloat));
  return grad.scalar_type() == at::kFloat ? grad : grad.to(at::kFloat);
}

}  // namespace pipescope::exec::runtime
