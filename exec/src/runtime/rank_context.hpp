// What every part of one rank's runtime shares: the model, this rank's place in the grid, the
// stages it holds with their micro-batches, the step's schedule, and where the interpreter is,
// so that any part can fail with a message naming rank, step and instruction.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pipescope/exec/runtime.hpp"
#include "pipescope/exec/pipeline_module.hpp"
#include "runtime/grad_accumulator.hpp"

namespace pipescope::exec {

// One micro-batch on one stage, from its receive to the end of its backward.
struct MicroBatchState {
  TensorList received_inputs;               // from a receive or a hand-over, before the forward
  std::vector<std::string> received_names;  // their keys when they are a dict
  TensorList inputs;                        // what the forward took (leaves that require grad on inner stages)
  std::vector<std::string> input_names;
  TensorList outputs;
  std::vector<std::string> output_names;
  at::Tensor labels;
  at::Tensor loss;
  TensorList output_grads;  // gradient of the floating-point outputs, from the next stage
  TensorList input_grads;   // gradient of the floating-point inputs, for the previous stage
  // Skip connections with other stages, by name: received before the forward, the leaves the
  // forward popped, what it stashed for later stages, and the gradients both ways.
  SkipTensors received_skips, skip_inputs, skip_outputs, skip_output_grads, skip_input_grads;
  // The forward as runs of layers: one run, or one per activation checkpoint. A checkpointed
  // run keeps only its input and random state until the backward recomputes it.
  struct Segment {
    int first_layer = 0, end_layer = 0;
    TensorList inputs, outputs;
    std::vector<std::string> input_names;
    at::Tensor rng_state;
    bool graph_ready = false;  // outputs hold the run's autograd graph
    // The gradient of each output (undefined where none flows), from the run after this one:
    // it arrives before this run is recomputed, and becomes roots and seeds once it is.
    TensorList output_grads;
    TensorList roots, seeds;  // kept between BackwardInput and BackwardWeight
  };
  std::vector<Segment> segments;
  bool seeded = false;
  bool input_grads_ready = false;
  bool loaded = false;
};

// One stage held by this rank, with its optimizer and this step's progress.
struct StageState {
  int stage = 0;
  bool is_first = false;
  bool is_last = false;
  std::unique_ptr<StageModule> module;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::map<int, MicroBatchState> micro_batches;
  runtime::OrderedGradAccumulator accumulator;
  // bf16/fp16 during a step: the fp32 master weights while the parameters hold 16-bit copies
  // (compute_weights.hpp); empty in fp32 and between steps.
  TensorList masters;
  bool grads_final = false;    // accumulator moved into .grad
  bool grads_reduced = false;  // data-parallel all-reduce done
  bool stepped = false;
};

namespace runtime {

struct RankContext {
  // Checks the schedule against the partition and builds the stages of this rank with their
  // optimizers; throws RuntimeError naming what does not fit.
  RankContext(const ModelSpec& model, const Schedule& schedule, const Partition& partition, Transport& world,
              GridPosition position, RuntimeOptions options);

  const ModelSpec& model;
  const Schedule* built_for;  // the schedule the stages were built for
  const Schedule* active;     // the one this step runs
  const Partition& partition;
  Transport& world;
  GridPosition position;
  RuntimeOptions options;       // options.device is never null
  bool dynamic_shapes = false;  // no declared boundary shapes: transfers carry shape headers
  std::vector<SkipRoute> skip_routes;
  std::map<int, std::unique_ptr<StageState>> stages;
  // With options.loss_scaling: the scale of this step's backward, the same on every rank.
  DynamicLossScaler loss_scaler;

  // Where the interpreter is (errors name it); `current` is null between programs.
  int step_index = 0;
  const Instruction* current = nullptr;
  int current_step = 0;

  int world_rank() const { return position.world_rank(); }
  int world_rank_of_stage(int s) const {
    return position.replica * position.pipeline_ranks + active->stage_to_rank.at(static_cast<std::size_t>(s));
  }
  bool holds(int s) const { return stages.count(s) > 0; }
  int micro_batch_count() const { return active->num_micro_batches; }
  // What each micro-batch's loss (the auxiliary losses in it included) is scaled by: the step's
  // gradient is the mean over the micro-batches of every replica.
  double micro_batch_loss_share() const {
    return 1.0 / (static_cast<double>(micro_batch_count()) * position.num_replicas);
  }
  StageState& stage(int s);
  MicroBatchState& micro_batch(int s, int micro_batch) { return stage(s).micro_batches[micro_batch]; }
  at::Device device() const { return options.device->device(); }
  at::Tensor to_device(const at::Tensor& t) const { return device() == at::kCPU ? t : t.to(device()); }
  const std::string& layer_name(int layer) const { return model.layers.at(static_cast<std::size_t>(layer)).name; }

  // "rank R: step S: <where>: <what>".
  [[noreturn]] void fail(const std::string& what, const std::string& where) const;
  // The same at the current instruction.
  [[noreturn]] void fail_here(const std::string& what) const { fail(what, where()); }
  // "program step 3, instruction 1F0 (ForwardPass of stage 1, micro-batch 0, peer rank 2)".
  std::string where() const;
  // "stage 1 (layers 2..3, 'blocks.2' .. 'blocks.3')": how errors name a stage.
  std::string stage_name(const StageState& st) const;
};

}  // namespace runtime
}  // namespace pipescope::exec
