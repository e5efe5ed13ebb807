// The pipeline runtime: interprets one rank's program of a Schedule (SPEC.md section 3) with
// LibTorch stage modules and a Transport, one step (iteration) at a time, and records what each
// instruction did (timings, transfers, memory) for the measured trace.
//
// Exactness: per-micro-batch parameter gradients are accumulated in micro-batch order whatever
// order the schedule runs backwards in, and tied weights are summed in layer order, so every
// schedule without split backward reproduces the single-process gradient-accumulation run bit
// for bit (fp32, one thread). So does bf16 (and fp16): every micro-batch runs the same 16-bit
// ops wherever the stage boundaries fall, and its weight gradients join fp32 sums in order.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipescope/core/partitioner.hpp"
#include "pipescope/core/schedule.hpp"
#include "pipescope/exec/device.hpp"
#include "pipescope/exec/model.hpp"
#include "pipescope/exec/transport.hpp"
#include "pipescope/traces/trace.hpp"

namespace torch::optim {
class Optimizer;
}

namespace pipescope::exec {

// ---- precision --------------------------------------------------------------------------------
// Training precision: the dtype the stages compute in, and the dynamic loss scaling that fp16
// needs (torch.amp.GradScaler's rules). In bf16 and fp16 the weights a stage computes with are
// copies of fp32 master weights; the optimizer and its state, the checkpoints and the
// gradient sums over micro-batches stay fp32 (Megatron's --bf16 / --fp16).

// "fp32" -> kFloat, "bf16" -> kBFloat16, "fp16" -> kHalf; throws UsageError naming `what` (the
// option or field) and the text for anything else.
at::ScalarType parse_compute_dtype(const std::string& text, const std::string& what);
// The inverse: "fp32", "bf16", "fp16" ("float64" etc. for any other dtype).
std::string compute_dtype_name(at::ScalarType dtype);
// Throws UsageError when `dtype` is not one of the three, or is fp16 on a CPU device.
void check_compute_dtype(at::ScalarType dtype, at::Device device);

// torch.amp.GradScaler's defaults.
struct LossScaleOptions {
  double initial_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;      // after `growth_interval` steps in a row without inf/nan
  double backoff_factor = 0.5;     // after a step with inf/nan gradients (which is skipped)
  int growth_interval = 2000;
};

// Dynamic loss scaling: the loss is multiplied by scale() before the backward, the gradients
// divided by it before the optimizer; a step whose gradients hold inf or nan is skipped and the
// scale backs off, and the scale grows after growth_interval clean steps in a row.
class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(LossScaleOptions options = {});
  double scale() const { return scale_; }
  // After a step's gradients are known (on every rank alike): true when the optimizer may step.
  bool update(bool found_inf);
  int skipped_steps() const { return skipped_; }

 private:
  LossScaleOptions options_;
  double scale_;
  int clean_steps_ = 0;
  int skipped_ = 0;
};

// ---- the runtime ------------------------------------------------------------------------------

// Where this process sits in the D x P grid: world rank = replica * pipeline_ranks + pipe_rank.
struct GridPosition {
  int replica = 0;
  int num_replicas = 1;
  int pipe_rank = 0;
  int pipeline_ranks = 1;
  int world_rank() const { return replica * pipeline_ranks + pipe_rank; }
};

using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(const std::vector<at::Tensor>& parameters)>;

// What the runtime needs to run a rank's program. PipelineEngine's options extend these
// (EngineOptions derives from RuntimeOptions, as Megatron's TransformerConfig extends its
// ModelParallelConfig): each field is declared once, beside its default, and handed on whole.
struct RuntimeOptions {
  std::chrono::milliseconds timeout{60000};  // how long a rank waits on a peer
  double learning_rate = 1e-3;
  double weight_decay = 0.01;
  bool record_trace = true;  // events and memory samples of every step (StepResult)
  // Where the stages compute, and what the trace's memory and compute timings come from; the
  // CPU device when null.
  std::shared_ptr<ComputeDevice> device;
  // Builds a stage's optimizer from its parameters; null: AdamW(learning_rate, weight_decay), in
  // its one-pass form (FusedAdamW).
  OptimizerFactory optimizer;
  // Activation checkpointing (DeepSpeed's activation_checkpoint_interval): > 0 keeps only the
  // input of every run of this many layers during the forward and recomputes the run in the
  // backward (with the random state of the forward); 1 is what `ppsim simulate --recompute` models.
  int activation_checkpoint_interval = 0;
  // > 0: gradients are scaled so that their global L2 norm (all stages of the pipeline, tied
  // weights counted once) is at most this before the optimizer step.
  double gradient_clipping = 0;
  // Models without declared shapes send a shape header with the first activation transfer of
  // each step on each stage-to-stage channel; the later micro-batches of the step must have the
  // same shapes (a sender whose tensors differ fails naming them). True: a header with every
  // transfer, for data whose shapes vary between the micro-batches of one step (DeepSpeed's
  // dynamic_shape).
  bool shapes_per_micro_batch = false;
  // The dtype the stages compute and send activations and gradients in: kFloat; kBFloat16
  // (Megatron's --bf16); kHalf (the same in fp16, CUDA only). In 16 bits the parameters hold
  // 16-bit copies of fp32 master weights during a step; the optimizer, its state, checkpoints
  // and the per-micro-batch gradient sums are fp32, and the loss is computed on fp32 logits.
  // Every rank must give the same.
  at::ScalarType dtype = at::kFloat;
  // Dynamic loss scaling (fp16 needs it, and PipelineEngine turns it on for kHalf; any dtype
  // takes it): the backward starts from the loss times the scale, the fp32 gradient sums are
  // divided by it, and a step whose gradients hold inf or nan on any rank of the pipeline is
  // skipped everywhere (torch.amp.GradScaler's rules).
  bool loss_scaling = false;
  LossScaleOptions loss_scale;  // GradScaler's defaults
  // An overlapped F&B step (a ForwardPass marked Instruction::overlaps_next_backward and the
  // rank's next backward, dualpipev's pairs) runs as one step when the model's experts exchange
  // tokens (a connected ExpertParallel of E > 1) on the CPU: the two passes on two threads, one
  // computing at a time, each giving the compute to the other while its all-to-all is on the
  // wire (docs/MOE-EXEC.md). False: one pass after the other. Every rank must give the same.
  bool overlap_paired_passes = true;
};

// The micro-batches of a step, pulled in micro-batch order, once each, and only on ranks that
// hold the first or the last stage (DeepSpeed's data iterator).
using MicroBatchSource = std::function<MicroBatch()>;

// What one step runs: another schedule than the runtime's (same stages on the same ranks, e.g.
// the inference schedule), the data, and whether to keep the last stage's outputs.
struct StepRequest {
  const Schedule* schedule = nullptr;      // null: the schedule the runtime was built with
  const MicroBatchSource* data = nullptr;  // null: the built-in synthetic data from first_sample
  std::int64_t first_sample = 0;
  bool keep_outputs = false;
};

// A failure while running: names this rank, the step and the instruction it was in.
class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct StepResult {
  double loss_sum = 0;  // over the micro-batches whose last stage is on this rank
  int loss_count = 0;
  double time_s = 0;  // this rank's time for the step
  std::int64_t peak_memory_bytes = 0;
  std::vector<traces::TraceEvent> events;  // ts_us relative to `origin_us`
  std::vector<traces::MemorySample> memory;
  double origin_us = 0;  // the steady clock (us) at the start of the step
  // With StepRequest::keep_outputs, on the rank of the last stage: its outputs per micro-batch.
  std::vector<TensorList> outputs;
  // With gradient_clipping: the global gradient norm before clipping (every rank has it).
  double grad_norm = -1;
  // With loss scaling: the scale this step's backward used, and whether its optimizer step was
  // skipped for inf/nan gradients.
  double loss_scale = 0;
  bool step_skipped = false;
  // The overlapped F&B steps this step ran as one (RuntimeOptions::overlap_paired_passes), and
  // when each of their passes computed: the rest of a pass's span it waited for its all-to-all
  // or for the other pass.
  int overlapped_pairs = 0;
  struct ComputeSpans {
    std::size_t event = 0;                                // the pass's index in `events`
    std::string overlapped_with;                          // the other pass ("3B1")
    std::vector<std::pair<double, double>> computing_us;  // relative to `origin_us`
  };
  std::vector<ComputeSpans> overlapped_passes;
};

// One stage held by this rank, with its optimizer.
struct StageState;

class PipelineRuntime {
 public:
  // `world` is the transport over all ranks. Collective set-up (data-parallel and tied-weight
  // groups) happens here, so every rank must construct its runtime at the same point.
  PipelineRuntime(const ModelSpec& model, const Schedule& schedule, const Partition& partition, Transport& world,
                  GridPosition position, RuntimeOptions options);
  ~PipelineRuntime();

  // Runs the program once over micro-batches first_sample .. first_sample + M - 1 of this
  // replica. Throws RuntimeError naming rank, step, instruction and peer on failure.
  StepResult run_step(int step_index, std::int64_t first_sample);
  // The same with the request's schedule and data. Throws RuntimeError when the schedule places
  // the stages differently from the runtime's, naming both.
  StepResult run_step(int step_index, const StepRequest& request);

  // Separate timings of the two halves of a backward (input gradient, then weight gradient)
  // and of a full backward, for calibration: full-backward schedules time only whole
  // backwards. Runs outside any step on a synthetic micro-batch of each stage held here,
  // `repetitions` times; the weights, gradients, optimizer state and data of the run are
  // untouched (gradients are returned, not accumulated).
  struct BackwardSplitSamples {
    std::vector<double> full_us, input_us, weight_us;
  };
  struct BackwardSplitTiming {
    int stage = 0;
    BackwardSplitSamples own;    // the stage as it runs
    BackwardSplitSamples inner;  // the first stage only: its layers after the first, as an inner stage runs them
  };
  std::vector<BackwardSplitTiming> probe_backward_split(int repetitions);

  // The stages of this rank (ascending), for checkpoints.
  std::vector<int> stages() const;
  StageModule& stage_module(int stage);
  // The stage's optimizer; throws RuntimeError when the stage has no parameters.
  torch::optim::Optimizer& optimizer(int stage);
  // (stage, first layer, end layer) bounds as used.
  const Partition& partition() const { return partition_; }

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  Partition partition_;
};

}  // namespace pipescope::exec
