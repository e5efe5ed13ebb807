#include "pipescope/sim/costs.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "pipescope/core/errors.hpp"

namespace pipescope::sim {

CostModel CostModel::uniform(double f_s, double b_s, double w_s, double c_s, std::int64_t f_mem_bytes,
                             std::int64_t b_mem_bytes, std::int64_t w_mem_bytes) {
  CostModel model;
  StageCost stage;
  stage.f_s = f_s;
  stage.b_s = b_s;
  stage.w_s = w_s;
  stage.f_mem_bytes = f_mem_bytes;
  stage.b_mem_bytes = b_mem_bytes;
  stage.w_mem_bytes = w_mem_bytes;
  model.stages.push_back(stage);
  model.c_s = c_s;
  return model;
}

namespace {

void check_time(double value, const char* name, int stage) {
  if (!std::isfinite(value) || value < 0)
    throw UsageError("stage " + std::to_string(stage) + ": " + name + " must be a finite time >= 0 (got " +
                     std::to_string(value) + ")");
}

}  // namespace

double overlapped_reduce_grads_end_s(const StageCost& c, double pass_start_s, double pass_s) {
  const int n = std::max(c.reduce_grads_buckets, 1);
  const double spread = std::max(0.0, c.reduce_grads_s - c.reduce_grads_last_s);
  const double each = spread / n;
  // Bucket k (1..n) is final at k/n of the pass. The chain of reductions ends at the latest
  // k/n pass + (n - k + 1) buckets, which is linear in k: the first bucket's or the last's.
  // Either way it ends after the pass, where the last part's reduction can start.
  return pass_start_s + std::max(pass_s / n + spread, pass_s + each) + c.reduce_grads_last_s;
}

void CostModel::check(int num_stages) const {
  if (stages.empty()) throw UsageError("cost model: no stage costs");
  if (stages.size() != 1 && static_cast<int>(stages.size()) != num_stages)
    throw UsageError("cost model: costs for " + std::to_string(stages.size()) + " stages, but the schedule has " +
                     std::to_string(num_stages));
  if (!std::isfinite(c_s) || c_s < 0) throw UsageError("--c-cost must be a finite time >= 0");
  if (micro_batch_size < 1) throw UsageError("--micro-batch-size must be at least 1");
  if (data_parallel < 1) throw UsageError("data-parallel size must be at least 1");
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const StageCost& s = stages[i];
    const int id = static_cast<int>(i);
    check_time(s.f_s, "f cost", id);
    check_time(s.b_s, "b cost", id);
    check_time(s.w_s, "w cost", id);
    check_time(s.reduce_grads_s, "gradient reduction time", id);
    check_time(s.reduce_grads_last_s, "gradient reduction time after the backward", id);
    if (s.reduce_grads_buckets < 0 || s.reduce_grads_last_s > s.reduce_grads_s)
      throw UsageError("stage " + std::to_string(id) +
                       ": overlapped gradient reduction: buckets must be >= 0 and "
                       "the part after the backward no longer than the whole");
    check_time(s.reduce_tied_s, "tied-gradient reduction time", id);
    check_time(s.optimizer_s, "optimizer time", id);
    check_time(s.load_s, "load time", id);
    check_time(s.full_backward_s, "full backward time", id);
    check_time(s.tensor_parallel_f_s, "tensor-parallel forward collectives time", id);
    check_time(s.tensor_parallel_b_s, "tensor-parallel backward collectives time", id);
    if (s.tensor_parallel_f_s > s.f_s || s.tensor_parallel_b_s > s.b_s)
      throw UsageError("stage " + std::to_string(id) +
                       ": tensor-parallel collectives longer than the pass that runs them");
    const ExpertAllToAll& a2a = s.all_to_all;
    check_time(a2a.dispatch_f_s, "all-to-all dispatch time", id);
    check_time(a2a.combine_f_s, "all-to-all combine time", id);
    check_time(a2a.dispatch_b_s, "all-to-all dispatch gradient time", id);
    check_time(a2a.combine_b_s, "all-to-all combine gradient time", id);
    if (a2a.forward_s() + s.tensor_parallel_f_s > s.f_s || a2a.backward_s() + s.tensor_parallel_b_s > s.b_s)
      throw UsageError("stage " + std::to_string(id) +
                       ": all-to-all and tensor-parallel collectives longer than the pass that runs them");
    if (a2a.moe_layers < 0 || a2a.group_size < 1 || a2a.dispatch_bytes < 0 || a2a.combine_bytes < 0 ||
        (a2a.any() && a2a.moe_layers == 0))
      throw UsageError("stage " + std::to_string(id) +
                       ": all-to-all: MoE layers, group size and bytes must be >= 0 "
                       "(group >= 1), with at least one MoE layer when it takes time");
    check_time(s.deferred_weight_s, "deferred output-layer weight gradient time", id);
    if (s.deferred_weight_s > s.w_s || s.deferred_micro_batches < 0 || s.deferred_bytes < 0)
      throw UsageError("stage " + std::to_string(id) +
                       ": deferred output-layer weight gradients: no longer than the "
                       "stage's weight gradients, with micro-batches and bytes >= 0");
    if (s.grad_buffer_bytes < 0) throw UsageError("stage " + std::to_string(id) + ": gradient buffer must be >= 0");
    if (s.f_mem_bytes + s.b_mem_bytes + s.w_mem_bytes != 0)
      throw UsageError("stage " + std::to_string(id) + ": f, b and w memory must sum to 0 (got " +
                       std::to_string(s.f_mem_bytes) + " + " + std::to_string(s.b_mem_bytes) + " + " +
                       std::to_string(s.w_mem_bytes) + ")");
    if (s.static_bytes < 0) throw UsageError("stage " + std::to_string(id) + ": static memory must be >= 0");
    if (s.activation_bytes < 0) throw UsageError("stage " + std::to_string(id) + ": transfer bytes must be >= 0");
  }
  runtime.check(num_stages);
}

void RuntimeEffects::check(int num_stages) const {
  if (stages.size() > 1 && static_cast<int>(stages.size()) != num_stages)
    throw UsageError("runtime effects: for " + std::to_string(stages.size()) + " stages, but the schedule has " +
                     std::to_string(num_stages));
  if (!std::isfinite(instruction_overhead_s) || instruction_overhead_s < 0)
    throw UsageError("instruction overhead must be a finite time >= 0");
  if (!std::isfinite(step_overhead_s) || step_overhead_s < 0)
    throw UsageError("step overhead must be a finite time >= 0");
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const StageRuntimeEffects& s = stages[i];
    const int id = static_cast<int>(i);
    check_time(s.send_s, "send posting time", id);
    check_time(s.recv_s, "receive time", id);
    check_time(s.recv_contended_s, "receive time with traffic both ways", id);
    check_time(s.grad_accumulate_s, "gradient accumulation time", id);
  }
}

}  // namespace pipescope::sim
