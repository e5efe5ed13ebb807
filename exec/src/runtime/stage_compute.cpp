// The stage's forward and backward (see stage_compute.hpp).
#include "runtime/stage_compute.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <mutex>
#include <optional>

#include "runtime/compute_weights.hpp"
#include "runtime/stage_checks.hpp"
#include "runtime/wire_format.hpp"

namespace pipescope::exec::runtime {
namespace {

at::Tensor cpu_rng_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_cpu_rng_state(const at::Tensor& state) {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace

void StageCompute::begin_step(const StepRequest& request) {
  first_sample_ = request.first_sample;
  source_ = request.data;
  pulled_.clear();
  keep_outputs_ = request.keep_outputs;
  for (auto& [s, st] : ctx_.stages) use_compute_weights(*st, ctx_.options.dtype);
  if (keep_outputs_)
    recorder_.result().outputs.assign(static_cast<std::size_t>(ctx_.micro_batch_count()), TensorList{});
}

// The micro-batch of this step: from the source, pulled in micro-batch order and once, or
// the built-in synthetic data (its labels only where a last stage needs them).
MicroBatch StageCompute::micro_batch_data(int micro_batch, bool with_labels) {
  if (!source_) return make_micro_batch(ctx_.model.config, first_sample_ + micro_batch, with_labels);
  while (static_cast<int>(pulled_.size()) <= micro_batch) {
    MicroBatch next = (*source_)();
    if (next.inputs.empty())
      ctx_.fail_here(fmt::format("the data source gave micro-batch {} no input tensors", pulled_.size()));
    pulled_.push_back(std::move(next));
  }
  return pulled_[static_cast<std::size_t>(micro_batch)];
}

void StageCompute::load(int s, int micro_batch) {
  StageState& st = ctx_.stage(s);
  if (!st.is_first && !st.is_last) return;
  MicroBatchState& state = ctx_.micro_batch(s, micro_batch);
  MicroBatch batch = micro_batch_data(micro_batch, st.is_last);
  if (ctx_.device() != at::kCPU) {
    for (auto& t : batch.inputs) t = t.to(ctx_.device());
    if (batch.labels.defined()) batch.labels = batch.labels.to(ctx_.device());
  }
  // The data's floating-point tensors enter in the compute dtype, as they would come from a
  // stage before.
  if (st.is_first) state.received_inputs = floats_as(batch.inputs, ctx_.options.dtype);
  if (st.is_last) state.labels = std::move(batch.labels);
  state.loaded = true;
}

void StageCompute::forward(const Instruction& instr) {
  StageState& st = ctx_.stage(instr.stage);
  MicroBatchState& state = ctx_.micro_batch(instr.stage, instr.micro_batch);
  if ((st.is_first || st.is_last) && !state.loaded) load(instr.stage, instr.micro_batch);
  if (state.received_inputs.empty()) ctx_.fail_here("the forward has no input (no receive or hand-over before it)");
  const bool training = ctx_.active->is_training();
  take_inputs(st, state, training);
  const bool checkpointed = training && ctx_.options.activation_checkpoint_interval > 0;
  run_layers(st, state, training, checkpointed);
  if (!checkpointed) {
    MicroBatchState::Segment whole;
    whole.first_layer = st.module->first_layer();
    whole.end_layer = st.module->end_layer();
    whole.inputs = state.inputs;
    for (const auto& [name, leaf] : state.skip_inputs) whole.inputs.push_back(leaf);  // after the stage inputs
    whole.outputs = state.outputs;
    whole.graph_ready = training;
    state.segments.push_back(std::move(whole));
  }
  state.seeded = false;
  state.input_grads_ready = false;
  pass_on(instr, st, state, training);
}

void StageCompute::take_inputs(StageState& st, MicroBatchState& state, bool training) {
  state.inputs.clear();
  for (auto& t : state.received_inputs) {
    at::Tensor leaf = t.detach();
    if (training && !st.is_first && carries_grad(leaf)) leaf.requires_grad_(true);
    state.inputs.push_back(leaf);
  }
  state.input_names = std::move(state.received_names);
  state.received_inputs.clear();
  state.received_names.clear();
  check_input_keys(ctx_, st, state.input_names, state.inputs.size());
  // The skip tensors this stage's layers pop: leaves, like the stage inputs.
  state.skip_inputs.clear();
  for (const auto& r : ctx_.skip_routes) {
    if (r.to_stage != st.stage || r.from_stage == st.stage) continue;
    auto it = state.received_skips.find(r.name);
    if (it == state.received_skips.end())
      ctx_.fail_here(
          fmt::format("{} needs the skip tensor '{}' of stage {} (stashed by layer '{}'), but it has not arrived (no "
                      "RecvActivation from stage {} before this forward)",
                      ctx_.stage_name(st), r.name, r.from_stage, ctx_.layer_name(r.from_layer), r.from_stage));
    at::Tensor leaf = it->second.detach();
    if (training && carries_grad(leaf)) leaf.requires_grad_(true);
    state.skip_inputs[r.name] = leaf;
  }
  state.received_skips.clear();
}

void StageCompute::run_layers(StageState& st, MicroBatchState& state, bool training, bool checkpointed) {
  SkipTensors skips = state.skip_inputs;
  state.segments.clear();
  std::optional<at::NoGradGuard> no_grad;
  if (!training || checkpointed) no_grad.emplace();
  if (checkpointed) {
    // Keep each run's input and random state; the runs' graphs are rebuilt in the backward.
    NamedTensors x{state.inputs, state.input_names};
    const int step = segment_length(st);
    for (int first = st.module->first_layer(); first < st.module->end_layer(); first += step) {
      MicroBatchState::Segment seg;
      seg.first_layer = first;
      seg.end_layer = std::min(first + step, st.module->end_layer());
      seg.inputs = x.tensors;
      seg.input_names = x.names;
      seg.rng_state = cpu_rng_state();
      x = st.module->forward_range_named(x, seg.first_layer, seg.end_layer, &skips);
      state.segments.push_back(std::move(seg));
    }
    state.outputs = std::move(x.tensors);
    state.output_names = std::move(x.names);
  } else {
    NamedTensors out = st.module->forward_named({state.inputs, state.input_names}, &skips);
    state.outputs = std::move(out.tensors);
    state.output_names = std::move(out.names);
  }
  check_outputs(ctx_, st, state.outputs, state.output_names);
  take_skip_outputs(ctx_, st, skips, state);
  // Inference computes the loss only when the data has labels.
  if (st.is_last && (training || (state.labels.defined() && ctx_.model.loss))) {
    state.loss = loss_in_fp32(st, state);
    recorder_.result().loss_sum += state.loss.item<double>();
    ++recorder_.result().loss_count;
  }
}

void StageCompute::pass_on(const Instruction& instr, StageState& st, MicroBatchState& state, bool training) {
  if (st.is_last && keep_outputs_) {
    TensorList kept;
    for (auto& t : state.outputs) kept.push_back(t.detach());
    recorder_.result().outputs.at(static_cast<std::size_t>(instr.micro_batch)) = std::move(kept);
  }
  if (!st.is_last && ctx_.holds(instr.stage + 1)) {  // hand-over to the next stage on this rank
    TensorList handed;
    for (auto& t : state.outputs) handed.push_back(t.detach());
    MicroBatchState& next = ctx_.micro_batch(instr.stage + 1, instr.micro_batch);
    next.received_inputs = std::move(handed);
    next.received_names = state.output_names;
  }
  for (const auto& r : ctx_.skip_routes)  // skip tensors for later stages on this rank
    if (r.carrier == SkipCarrier::Memory && r.from_stage == instr.stage)
      ctx_.micro_batch(r.to_stage, instr.micro_batch).received_skips[r.name] = state.skip_outputs.at(r.name).detach();
  if (!training) {
    state.inputs.clear();
    state.segments.clear();
  }
}

// The loss of every dtype is computed on fp32 outputs (a 16-bit softmax over a large
// vocabulary loses the small probabilities); the upcast is part of the graph.
at::Tensor StageCompute::loss_in_fp32(StageState& st, MicroBatchState& state) {
  return compute_loss(ctx_, st, floats_as(state.outputs, at::kFloat), state.labels);
}

int StageCompute::segment_length(const StageState& st) const {
  const int layers = st.module->end_layer() - st.module->first_layer();
  const int interval = ctx_.options.activation_checkpoint_interval;
  return interval > 0 ? std::min(interval, layers) : layers;
}

// Activation checkpointing: reruns run `k` from its kept input with the forward's random state,
// now recording its graph; its input is a leaf, so the backward stops there. The backward
// recomputes the runs one at a time, last first, each just before its own gradients, so that
// only one run's activations are rebuilt at a time (as torch.utils.checkpoint and Megatron do,
// and as `ppsim simulate --recompute` models). Rebuilding every run first held the whole
// stage's activations for one micro-batch at the backward: the drop in peak memory was smaller
// than the simulator's by the other runs' activations (docs/ACCURACY.md, "Memory with
// recomputation").
void StageCompute::recompute(StageState& st, MicroBatchState& state, std::size_t k) {
  auto& seg = state.segments[k];
  if (seg.graph_ready) return;
  if (k > 0) {
    TensorList leaves;
    for (auto& t : seg.inputs) {
      at::Tensor leaf = t.detach();
      if (carries_grad(leaf)) leaf.requires_grad_(true);
      leaves.push_back(leaf);
    }
    seg.inputs = std::move(leaves);
  }
  const at::Tensor rng_now = cpu_rng_state();
  set_cpu_rng_state(seg.rng_state);
  seg.outputs = st.module->forward_range_named({seg.inputs, seg.input_names}, seg.first_layer, seg.end_layer).tensors;
  set_cpu_rng_state(rng_now);
  seg.graph_ready = true;
  if (k + 1 == state.segments.size()) {
    state.outputs = seg.outputs;
    if (st.is_last) state.loss = loss_in_fp32(st, state);
  } else {
    seed_from_output_grads(seg);
  }
}

void StageCompute::seed_from_output_grads(MicroBatchState::Segment& seg) {
  seg.roots.clear();
  seg.seeds.clear();
  for (std::size_t i = 0; i < seg.output_grads.size(); ++i)
    if (seg.output_grads[i].defined() && seg.outputs.at(i).requires_grad()) {
      seg.roots.push_back(seg.outputs[i]);
      seg.seeds.push_back(seg.output_grads[i]);
    }
  seg.output_grads.clear();
}

// The gradient seeds of a stage's backward: the scaled loss on the last stage, the received
// output gradients elsewhere (one per floating-point output, in order).
void StageCompute::seed_backward(StageState& st, MicroBatchState& state) {
  if (state.seeded) return;
  auto& last = state.segments.back();
  last.roots.clear();
  last.seeds.clear();
  if (st.is_last) {
    if (!state.loss.defined()) ctx_.fail_here("backward before the forward of this micro-batch");
    // Every micro-batch loss is scaled by 1 / (M * D): the step's gradient is the mean.
    last.roots = {state.loss};
    last.seeds = {at::full({}, ctx_.micro_batch_loss_share(), state.loss.options())};
    // With loss scaling, also by the scale (the fp32 sums are divided by it before the step), in
    // fp32 as GradScaler does: a scale past fp32's range gives inf, and the step is skipped.
    if (ctx_.options.loss_scaling)
      last.seeds[0] =
          last.seeds[0] * at::scalar_tensor(ctx_.loss_scaler.scale(), at::kDouble).to(state.loss.scalar_type());
  } else {
    std::size_t float_outputs = 0;
    for (const auto& o : state.outputs) float_outputs += carries_grad(o) ? 1 : 0;
    if (state.output_grads.size() != float_outputs)
      ctx_.fail_here("backward without the gradient of the stage outputs (no receive or hand-over before it)");
    std::size_t g = 0;
    for (const auto& o : state.outputs) {
      if (!carries_grad(o)) continue;
      const at::Tensor& grad = state.output_grads[g++];
      if (!o.requires_grad()) continue;  // e.g. a data tensor passed through: nothing to differentiate
      last.roots.push_back(o);
      last.seeds.push_back(grad);
    }
    for (const auto& [name, out] : state.skip_outputs) {
      if (!carries_grad(out)) continue;
      auto it = state.skip_output_grads.find(name);
      if (it == state.skip_output_grads.end())
        ctx_.fail_here(fmt::format(
            "backward without the gradient of the skip tensor '{}' (no RecvGrad from the stage that pops it)", name));
      if (!out.requires_grad()) continue;
      last.roots.push_back(out);
      last.seeds.push_back(it->second);
    }
  }
  state.seeded = true;
}

// The parameters of layers [first, end) of a stage: a contiguous range of its list.
std::pair<std::size_t, std::size_t> StageCompute::parameter_range(const StageState& st, int first_layer,
                                                                  int end_layer) const {
  const auto& params = st.module->parameters();
  std::size_t begin = 0;
  while (begin < params.size() && params[begin].layer < first_layer) ++begin;
  std::size_t end = begin;
  while (end < params.size() && params[end].layer < end_layer) ++end;
  return {begin, end};
}

void StageCompute::backward(const Instruction& instr, bool input_part, bool weight_part) {
  StageState& st = ctx_.stage(instr.stage);
  MicroBatchState& state = ctx_.micro_batch(instr.stage, instr.micro_batch);
  if (state.segments.empty()) ctx_.fail_here("backward before the forward of this micro-batch");
  if (input_part) {
    recompute(st, state, state.segments.size() - 1);
    seed_backward(st, state);
  } else if (!state.seeded) {
    ctx_.fail_here("BackwardWeight before the BackwardInput of this micro-batch");
  }
  const TensorList all_params = st.module->parameter_tensors();
  std::vector<at::Tensor> param_grads(weight_part ? all_params.size() : 0);
  // Last run first: a run's input gradients seed the run before it.
  for (std::size_t k = state.segments.size(); k-- > 0;) {
    if (input_part) recompute(st, state, k);  // its output gradients came from run k + 1
    auto& seg = state.segments[k];
    TensorList grad_inputs;
    if (input_part)
      for (auto& t : seg.inputs)
        if (t.requires_grad()) grad_inputs.push_back(t);
    const auto [param_begin, param_end] =
        weight_part ? parameter_range(st, seg.first_layer, seg.end_layer) : std::pair<std::size_t, std::size_t>{0, 0};
    TensorList targets = grad_inputs;
    targets.insert(targets.end(), all_params.begin() + static_cast<std::ptrdiff_t>(param_begin),
                   all_params.begin() + static_cast<std::ptrdiff_t>(param_end));
    // BackwardInput keeps the graph for its BackwardWeight.
    const bool keep_graph = input_part && !weight_part;
    TensorList grads;
    if (!targets.empty() && !seg.roots.empty())
      grads = torch::autograd::grad(seg.roots, targets, seg.seeds, keep_graph, /*create_graph=*/false,
                                    /*allow_unused=*/true);
    if (input_part) pass_input_grads(instr, st, state, k, grad_inputs, grads);
    if (weight_part) {
      const std::size_t offset = input_part ? grad_inputs.size() : 0;
      for (std::size_t i = param_begin; i < param_end; ++i) {
        at::Tensor g = grads.empty() ? at::Tensor() : grads[offset + (i - param_begin)];
        if (ctx_.options.dtype != at::kFloat)
          param_grads[i] = fp32_gradient(g, all_params[i]);  // summed over micro-batches in fp32
        else
          param_grads[i] = g.defined() ? g : at::zeros_like(all_params[i]);
      }
      if (input_part) {  // this run's graph is freed: release what it held before the next run is rebuilt
        seg.roots.clear();
        seg.seeds.clear();
        seg.outputs.clear();
        if (k > 0) seg.inputs.clear();  // run 0's are the stage's inputs, which give_input_grads reads
        if (k + 1 == state.segments.size()) state.outputs.clear();
      }
    }
  }
  if (!weight_part) return;
  for (std::size_t i = 0; i < param_grads.size(); ++i)
    if (!param_grads[i].defined())
      param_grads[i] =
          ctx_.options.dtype != at::kFloat ? fp32_gradient({}, all_params[i]) : at::zeros_like(all_params[i]);
  st.accumulator.add(instr.micro_batch, std::move(param_grads));
  release(state);
}

void StageCompute::pass_input_grads(const Instruction& instr, StageState& st, MicroBatchState& state, std::size_t k,
                                    const TensorList& grad_inputs, const TensorList& grads) {
  std::vector<at::Tensor> input_grads;
  for (std::size_t i = 0; i < grad_inputs.size(); ++i)
    input_grads.push_back(grads.empty() || !grads[i].defined() ? at::zeros_like(grad_inputs[i]) : grads[i]);
  if (k == 0) return give_input_grads(instr, st, state, input_grads);
  // The previous run's outputs are this run's inputs, one for one; it is recomputed next.
  const auto& seg = state.segments[k];
  auto& prev = state.segments[k - 1];
  prev.output_grads.assign(seg.inputs.size(), at::Tensor());
  std::size_t g = 0;
  for (std::size_t i = 0; i < seg.inputs.size(); ++i)
    if (seg.inputs[i].requires_grad()) prev.output_grads[i] = input_grads[g++];
  // A run whose graph was kept (a BackwardInput again) is seeded at once.
  if (prev.graph_ready) seed_from_output_grads(prev);
}

// One gradient per floating-point stage input (then per popped skip tensor), for the stage
// before; handed over in memory where that stage is on this rank.
void StageCompute::give_input_grads(const Instruction& instr, StageState& st, MicroBatchState& state,
                                    const TensorList& input_grads) {
  state.input_grads.clear();
  std::size_t g = 0;
  for (auto& t : state.inputs)
    if (carries_grad(t)) state.input_grads.push_back(t.requires_grad() ? input_grads.at(g++) : at::zeros_like(t));
  state.skip_input_grads.clear();
  for (const auto& [name, leaf] : state.skip_inputs)
    if (carries_grad(leaf))
      state.skip_input_grads[name] = leaf.requires_grad() ? input_grads.at(g++) : at::zeros_like(leaf);
  for (const auto& r : ctx_.skip_routes)  // back to an earlier stage on this rank
    if (r.carrier == SkipCarrier::Memory && r.to_stage == instr.stage)
      if (auto it = state.skip_input_grads.find(r.name); it != state.skip_input_grads.end())
        ctx_.micro_batch(r.from_stage, instr.micro_batch).skip_output_grads[r.name] = it->second;
  state.input_grads_ready = true;
  if (!st.is_first && ctx_.holds(instr.stage - 1))  // hand-over to the previous stage on this rank
    ctx_.micro_batch(instr.stage - 1, instr.micro_batch).output_grads = state.input_grads;
}

void StageCompute::release(MicroBatchState& state) {
  state.segments.clear();
  state.outputs.clear();
  state.inputs.clear();
  state.loss = at::Tensor();
  state.output_grads.clear();
  state.skip_inputs.clear();
  state.skip_outputs.clear();
  state.skip_output_grads.clear();
  state.seeded = false;
}

}  // namespace pipescope::exec::runtime
