// PipelineEngine: pipeline-parallel training of a user's model (DeepSpeed's PipelineEngine).
// Built on every rank from the same PipelineModule, a schedule and a transport over all ranks;
// each rank builds only the layers of its stages and drives a PipelineRuntime with the
// schedule's program. train_batch runs one optimizer step over the schedule's micro-batches;
// eval_batch runs forwards only. pprun is a client like any other: it trains the built-in models
// with train_synthetic_batch and checkpoints through the engine. docs/ENGINE.md is the user guide.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipescope/core/schedule.hpp"
#include "pipescope/exec/checkpoint.hpp"
#include "pipescope/exec/pipeline_module.hpp"
#include "pipescope/exec/runtime.hpp"
#include "pipescope/exec/transport.hpp"

namespace pipescope::exec {

// The engine's options: the runtime's (timeout, learning rate and weight decay, the optimizer,
// device, dtype, recomputation, clipping, shapes, loss scaling: RuntimeOptions, handed to the
// runtime as they are) and what only the engine reads, each beside its default.
struct EngineOptions : RuntimeOptions {
  int micro_batches = 4;                  // M, for schedules given by name
  int chunks = 1;                         // stages per rank, for looping and V schedules given by name
  int micro_batch_size = 0;               // samples per micro-batch (set_train_batch_size needs it)
  int data_parallel = 1;                  // replicas: the world is data_parallel x pipeline ranks
  std::string partition = "parameters";   // uniform | parameters | type:REGEX | cost
  std::vector<std::string> split_points;  // layer names that start a stage (instead of `partition`)
  LossFunction loss;                      // overrides the module's loss
  int loss_stage = -1;                    // where the loss is computed: must be the last stage (-1: it)
  // Keep memory freed by tensors in the process (retain_freed_cpu_memory, device.hpp): a
  // process-wide malloc setting, on by default because returned memory is faulted in again on
  // every micro-batch.
  bool retain_freed_cpu_memory = true;
  std::string eval_schedule;  // "": deepspeed-inference when it fits, else the forwards of the training schedule
};

struct EvalResult {
  double loss = std::numeric_limits<double>::quiet_NaN();  // mean over micro-batches with labels
  std::vector<TensorList> outputs;                         // per micro-batch, on the rank of the last stage, when asked
};

class PipelineEngine {
 public:
  // `schedule`: a name of SPEC.md section 2 (with options.micro_batches and .chunks) or
  // "file:PATH". Skip connections between stages on different ranks that are not neighbours
  // get their own transfers added to it (with_skip_transfers; schedule() shows the result). Throws UsageError or ScheduleError naming what does not fit: a schedule for
  // another number of ranks or stages, an unknown split point, a loss on an inner stage.
  PipelineEngine(PipelineModule module, const std::string& schedule, Transport& world, EngineOptions options = {});
  PipelineEngine(PipelineModule module, Schedule schedule, Transport& world, EngineOptions options = {});
  // The schedule and its partition as the caller already built them (pprun's run plan builds
  // both once, before any worker starts): the engine checks that they fit the world and the
  // model, and splits nothing again (options.partition and .split_points are not read).
  PipelineEngine(PipelineModule module, Schedule schedule, Partition partition, Transport& world,
                 EngineOptions options = {});
  ~PipelineEngine();
  PipelineEngine(const PipelineEngine&) = delete;
  PipelineEngine& operator=(const PipelineEngine&) = delete;

  // One optimizer step over M micro-batches pulled from `data` (on the first and last stages
  // only). Returns the mean loss, the same on every rank. Throws RuntimeError naming the rank,
  // step, instruction, stage and tensor on failure.
  double train_batch(const MicroBatchSource& data);
  double train_batch();  // from set_data_loader
  // Forwards only (the inference schedule); the loss when the data has labels.
  EvalResult eval_batch(const MicroBatchSource& data, bool return_outputs = false);
  void set_data_loader(MicroBatchSource data);

  // One optimizer step on the model's built-in synthetic data (the models of make_model_spec,
  // as pprun trains them): replica d takes micro-batch samples data_position() + d*M .. + M-1,
  // and the position moves on by M x data_parallel. Returns this rank's result: the loss is not
  // exchanged (loss_sum and loss_count are this rank's), so a caller gathers it with whatever
  // else it collects. Throws RuntimeError as train_batch does. A forward-only schedule (e.g.
  // deepspeed-inference) runs its forwards and losses, as pprun measures it; train_batch
  // refuses one.
  const StepResult& train_synthetic_batch();
  // The same step on this replica's micro-batches pulled from `data` (pprun's text data): the
  // caller gives replica() the global micro-batches data_position() + replica() x M .. + M - 1,
  // and the position moves on by M x data_parallel as above.
  const StepResult& train_replica_batch(const MicroBatchSource& data);
  // Micro-batches consumed by all replicas together (a global count: replica d of the next step
  // starts at data_position() + d x M). Global samples = data_position() x micro-batch size, so
  // a run resumed with another data_parallel or M continues the same stream of samples.
  std::int64_t data_position() const { return data_position_; }
  int replica() const { return position_.replica; }  // this rank's data-parallel replica

  // Checkpoints (checkpoint.hpp): every rank calls save_checkpoint after the same step; rank 0
  // makes it the one to resume from, with `identity` and this engine's checkpoint_layout() in the
  // manifest, once every rank's file is on disk, and no rank returns before the manifest names
  // it. load_checkpoint (every rank) loads this rank's layers of the newest checkpoint of
  // `manifest` (read_manifest(dir)) whose files every rank finds intact, whatever pipeline size,
  // chunks, partition, schedule or replicas wrote it, and resumes global_steps() and
  // data_position() from it; the choice says which it was and which newer ones were damaged
  // (fallback_notice). Throws UsageError when none is intact or the checkpoint is of another
  // model (layout_refusal). Comparing the manifest's identity with the run's is the caller's
  // choice (identity_refusal). Every rank must call these: they exchange with the others.
  void save_checkpoint(const std::string& dir, const nlohmann::json& identity);
  CheckpointChoice load_checkpoint(const std::string& dir, const Manifest& manifest);
  // What a checkpoint of this engine records of its model and layout (every rank calls it).
  CheckpointLayout checkpoint_layout();

  // The number of micro-batches of the next steps (schedules given by name only).
  void set_micro_batches(int micro_batches);
  // train_batch_size = micro_batch_size x micro-batches x data_parallel (DeepSpeed's).
  void set_train_batch_size(int samples);
  int micro_batches() const { return schedule_.num_micro_batches; }
  int train_batch_size() const;

  const Schedule& schedule() const { return schedule_; }
  const Partition& partition() const { return partition_; }
  // How each skip connection of the model travels between this split's stages.
  const std::vector<SkipRoute>& skip_routes() const { return skip_routes_; }
  const ModelSpec& model() const { return module_.spec(); }
  std::vector<int> stages() const;  // held by this rank
  bool is_first_stage() const;
  bool is_last_stage() const;
  int global_steps() const { return global_steps_; }
  const StepResult& last_step() const { return last_step_; }  // events, memory, gradient norm
  PipelineRuntime& runtime() { return *runtime_; }

 private:
  void start(std::optional<Partition> given_partition);
  void split_into_stages(std::optional<Partition> given_partition);
  void rebuild_eval_schedule();
  // Every rank computes in the same dtype: transfers without shape headers carry no dtype.
  void check_same_dtype_everywhere();
  const StepResult& run_training_step(const StepRequest& request);
  // Every rank's `mine`, in rank order (`what` names the exchange in an error).
  std::vector<double> gather_doubles(const std::vector<double>& mine, const char* what);

  PipelineModule module_;
  Schedule schedule_;
  bool schedule_by_name_ = false;
  std::string schedule_name_;
  Schedule eval_schedule_;
  Partition partition_;
  std::vector<SkipRoute> skip_routes_;
  Transport& world_;
  EngineOptions options_;
  GridPosition position_;
  std::unique_ptr<PipelineRuntime> runtime_;
  MicroBatchSource data_loader_;
  StepResult last_step_;
  int global_steps_ = 0;
  int eval_steps_ = 0;
  std::int64_t data_position_ = 0;  // global micro-batches consumed (data_position())
};

// The forwards of a training schedule: backwards, gradient transfers and end-of-batch
// collectives removed (what eval_batch runs when no inference schedule fits).
Schedule forward_only(const Schedule& training);

}  // namespace pipescope::exec
