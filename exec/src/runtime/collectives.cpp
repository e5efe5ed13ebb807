// Reductions, clipping and the optimizer step (see collectives.hpp).
#include "runtime/collectives.hpp"

#include <fmt/format.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "runtime/compute_weights.hpp"
#include "error_text.hpp"

namespace pipescope::exec::runtime {

Collectives::Collectives(RankContext& ctx, StepRecorder& recorder) : ctx_(ctx), recorder_(recorder) { make_groups(); }

void Collectives::make_groups() {
  const GridPosition& position = ctx_.position;
  const int p = position.pipeline_ranks;
  if (position.num_replicas > 1) {
    std::vector<int> members;
    members.reserve(static_cast<std::size_t>(position.num_replicas));
    for (int d = 0; d < position.num_replicas; ++d) members.push_back(d * p + position.pipe_rank);
    dp_group_ = ctx_.world.subgroup(members, fmt::format("dp{}", position.pipe_rank));
  }
  if ((ctx_.options.gradient_clipping > 0 || ctx_.options.loss_scaling) && p > 1) {
    std::vector<int> members;
    members.reserve(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) members.push_back(position.replica * p + r);
    pipe_group_ = ctx_.world.subgroup(members, fmt::format("pipe{}", position.replica));
  }
  for (std::size_t l = 0; l < ctx_.model.layers.size(); ++l) {
    const auto& key = ctx_.model.layers[l].tied_key;
    if (!key.empty()) tied_layers_[key].push_back(static_cast<int>(l));
  }
  // A tied weight needs a group only where its layers sit on two pipeline ranks or more.
  for (const auto& [key, layers] : tied_layers_) {
    std::set<int> holder_pipe_ranks;
    for (int l : layers)
      holder_pipe_ranks.insert(ctx_.built_for->stage_to_rank.at(static_cast<std::size_t>(stage_of_layer(l))));
    if (!holder_pipe_ranks.count(position.pipe_rank) || holder_pipe_ranks.size() < 2) continue;
    std::vector<int> members;
    members.reserve(holder_pipe_ranks.size());
    for (int r : holder_pipe_ranks) members.push_back(position.replica * p + r);
    tied_groups_[key] = ctx_.world.subgroup(members, fmt::format("tied-{}-r{}", key, position.replica));
  }
}

int Collectives::stage_of_layer(int layer) const {
  const Partition& partition = ctx_.partition;
  for (int s = 0; s < partition.num_stages(); ++s)
    if (layer >= partition.bounds[s] && layer < partition.bounds[s + 1]) return s;
  throw RuntimeError(fmt::format("layer {} is in no stage", layer));
}

// Moves the ordered sums into .grad once every micro-batch's weight gradient is in.
void Collectives::finalize_grads(StageState& st) {
  if (st.grads_final) return;
  if (!st.accumulator.complete())
    ctx_.fail_here(fmt::format("stage {} still misses the weight gradients of {} micro-batch(es)", st.stage,
                               st.accumulator.missing()));
  restore_master_weights(st);  // bf16/fp16: the fp32 sums are the masters' gradients
  auto params = st.module->parameter_tensors();
  auto& sums = st.accumulator.sum();
  for (std::size_t i = 0; i < params.size(); ++i)
    params[i].mutable_grad() = sums.empty() ? at::zeros_like(params[i]) : sums[i];
  st.grads_final = true;
}

bool Collectives::every_stage_complete() {
  for (auto& [s, st] : ctx_.stages)
    if (!st->grads_final && !st->accumulator.complete()) return false;
  for (auto& [s, st] : ctx_.stages) finalize_grads(*st);
  return true;
}

bool Collectives::holds_tied_weight(const StageState& st) const {
  for (const auto& p : st.module->parameters())
    if (!p.tied_key.empty()) return true;
  return false;
}

// Tied weights: the total gradient is the sum over the layers using the weight, in layer
// order. Each holder puts its layers' gradients in their rows of a [layers, numel] tensor
// (zeros elsewhere); an all-reduce of rows with one non-zero contributor each is exact.
void Collectives::reduce_tied_weights() {
  if (tied_done_) return;
  for (const auto& [key, layers] : tied_layers_) {
    std::vector<at::Tensor*> local_grads;
    std::vector<int> local_rows;
    at::Tensor like;
    for (auto& [s, st] : ctx_.stages)
      for (const auto& p : st->module->parameters())
        if (p.tied_key == key) {
          const auto row = std::find(layers.begin(), layers.end(), p.layer) - layers.begin();
          local_rows.push_back(static_cast<int>(row));
          local_grads.push_back(&const_cast<at::Tensor&>(p.tensor).mutable_grad());
          like = p.tensor;
        }
    if (local_grads.empty()) continue;
    at::Tensor rows = at::zeros({static_cast<std::int64_t>(layers.size()), like.numel()}, like.options());
    for (std::size_t i = 0; i < local_grads.size(); ++i) rows[local_rows[i]].copy_(local_grads[i]->reshape({-1}));
    if (auto it = tied_groups_.find(key); it != tied_groups_.end())
      it->second->all_reduce_sum(rows)->wait(ctx_.options.timeout);
    at::Tensor total = rows[0].clone();
    for (std::int64_t r = 1; r < rows.size(0); ++r) total.add_(rows[r]);
    total = total.view(like.sizes());
    for (auto* g : local_grads) *g = total.clone();
  }
  tied_done_ = true;
}

void Collectives::reduce_tied(StageState& st) {
  finalize_grads(st);
  if (every_stage_complete()) reduce_tied_weights();
}

// A stage without tied weights reduces as soon as its own gradients are complete; one with a
// tied weight needs the tied sum first, which needs every stage of this rank (a mid-program
// all-reduce of it could also wait on a rank that still waits on this one's later stages).
void Collectives::reduce_grads(StageState& st) {
  if (st.grads_reduced) return;
  finalize_grads(st);
  if (holds_tied_weight(st)) {
    if (!every_stage_complete()) return;  // deferred: a later reduction or the end of the step runs it
    reduce_tied_weights();
  }
  const ExpertParallel* expert_parallel = ctx_.model.expert_parallel.get();
  if (expert_parallel && expert_parallel->distributed()) {
    // Experts held by part of the replicas: their gradients (already summed over the tokens of
    // the whole expert-parallel group) are summed over the replicas holding the same experts;
    // the dense ones over every replica, as below.
    TensorList dense, experts;
    for (const auto& p : st.module->parameters()) (is_expert_parameter(p.name) ? experts : dense).push_back(p.tensor);
    all_reduce_gradients(dense, dp_group_.get());
    all_reduce_gradients(experts, expert_parallel->expert_data_parallel());
  } else {
    all_reduce_gradients(st.module->parameter_tensors(), dp_group_.get());
  }
  st.grads_reduced = true;
}

// One all-reduce of the gradients flattened together.
void Collectives::all_reduce_gradients(TensorList params, Transport* group) {
  if (!group || params.empty()) return;
  TensorList grads;
  for (const auto& p : params) grads.push_back(p.grad().reshape({-1}));
  at::Tensor flat = at::cat(grads);
  group->all_reduce_sum(flat)->wait(ctx_.options.timeout);
  std::int64_t offset = 0;
  for (auto& p : params) {
    p.mutable_grad() = flat.slice(0, offset, offset + p.numel()).view(p.sizes()).clone();
    offset += p.numel();
  }
}

at::Tensor Collectives::sum_over_model_holders(const at::Tensor& values) {
  const ExpertParallel* expert_parallel = ctx_.model.expert_parallel.get();
  Transport* experts_group = expert_parallel && expert_parallel->distributed() ? expert_parallel->group() : nullptr;
  at::Tensor sum = values;
  for (Transport* group : {experts_group, pipe_group_.get()}) {
    if (!group) continue;
    at::Tensor on_device = ctx_.to_device(sum);
    group->all_reduce_sum(on_device)->wait(ctx_.options.timeout);
    sum = on_device.cpu();
  }
  return sum;
}

// Clipping by the global norm: the gradients of every stage on every pipeline rank of this
// replica (after the data-parallel reduction, so replicas agree), each tied weight counted
// once (by the holder of its first layer), and with expert parallelism every expert of the
// model once: the other members of this rank's expert-parallel group hold the layers' other
// experts, and the same dense parameters (counted by the group's first member). Runs once per
// step, at the first optimizer step. A layer's dense parameters and each of its experts have a
// slot of their own, one contributor each, and the slots are added in order, so the norm does
// not depend on how the layers are split or the experts placed (exact).
void Collectives::clip_gradients() {
  if (clipped_ || ctx_.options.gradient_clipping <= 0) return;
  for (auto& [s, st] : ctx_.stages) reduce_grads(*st);
  const ExpertParallel* expert_parallel = ctx_.model.expert_parallel.get();
  const bool experts_across_ranks = expert_parallel && expert_parallel->distributed();
  const std::int64_t slots_per_layer = 1 + (expert_parallel ? expert_parallel->experts() : 0);
  at::Tensor slots = at::zeros({static_cast<std::int64_t>(ctx_.model.layers.size()) * slots_per_layer},
                               at::TensorOptions().dtype(at::kDouble));
  for (auto& [s, st] : ctx_.stages)
    for (const auto& p : st->module->parameters()) {
      if (!p.tied_key.empty() && p.layer != tied_layers_.at(p.tied_key).front()) continue;
      const std::optional<int> expert = expert_id_of(p.name);
      if (!expert && experts_across_ranks && expert_parallel->rank() != 0) continue;
      if (!p.tensor.grad().defined()) continue;
      const std::int64_t slot = p.layer * slots_per_layer + (expert ? 1 + *expert : 0);
      slots[slot] += p.tensor.grad().to(at::kDouble).pow(2).sum().cpu();
    }
  slots = sum_over_model_holders(slots);
  double square_sum = 0;
  const double* slot_sums = slots.data_ptr<double>();
  for (std::int64_t i = 0; i < slots.numel(); ++i) square_sum += slot_sums[i];
  const double norm = std::sqrt(square_sum);
  recorder_.result().grad_norm = norm;
  const double coefficient = ctx_.options.gradient_clipping / (norm + 1e-6);
  if (coefficient < 1.0)
    for (auto& [s, st] : ctx_.stages)
      for (auto& p : st->module->parameter_tensors())
        if (p.grad().defined()) p.mutable_grad().mul_(coefficient);
  clipped_ = true;
}

// Dynamic loss scaling, once per step before clipping (GradScaler's unscale_ then step): the
// gradients (fp32 sums, reduced over replicas) are divided by the scale, and the ranks of the
// pipeline agree whether any holds inf or nan. Replicas agree too: a reduced sum with an inf
// or nan in it is not finite either. Then every rank skips the step, or none does, and the
// scale moves the same way everywhere.
void Collectives::unscale_gradients() {
  if (unscaled_ || !ctx_.options.loss_scaling) return;
  for (auto& [s, st] : ctx_.stages) reduce_grads(*st);
  const double scale = ctx_.loss_scaler.scale();
  bool found_inf = false;
  for (auto& [s, st] : ctx_.stages)
    for (auto& p : st->module->parameter_tensors())
      if (p.grad().defined()) {
        p.mutable_grad().mul_(1.0 / scale);  // exact while the scale is a power of two, as by default
        found_inf = found_inf || !at::isfinite(p.grad()).all().item<bool>();
      }
  // The members of an expert-parallel group hold different experts: they agree too.
  found_inf = sum_over_model_holders(at::full({1}, found_inf ? 1.0 : 0.0, at::TensorOptions().dtype(at::kFloat)))
                  .item<float>() > 0;
  recorder_.result().loss_scale = scale;
  skip_step_ = !ctx_.loss_scaler.update(found_inf);
  recorder_.result().step_skipped = skip_step_;
  unscaled_ = true;
}

void Collectives::optimizer_step(StageState& st) {
  if (st.stepped) return;
  reduce_grads(st);
  // Clipping and loss scaling read every stage's gradients: until they are in, the step waits.
  const bool needs_every_stage = ctx_.options.gradient_clipping > 0 || ctx_.options.loss_scaling;
  if (!st.grads_reduced || (needs_every_stage && !every_stage_complete())) return;
  unscale_gradients();
  if (!skip_step_) clip_gradients();  // every rank skips alike: the clipping exchange too
  if (st.optimizer && !skip_step_) st.optimizer->step();
  for (auto& p : st.module->parameter_tensors()) p.mutable_grad() = at::Tensor();
  st.stepped = true;
}

void Collectives::finish_training_step() {
  try {
    // Whatever was deferred runs now: every stage's gradients are complete (or this fails
    // naming the stage that misses some), so the tied sums and the reductions go first.
    for (auto& [s, st] : ctx_.stages) finalize_grads(*st);
    for (auto& [s, st] : ctx_.stages) optimizer_step(*st);
  } catch (const RuntimeError&) {
    throw;
  } catch (const std::exception& e) {
    ctx_.fail(first_line(e.what()), "end-of-step reductions");
  }
}

}  // namespace pipescope::exec::runtime
