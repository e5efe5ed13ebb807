// The compute of the stages on this rank: loading data, the forward (as one run of layers or
// as activation-checkpointed runs), the recompute, and the backward whole or in its input and
// weight halves, with the loss on the last stage and hand-overs between stages of this rank.
// Weight gradients go to the stage's ordered accumulator; nothing here talks to other ranks.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/rank_context.hpp"
#include "runtime/step_recorder.hpp"

namespace pipescope::exec::runtime {

class StageCompute {
 public:
  StageCompute(RankContext& ctx, StepRecorder& recorder) : ctx_(ctx), recorder_(recorder) {}

  // The step's data and whether the last stage keeps its outputs.
  void begin_step(const StepRequest& request);
  // LoadMicroBatch: the data of the first stage, the labels of the last; inner stages get theirs
  // from the pipeline.
  void load(int stage, int micro_batch);
  void forward(const Instruction& instr);
  // BackwardPass (both halves), BackwardInput (input half) or BackwardWeight (weight half).
  void backward(const Instruction& instr, bool input_part, bool weight_part);

 private:
  MicroBatch micro_batch_data(int micro_batch, bool with_labels);
  // The stage inputs and popped skip tensors as leaves of this micro-batch's graph.
  void take_inputs(StageState& st, MicroBatchState& state, bool training);
  // Runs the layers (without a graph when checkpointed or not training), checks what they
  // give, and computes the loss on the last stage.
  void run_layers(StageState& st, MicroBatchState& state, bool training, bool checkpointed);
  // The forward's results to the trace, the result and the stages after this one on this rank.
  void pass_on(const Instruction& instr, StageState& st, MicroBatchState& state, bool training);
  at::Tensor loss_in_fp32(StageState& st, MicroBatchState& state);
  int segment_length(const StageState& st) const;
  // Rebuilds run `k` of a checkpointed forward with its graph, just before its backward.
  void recompute(StageState& st, MicroBatchState& state, std::size_t k);
  // Run k's received output gradients as the roots and seeds of its backward.
  static void seed_from_output_grads(MicroBatchState::Segment& seg);
  void seed_backward(StageState& st, MicroBatchState& state);
  // The input gradients of run `k` become the output gradients of run k - 1, or, for the
  // first run, the stage's input gradients for the previous stage.
  void pass_input_grads(const Instruction& instr, StageState& st, MicroBatchState& state, std::size_t k,
                        const TensorList& grad_inputs, const TensorList& grads);
  void give_input_grads(const Instruction& instr, StageState& st, MicroBatchState& state, const TensorList& input_grads);
  std::pair<std::size_t, std::size_t> parameter_range(const StageState& st, int first_layer, int end_layer) const;
  // What the micro-batch held for its backward, freed once its weight gradients are in.
  static void release(MicroBatchState& state);

  RankContext& ctx_;
  StepRecorder& recorder_;
  const MicroBatchSource* source_ = nullptr;
  std::vector<MicroBatch> pulled_;  // from the source, in micro-batch order
  std::int64_t first_sample_ = 0;
  bool keep_outputs_ = false;
};

}  // namespace pipescope::exec::runtime
