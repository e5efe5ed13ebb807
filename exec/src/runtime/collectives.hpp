// The end of a training step: tied-weight gradients summed over the stages that share them,
// the data-parallel all-reduce, the loss scale taken out (fp16), clipping by the global norm,
// and the optimizer step. Each
// runs at most once per step, when its instruction comes or, failing that, after the program.
// The instructions are per stage and may stand anywhere after that stage's last backward (torch
// puts REDUCE_GRAD there, mid-program): what needs the other stages of this rank too (the tied
// sum, clipping, loss scaling) waits until their gradients are complete, at the latest until the
// end of the step.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/rank_context.hpp"
#include "runtime/step_recorder.hpp"

namespace pipescope::exec::runtime {

class Collectives {
 public:
  // Builds the groups (data-parallel, pipeline for clipping, tied weights): every rank must
  // construct its runtime at the same point.
  Collectives(RankContext& ctx, StepRecorder& recorder);

  void begin_step() {
    tied_done_ = false;
    clipped_ = false;
    unscaled_ = false;
    skip_step_ = false;
  }
  // ReduceTiedGrads of one stage: its accumulated gradients into .grad, then, once every stage
  // of this rank has its gradients, the tied-weight sums.
  void reduce_tied(StageState& st);
  // ReduceGrads: the data-parallel all-reduce of one stage's gradients, after the tied sums when
  // the stage holds a tied weight (deferred until they can run).
  void reduce_grads(StageState& st);
  // OptimizerStep of one stage, after its reductions and the step's clipping; deferred while
  // either still waits for other stages of this rank.
  void optimizer_step(StageState& st);
  // Programs without the end-of-batch instructions (compute-only files) still train: what is
  // missing runs after the program, in DeepSpeed's order.
  void finish_training_step();

 private:
  void make_groups();
  int stage_of_layer(int layer) const;
  void finalize_grads(StageState& st);
  // True when every stage of this rank has all its weight gradients (then finalized).
  bool every_stage_complete();
  bool holds_tied_weight(const StageState& st) const;
  // The tied-weight sums over the stages (and ranks) sharing them; every stage here is final.
  void reduce_tied_weights();
  void unscale_gradients();
  // Sums the gradients of `params` over `group` (nothing without one).
  void all_reduce_gradients(TensorList params, Transport* group);
  // Sums `values` (on the CPU) over the ranks whose gradients together make this replica's whole
  // model: its expert-parallel group (each holding other experts), then its pipeline ranks.
  at::Tensor sum_over_model_holders(const at::Tensor& values);
  void clip_gradients();

  RankContext& ctx_;
  StepRecorder& recorder_;
  std::unique_ptr<Transport> dp_group_;
  std::unique_ptr<Transport> pipe_group_;                // this replica's pipeline ranks (clipping, loss scaling)
  std::map<std::string, std::vector<int>> tied_layers_;  // per key, the layers using the weight
  std::map<std::string, std::unique_ptr<Transport>> tied_groups_;
  bool tied_done_ = false;
  bool clipped_ = false;
  bool unscaled_ = false;
  bool skip_step_ = false;  // loss scaling found inf/nan gradients: no optimizer step this time
};

}  // namespace pipescope::exec::runtime
