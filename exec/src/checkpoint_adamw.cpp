// AdamW's per-parameter state in and out of the optimizer, for checkpoints filed by layer.
#include "checkpoint_adamw.hpp"

#include "adamw_state_key.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <type_traits>

#include "pipescope/core/errors.hpp"

namespace pipescope::exec::checkpoint_detail {
namespace {

template <typename Optimizer>
auto key_of(Optimizer& optimizer, const at::Tensor& p) {
  using Map = std::remove_reference_t<decltype(optimizer.state())>;
  return adamw_state_key<typename Map::key_type>(p);
}

at::Tensor int_tensor(std::int64_t v) { return at::full({1}, v, at::TensorOptions().dtype(at::kLong)); }

}  // namespace

torch::optim::AdamW* as_adamw(torch::optim::Optimizer& optimizer) { return dynamic_cast<torch::optim::AdamW*>(&optimizer); }

bool save_adamw_state(const torch::optim::AdamW& optimizer, const at::Tensor& parameter, torch::serialize::OutputArchive& out) {
  const auto found = optimizer.state().find(key_of(optimizer, parameter));
  if (found == optimizer.state().end()) return false;
  const auto& state = static_cast<const torch::optim::AdamWParamState&>(*found->second);
  out.write("step", int_tensor(state.step()));
  out.write("exp_avg", state.exp_avg().detach().cpu());
  out.write("exp_avg_sq", state.exp_avg_sq().detach().cpu());
  if (state.max_exp_avg_sq().defined()) out.write("max_exp_avg_sq", state.max_exp_avg_sq().detach().cpu());
  return true;
}

void load_adamw_state(torch::optim::AdamW& optimizer, const at::Tensor& parameter, const std::string& name,
                      torch::serialize::InputArchive& in) {
  // A fresh tensor for every read: reading into a defined tensor resizes it in place.
  auto read = [&](const char* key, bool required) {
    at::Tensor value;
    if (!in.try_read(key, value)) {
      if (required) throw UsageError(fmt::format("parameter {} has no AdamW {} in the checkpoint", name, key));
      return value;
    }
    if (key != std::string("step") && !value.sizes().equals(parameter.sizes()))
      throw UsageError(fmt::format("parameter {}: AdamW {} has shape {} in the checkpoint, the parameter {}", name, key,
                                   fmt::join(value.sizes(), "x"), fmt::join(parameter.sizes(), "x")));
    return key == std::string("step") ? value : value.to(parameter.device()).contiguous();
  };
  auto state = std::make_unique<torch::optim::AdamWParamState>();
  state->step(read("step", true).item<std::int64_t>());
  state->exp_avg(read("exp_avg", true));
  state->exp_avg_sq(read("exp_avg_sq", true));
  if (at::Tensor max = read("max_exp_avg_sq", false); max.defined()) state->max_exp_avg_sq(max);
  optimizer.state()[key_of(optimizer, parameter)] = std::move(state);
}

void clear_adamw_state(torch::optim::AdamW& optimizer, const at::Tensor& parameter) {
  optimizer.state().erase(key_of(optimizer, parameter));
}

}  // namespace pipescope::exec::checkpoint_detail
