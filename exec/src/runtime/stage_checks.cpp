// The checks around a stage's forward (see stage_checks.hpp).
#include "runtime/stage_checks.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "runtime/wire_format.hpp"

namespace pipescope::exec::runtime {

void check_outputs(const RankContext& ctx, const StageState& st, const TensorList& outputs,
                   const std::vector<std::string>& names) {
  if (outputs.empty()) ctx.fail_here(fmt::format("{} returned no output tensors", ctx.stage_name(st)));
  for (std::size_t i = 0; i < outputs.size(); ++i)
    if (!outputs[i].defined())
      ctx.fail_here(fmt::format("{}: output {} of layer '{}' is not a tensor (undefined)", ctx.stage_name(st), i,
                                ctx.layer_name(st.module->end_layer() - 1)));
  if (ctx.dynamic_shapes) return;
  const auto& declared = ctx.model.boundary.at(static_cast<std::size_t>(st.module->end_layer()));
  const std::string next = st.is_last ? std::string("the model output")
                                      : fmt::format("the input of layer '{}'", ctx.layer_name(st.module->end_layer()));
  if (declared.size() != outputs.size())
    ctx.fail_here(fmt::format("{} gives {} output tensor(s), but {} is declared with {}", ctx.stage_name(st),
                              outputs.size(), next, declared.size()));
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const auto& spec = declared[i];
    const std::string given_name = i < names.size() ? names[i] : std::string();
    if (!spec.name.empty() && given_name != spec.name)
      ctx.fail_here(fmt::format("{}: output tensor {} is named '{}', but {} is declared with '{}' there",
                                ctx.stage_name(st), i, given_name, next, spec.name));
    const at::ScalarType dtype = wire_dtype(spec.dtype, ctx.options.dtype);  // bf16 in a bf16 run
    if (outputs[i].sizes() != at::IntArrayRef(spec.sizes) || outputs[i].scalar_type() != dtype)
      ctx.fail_here(fmt::format(
          "{}: output tensor {} has shape {} {}, but {} is declared as {} {} (shape mismatch between stages)",
          ctx.stage_name(st), i, shape_text(outputs[i].sizes()), c10::toString(outputs[i].scalar_type()), next,
          shape_text(spec.sizes), c10::toString(dtype)));
  }
}

void check_input_keys(const RankContext& ctx, const StageState& st, const std::vector<std::string>& names,
                      std::size_t count) {
  // The skip tensors the layer pops come after what the stage receives.
  const auto& pops = ctx.model.layers.at(static_cast<std::size_t>(st.module->first_layer())).pop;
  std::vector<std::string> keys;
  for (const auto& key : st.module->input_keys())
    if (std::find(pops.begin(), pops.end(), key) == pops.end()) keys.push_back(key);
  if (keys.empty()) return;
  if (auto wrong = key_mismatch(keys, names, count); !wrong.empty()) {
    const std::string from =
        st.is_first ? std::string("from the data loader") : fmt::format("from stage {}", st.stage - 1);
    ctx.fail_here(fmt::format("{} receives the keys [{}] {}, but its layer '{}' takes [{}]: {}", ctx.stage_name(st),
                              fmt::join(names, ", "), from, st.module->first_layer_name(), fmt::join(keys, ", "),
                              wrong));
  }
}

void take_skip_outputs(const RankContext& ctx, const StageState& st, SkipTensors& left, MicroBatchState& state) {
  state.skip_outputs.clear();
  for (const auto& r : ctx.skip_routes) {
    if (r.from_stage != st.stage || r.to_stage == st.stage) continue;
    auto it = left.find(r.name);
    if (it == left.end())
      ctx.fail_here(fmt::format("{}: layer '{}' did not stash the skip tensor '{}'", ctx.stage_name(st),
                                ctx.layer_name(r.from_layer), r.name));
    state.skip_outputs[r.name] = it->second;
    left.erase(it);
  }
  if (!left.empty())
    ctx.fail_here(
        fmt::format("{}: the skip tensor '{}' is left over after the stage's layers (received but not popped)",
                    ctx.stage_name(st), left.begin()->first));
}

at::Tensor compute_loss(const RankContext& ctx, const StageState& st, const TensorList& outputs,
                        const at::Tensor& labels) {
  if (!ctx.model.loss)
    ctx.fail_here(fmt::format("{} is the last stage but the model has no loss function", ctx.stage_name(st)));
  at::Tensor loss = ctx.model.loss(outputs, labels);
  if (!loss.defined() || loss.numel() != 1)
    ctx.fail_here(fmt::format("{}: the loss function must return one number, not a tensor of shape {}",
                              ctx.stage_name(st),
                              loss.defined() ? shape_text(loss.sizes()) : std::string("(undefined)")));
  return loss.reshape({});
}

}  // namespace pipescope::exec::runtime
