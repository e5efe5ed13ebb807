// The end of a training step: tied-weight gradients summed over the stages that share them,
// the data-parallel all-reduce, the loss scale taken out (fp16), clipping by the global norm,
// and the optimizer step. Each
// runs at most once per step, when its instruction comes or, failing that, after the program.
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
  // ReduceTiedGrads: first moves every held stage's accumulated gradients into .grad.
  void reduce_tied();
  // ReduceGrads: the data-parallel all-reduce of one stage's gradients.
  void reduce_grads(StageState& st);
  // OptimizerStep of one stage, after its reductions and the step's clipping.
  void optimizer_step(StageState& st);
  // Programs without the end-of-batch instructions (compute-only files) still train: what is
  // missing runs after the program, in DeepSpeed's order.
  void finish_training_step();

 private:
  void make_groups();
  int stage_of_layer(int layer) const;
  void finalize_grads(StageState& st);
  void unscale_gradients();
  void clip_gradients();

  RankContext& ctx_;
  StepRecorder& recorder_;
  std::unique_ptr<Transport> dp_group_;
  std::unique_ptr<Transport> pipe_group_;  // this replica's pipeline ranks (clipping, loss scaling)
  std::map<std::string, std::vector<int>> tied_layers_;  // per key, the layers using the weight
  std::map<std::string, std::unique_ptr<Transport>> tied_groups_;
  bool tied_done_ = false;
  bool clipped_ = false;
  bool unscaled_ = false;
  bool skip_step_ = false;  // loss scaling found inf/nan gradients: no optimizer step this time
};

}  // namespace pipescope::exec::runtime
