// The backward-split probe (see backward_split_probe.hpp).
#include "runtime/backward_split_probe.hpp"

#include <torch/csrc/autograd/autograd.h>

#include "runtime/compute_weights.hpp"
#include "runtime/device_time.hpp"

namespace pipescope::exec::runtime {
namespace {

// For the probe's time, a 16-bit run's stage holds 16-bit copies of its weights, as in a step
// (between steps the parameters hold the fp32 masters); the masters are back afterwards.
class ComputeWeightsScope {
 public:
  ComputeWeightsScope(StageState& st, at::ScalarType compute_dtype) : st_(st), casts_(st.masters.empty()) {
    use_compute_weights(st_, compute_dtype);
  }
  ~ComputeWeightsScope() {
    if (casts_) restore_master_weights(st_);
  }
  ComputeWeightsScope(const ComputeWeightsScope&) = delete;
  ComputeWeightsScope& operator=(const ComputeWeightsScope&) = delete;

 private:
  StageState& st_;
  bool casts_;  // false where the stage held its compute weights already
};

// The input at `from_layer`: the data for the first stage's first layer, else small constants
// of the declared boundary shapes.
TensorList synthetic_input(RankContext& ctx, const MicroBatch& batch, bool from_data, int from_layer) {
  TensorList base;
  if (from_data) {
    for (const auto& t : batch.inputs) base.push_back(ctx.to_device(t));
    return base;
  }
  const auto on_device = at::TensorOptions().device(ctx.device());
  for (const auto& spec : ctx.model.boundary.at(static_cast<std::size_t>(from_layer)))
    base.push_back(at::isFloatingType(spec.dtype) ? at::full(spec.sizes, 0.01, on_device.dtype(spec.dtype))
                                                  : at::zeros(spec.sizes, on_device.dtype(spec.dtype)));
  return base;
}

}  // namespace

// Grad() returns the gradients instead of accumulating them, so weights, gradients, optimizer
// state and data of the run are untouched. The weight gradients are then added into a scratch
// sum, as a step adds every micro-batch's into its gradient sum: that sum reads and writes
// every parameter once more, part of what the weight half costs in a run. A 16-bit run is
// timed as its steps compute: 16-bit weights and inputs, the loss in fp32, each weight gradient
// cast to fp32 before it joins the fp32 sum.
PipelineRuntime::BackwardSplitSamples time_backward_split(RankContext& ctx, StageState& st, int from_layer,
                                                          int repetitions) {
  PipelineRuntime::BackwardSplitSamples samples;
  ComputeDevice& device = *ctx.options.device;
  const at::ScalarType dtype = ctx.options.dtype;
  const ComputeWeightsScope compute_weights(st, dtype);
  const bool from_data = st.is_first && from_layer == st.module->first_layer();
  const MicroBatch batch = make_micro_batch(ctx.model.config, 0);
  const TensorList base = floats_as(synthetic_input(ctx, batch, from_data, from_layer), dtype);
  const at::Tensor labels = batch.labels.defined() ? ctx.to_device(batch.labels) : batch.labels;
  TensorList params;
  for (const auto& p : st.module->parameters())
    if (p.layer >= from_layer) params.push_back(p.tensor);
  TensorList grad_sums;
  for (const auto& p : params) grad_sums.push_back(at::zeros_like(p, at::TensorOptions().dtype(at::kFloat)));
  auto accumulate = [&](const TensorList& grads, std::size_t first_param) {
    for (std::size_t i = 0; i < params.size(); ++i)
      if (grads.at(first_param + i).defined()) grad_sums[i].add_(fp32_gradient(grads[first_param + i], params[i]));
  };
  for (int rep = 0; rep < repetitions; ++rep)
    for (const bool split : {false, true}) {
      TensorList inputs;
      for (const auto& t : base) {
        at::Tensor leaf = t.detach().clone();
        if (!from_data && at::isFloatingType(leaf.scalar_type())) leaf.requires_grad_(true);
        inputs.push_back(leaf);
      }
      const TensorList outputs = st.module->forward_range(inputs, from_layer, st.module->end_layer());
      TensorList roots, seeds, grad_inputs;
      if (st.is_last) {
        roots = {ctx.model.loss(floats_as(outputs, at::kFloat), labels)};
        seeds = {at::ones({}, roots[0].options())};
      } else {
        for (const auto& o : outputs)
          if (o.requires_grad()) {
            roots.push_back(o);
            seeds.push_back(at::full_like(o, 0.01));
          }
      }
      for (const auto& t : inputs)
        if (t.requires_grad()) grad_inputs.push_back(t);
      if (roots.empty()) continue;
      if (!split) {
        TensorList targets = grad_inputs;
        targets.insert(targets.end(), params.begin(), params.end());
        samples.full_us.push_back(device_time_us(device, [&] {
          if (!targets.empty())
            accumulate(torch::autograd::grad(roots, targets, seeds, false, false, true), grad_inputs.size());
        }));
      } else {
        samples.input_us.push_back(device_time_us(device, [&] {
          if (!grad_inputs.empty()) torch::autograd::grad(roots, grad_inputs, seeds, true, false, true);
        }));
        samples.weight_us.push_back(device_time_us(device, [&] {
          if (!params.empty()) accumulate(torch::autograd::grad(roots, params, seeds, false, false, true), 0);
        }));
      }
    }
  return samples;
}

// The first stage never computes an input gradient (its inputs are data); it also times its
// layers after the first as an inner stage would run them, which tells a calibration from a
// single stage (one GPU) how a stage cut from it behind another one splits its backward.
std::vector<PipelineRuntime::BackwardSplitTiming> probe_backward_split(RankContext& ctx, int repetitions) {
  std::vector<PipelineRuntime::BackwardSplitTiming> timings;
  if (!ctx.active->is_training()) return timings;
  for (auto& [s, st] : ctx.stages) {
    // Models without declared shapes have no synthetic input for an inner stage.
    if (!st->is_first && ctx.dynamic_shapes) continue;
    PipelineRuntime::BackwardSplitTiming timing;
    timing.stage = s;
    timing.own = time_backward_split(ctx, *st, st->module->first_layer(), repetitions);
    const int second_layer = st->module->first_layer() + 1;
    if (st->is_first && !ctx.dynamic_shapes && ctx.skip_routes.empty() && second_layer < st->module->end_layer()) {
      try {
        timing.inner = time_backward_split(ctx, *st, second_layer, repetitions);
      } catch (const std::exception&) {
        // A layer that takes named inputs cannot start from positional synthetic ones: the
        // calibration then has no inner split from this stage, which only a single-stage
        // calibration misses. The run's own work is done; its trace must not be lost.
        timing.inner = {};
      }
    }
    timings.push_back(std::move(timing));
  }
  return timings;
}

}  // namespace pipescope::exec::runtime
