// A pprun worker: a client of PipelineEngine. It opens its device and world, builds an engine for
// the built-in model, resumes, drives the steps and writes metrics, the measured trace
// (measured_trace.hpp) and checkpoints. The plan it runs is made in run_plan.cpp.
#include "pprun/worker.hpp"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <thread>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/terminal_text.hpp"
#include "pipescope/exec/checkpoint.hpp"
#include "pipescope/exec/device.hpp"
#include "pipescope/exec/engine.hpp"
#include "pipescope/exec/transport.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "data/text_batches.hpp"
#include "moe/expert_call_probe.hpp"
#include "moe/expert_calls.hpp"
#include "pprun/core_binding.hpp"
#include "pprun/measured_trace.hpp"
#include "pprun/metrics_row.hpp"
#include "pprun/rank_trace_record.hpp"
#include "pprun/stolen_time.hpp"
#include "pprun/thread_cpu_time.hpp"
#include "shared_gpu.hpp"
#include "threads.hpp"
#include "transport_errors.hpp"

namespace pipescope::exec {
namespace {

// Test hook: PIPESCOPE_FAULT="RANK:STEP:kill|hang" makes that rank die or hang at the start
// of that step, as a crashed or wedged worker would.
void maybe_inject_fault(int rank, int step) {
  const char* spec = std::getenv("PIPESCOPE_FAULT");
  if (!spec) return;
  int fault_rank = -1, fault_step = -1;
  char action[16] = {};
  if (std::sscanf(spec, "%d:%d:%15s", &fault_rank, &fault_step, action) != 3) return;
  if (fault_rank != rank || fault_step != step) return;
  if (std::string(action) == "kill") std::raise(SIGKILL);
  if (std::string(action) == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// The held-out set --eval-every measures: this many forward-only batches of M micro-batches per
// replica, the same windows at every evaluation, so the figures of a run compare with each other.
constexpr int kHeldOutBatches = 2;

// Repetitions of the backward split probe after the traced step (calibration; a few backwards).
constexpr int kBackwardSplitProbeRepetitions = 5;
// Repetitions of the expert-call probe at each of its row counts (a few calls of one expert).
constexpr int kExpertCallProbeRepetitions = 5;
// How long a rank on cores of its own waits for an expert exchange with its core kept busy
// before it sleeps (transport_wait.hpp): longer than this machine's exchanges of tiny-moe
// (0.3 to 7 ms), short enough that a peer that stalls costs no more than that.
constexpr std::chrono::microseconds kExchangeSpinLimit{20000};

// The per-step numbers every rank contributes to rank 0.
// kStolenS: seconds the host took from the rank's cores during the step (stolen_time.hpp);
// kTransportCpuS: CPU seconds the rank's transport threads ran in it (thread_cpu_time.hpp);
// negative where the system does not say.
enum StatField { kLossSum, kLossCount, kTimeS, kPeakBytes, kStolenS, kTransportCpuS, kNumStatFields };

// Every rank's `field` of the step, from the gathered figures; empty when a rank's system does
// not say.
std::vector<double> per_rank(const std::vector<double>& gathered, int world_size, StatField field) {
  std::vector<double> values;
  for (int r = 0; r < world_size; ++r) {
    const double v = gathered[r * kNumStatFields + field];
    if (v < 0) return {};
    values.push_back(v);
  }
  return values;
}

// Rank 0's metrics row of a step from every rank's gathered figures: the loss over every
// replica's micro-batches, each rank's peak memory.
MetricsRow metrics_row(int step, const std::vector<double>& gathered, int world_size, double iteration_time_s) {
  MetricsRow row;
  row.step = step;
  double loss_sum = 0, loss_count = 0;
  for (int r = 0; r < world_size; ++r) {
    loss_sum += gathered[r * kNumStatFields + kLossSum];
    loss_count += gathered[r * kNumStatFields + kLossCount];
    row.peak_memory_bytes.push_back(static_cast<std::int64_t>(gathered[r * kNumStatFields + kPeakBytes]));
  }
  row.loss = loss_count > 0 ? loss_sum / loss_count : 0.0;
  row.iteration_time_s = iteration_time_s;
  return row;
}

class Worker {
 public:
  Worker(const RunPlan& plan, const WorkerEnvironment& env) : plan_(plan), env_(env) {}

  void run() {
    const RunOptions& o = plan_.options;
    // --bind-cores (or its default, binds_cores): this rank, with the threads it starts later
    // (its transport's too), runs on its share of the launcher's cores (core_binding.hpp).
    bound_cores_ = binds_cores(o.bind_cores, o.no_bind_cores, env_);
    if (bound_cores_) {
      const int ranks_here = local_world_size_for_binding(env_);
      own_cores_ = allowed_cores().size() >= static_cast<std::size_t>(ranks_here);
      bind_to_core_share(env_.local_rank, ranks_here);
    }
    const std::vector<pid_t> threads_before_transport = process_threads();
    // --device cuda: GPU LOCAL_RANK of this node (modulo the GPUs there), NCCL between ranks.
    const std::shared_ptr<ComputeDevice> device =
        make_local_device(o.device == "cuda" ? at::kCUDA : at::kCPU, env_.local_rank);
    device_ = device;
    World world = make_world(device->device(), world_options(env_, o.timeout));
    if (o.device == "cuda" && env_.rank == 0 && !o.quiet &&
        ranks_share_gpus(env_.local_world_size, cuda_device_count()))
      std::fputs(shared_gpu_notice(env_.local_world_size, cuda_device_count()).c_str(), stderr);
    std::ranges::set_difference(process_threads(), threads_before_transport, std::back_inserter(transport_threads_));
    world_ = std::move(world.transport);
    store_ = world.store;

    if (!uses_synthetic_data(o)) text_.emplace(open_text_data(o));
    connect_expert_parallel();
    PipelineEngine engine(PipelineModule(plan_.model), plan_.schedule, plan_.partition, *world_,
                          engine_options(device));
    // Said while the engine and the world still hold their connections: the ranks this failure
    // stops notice only once they close, so the launcher hears from this rank first.
    try {
      train(engine);
    } catch (...) {
      report_failure_to_launcher(env_.rank);
      throw;
    }
  }

 private:
  void train(PipelineEngine& engine) {
    const RunOptions& o = plan_.options;
    if (o.resume) resume(engine);

    const bool progress = env_.rank == 0 && !o.quiet && isatty(STDERR_FILENO);
    // A resumed run keeps the history of the steps before its checkpoint; rows of later steps
    // are dropped, since those steps run again.
    std::string metrics = env_.rank == 0 && o.resume ? metrics_before(o.metrics_path, engine.global_steps()) : "";
    int last_saved = engine.global_steps();
    // Traces are handed to rank 0 and written after the last step: doing it between steps
    // (events through the store, JSON, a file synced to disk) slows the steps that follow, and
    // the traced steps must run as untraced ones do, since calibration learns from them.
    std::vector<TracedStep> traced_steps;
    std::vector<moe::ExpertCallRecord> traced_expert_calls;  // the expert-call probe's rows come from them
    StolenTimeMeter stolen;                                  // after the binding: the cores this rank runs on
    for (int step = engine.global_steps(); step < o.steps; ++step) {
      maybe_inject_fault(env_.rank, step);
      const int last_step = o.steps - 1;
      const bool traced = !o.trace_path.empty() && step > last_step - traced_step_count(o);
      // A traced step starts together on every rank, so rank 0's writing of the metrics file
      // after the previous step does not show up as a pipeline delay.
      if (traced) barrier();
      stolen.start();
      const auto transport_cpu_before = threads_cpu_seconds(transport_threads_);
      if (expert_parallel_) {  // an evaluation's or a probe's, before this step
        expert_parallel_->take_records();
        moe::expert_call_log(*expert_parallel_).take_records();
      }
      const auto started = std::chrono::steady_clock::now();
      const StepResult& result = text_ ? train_on_text(engine) : engine.train_synthetic_batch();
      const std::vector<AllToAllRecord> all_to_all =
          expert_parallel_ ? expert_parallel_->take_records() : std::vector<AllToAllRecord>{};
      const std::vector<moe::ExpertCallRecord> expert_calls =
          expert_parallel_ ? moe::expert_call_log(*expert_parallel_).take_records()
                           : std::vector<moe::ExpertCallRecord>{};

      std::vector<double> mine(kNumStatFields);
      mine[kLossSum] = result.loss_sum;
      mine[kLossCount] = result.loss_count;
      mine[kTimeS] = result.time_s;
      mine[kPeakBytes] = static_cast<double>(result.peak_memory_bytes);
      mine[kStolenS] = stolen.elapsed().value_or(-1.0);
      const auto transport_cpu_after = threads_cpu_seconds(transport_threads_);
      // A transport thread that ended in the step takes its time with it: never below 0.
      mine[kTransportCpuS] = transport_cpu_before && transport_cpu_after
                                 ? std::max(0.0, *transport_cpu_after - *transport_cpu_before)
                                 : -1.0;
      auto gathered = gather(mine, step);
      const double iteration_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      const std::vector<double> stolen_time_s = per_rank(gathered, env_.world_size, kStolenS);
      // After the step's timing: an evaluation is not part of the step.
      const bool evaluate_now = o.eval_every > 0 && ((step + 1) % o.eval_every == 0 || step == last_step);
      const double eval_loss = evaluate_now ? evaluate(engine) : 0.0;

      if (traced) {
        traced_expert_calls.insert(traced_expert_calls.end(), expert_calls.begin(), expert_calls.end());
        traced_steps.push_back({step,
                                iteration_time_s,
                                stolen_time_s,
                                per_rank(gathered, env_.world_size, kTransportCpuS),
                                result,
                                {},
                                {},
                                traced_step_path(o.trace_path, step, last_step),
                                {}});
        if (step == last_step) probe_after_last_step(engine, traced_expert_calls, traced_steps.back());
        append_pass_args(traced_steps.back().result, traced_steps.back().args, expert_calls);
        append_all_to_all_events(traced_steps.back().result, traced_steps.back().args, env_.rank, all_to_all);
      }
      if (env_.rank == 0) {
        MetricsRow row = metrics_row(step, gathered, env_.world_size, iteration_time_s);
        const double loss = row.loss;
        row.recompute_layers = o.recompute_layers;
        row.stolen_time_s = stolen_time_s;
        if (result.grad_norm >= 0) row.grad_norm = result.grad_norm;  // the same on every rank
        if (evaluate_now) row.eval_loss = eval_loss;
        metrics += metrics_line(row);
        if (!o.metrics_path.empty()) write_file_atomic(o.metrics_path, metrics);
        if (progress)
          std::fprintf(stderr, "\rpprun: step %d/%d  loss %.6f  %.3f s/step ", step + 1, o.steps, loss,
                       iteration_time_s);
        if (evaluate_now && !o.quiet) {
          if (progress) std::fprintf(stderr, "\n");
          std::printf("pprun: step %d/%d  eval_loss %.6f  (held-out)\n", step + 1, o.steps, eval_loss);
          std::fflush(stdout);
        }
      }
      const int done = engine.global_steps();
      const bool checkpoint_now =
          !o.checkpoint_dir.empty() && ((o.checkpoint_every > 0 && done % o.checkpoint_every == 0) || done == o.steps);
      if (checkpoint_now) {
        engine.save_checkpoint(o.checkpoint_dir, run_identity(plan_));
        last_saved = done;
      }
    }
    if (!o.checkpoint_dir.empty() && last_saved != engine.global_steps())
      engine.save_checkpoint(o.checkpoint_dir, run_identity(plan_));
    for (const auto& t : traced_steps) write_trace(t);
    if (progress) std::fprintf(stderr, "\n");
    barrier();  // rank 0 serves the store: it leaves last
  }

  // Loads the newest intact checkpoint (make_run_plan found the manifest and checked that it
  // belongs to this run), saying so when a damaged newer one was passed over.
  void resume(PipelineEngine& engine) {
    const RunOptions& o = plan_.options;
    const std::optional<Manifest> manifest = read_manifest(o.checkpoint_dir);
    if (!manifest) throw UsageError(fmt::format("option --resume: {} holds no checkpoint manifest", o.checkpoint_dir));
    check_resumable(plan_, *manifest);
    const CheckpointChoice choice = engine.load_checkpoint(o.checkpoint_dir, *manifest);
    if (env_.rank == 0 && !choice.damaged.empty())
      std::fprintf(stderr, "pprun: warning: %s\n", printable(fallback_notice(o.checkpoint_dir, choice)).c_str());
    if (choice.loaded.step >= o.steps) throw UsageError(nothing_to_do(o, choice.loaded.step));
  }

  // One step on this replica's global micro-batches of the text: data_position() + replica x M
  // onwards (engine.hpp), so replicas never share a sample and the stream goes on where a
  // checkpoint left it, whatever the replica count.
  const StepResult& train_on_text(PipelineEngine& engine) {
    std::int64_t next = replica_first_micro_batch(engine.data_position(), engine.replica(), engine.micro_batches());
    const MicroBatchSource source = [this, &next] { return text_->training_micro_batch(next++); };
    return engine.train_replica_batch(source);
  }

  // The mean loss of the held-out set (kHeldOutBatches forward-only batches; replica d takes
  // held-out micro-batches (c x dp + d) x M .. + M - 1 of batch c), on every rank.
  double evaluate(PipelineEngine& engine) {
    const int micro_batches = engine.micro_batches();
    double sum = 0;
    for (int c = 0; c < kHeldOutBatches; ++c) {
      std::int64_t next =
          (static_cast<std::int64_t>(c) * plan_.options.data_parallel + engine.replica()) * micro_batches;
      const MicroBatchSource source = [this, &next] { return text_->held_out_micro_batch(next++); };
      sum += engine.eval_batch(source).loss;
    }
    return sum / kHeldOutBatches;
  }

  std::vector<double> gather(const std::vector<double>& mine, int step) {
    auto input = at::tensor(mine, at::TensorOptions().dtype(at::kDouble));
    auto output = at::empty({static_cast<std::int64_t>(mine.size()) * env_.world_size}, input.options());
    try {
      world_->all_gather(input, output)->wait(timeout());
    } catch (const std::exception& e) {
      throw RuntimeError(fmt::format("rank {}: step {}: end-of-step metrics exchange: {}", env_.rank, step, e.what()));
    }
    return std::vector<double>(output.data_ptr<double>(), output.data_ptr<double>() + output.numel());
  }

  void barrier() {
    auto t = at::zeros({1});
    try {
      world_->all_reduce_sum(t)->wait(timeout());
    } catch (const std::exception& e) {
      throw RuntimeError(fmt::format("rank {}: barrier: {}", env_.rank, e.what()));
    }
  }

  std::chrono::milliseconds timeout() const { return plan_.options.timeout; }

  // The probes of the last traced step, after it, on every rank at once: the backward's two
  // halves timed apart and, in MoE models, the experts' calls at rows around those they got in
  // the traced steps (`calls`).
  void probe_after_last_step(PipelineEngine& engine, const std::vector<moe::ExpertCallRecord>& calls,
                             TracedStep& traced) {
    traced.probe = engine.runtime().probe_backward_split(kBackwardSplitProbeRepetitions);
    if (!expert_parallel_) return;
    traced.expert_call_probe = moe::probe_expert_calls(engine.runtime(), engine.model(), *device_,
                                                       parse_compute_dtype(plan_.options.dtype, "option --dtype"),
                                                       calls, kExpertCallProbeRepetitions);
  }

  // MoE models: the expert-parallel groups, on every rank before the engine builds its own
  // groups (the runtime gives the auxiliary loss's gradient its share of the step's).
  void connect_expert_parallel() {
    expert_parallel_ = plan_.model.expert_parallel;
    if (!expert_parallel_) return;
    // On a GPU the exchanges and the experts' calls are timed by the device, as the passes are.
    expert_parallel_->time_on(device_);
    moe::expert_call_log(*expert_parallel_).time_on(device_);
    // On cores of its own a rank keeps its core through an exchange's wait (transport_wait.hpp).
    if (own_cores_ && plan_.options.device == "cpu") expert_parallel_->set_spin_limit(kExchangeSpinLimit);
    const int pipeline_ranks = plan_.pipeline_ranks;
    expert_parallel_->connect(*world_, env_.rank / pipeline_ranks, plan_.options.data_parallel,
                              env_.rank % pipeline_ranks, pipeline_ranks, timeout());
  }

  // The engine pprun drives, on the plan's schedule and partition (make_run_plan built both):
  // the command line's training settings (recomputation included), the rest the engine's
  // defaults (AdamW with weight decay 0.01, no clipping). The one place RunOptions become
  // EngineOptions.
  EngineOptions engine_options(std::shared_ptr<ComputeDevice> device) const {
    const RunOptions& o = plan_.options;
    EngineOptions e;
    e.micro_batch_size = o.micro_batch_size;
    e.data_parallel = o.data_parallel;
    e.learning_rate = o.learning_rate;
    e.gradient_clipping = o.clip_grad;
    e.activation_checkpoint_interval = o.recompute_layers;
    e.overlap_paired_passes = !o.no_overlap_moe_comm;
    e.timeout = o.timeout;
    e.device = std::move(device);
    e.dtype = parse_compute_dtype(o.dtype, "option --dtype");
    return e;
  }

  // This rank's part of a trace: rank_trace_record and the cores its threads may run on.
  RankTraceRecord rank_trace(const TracedStep& traced) const {
    RankTraceRecord record = rank_trace_record(traced.result, traced.probe, traced.expert_call_probe, traced.args);
    record.cores = core_list(allowed_cores());
    std::vector<int> transport_cores;  // the union over the transport's threads
    for (pid_t tid : transport_threads_) std::ranges::copy(thread_cores(tid), std::back_inserter(transport_cores));
    std::ranges::sort(transport_cores);
    transport_cores.erase(std::unique(transport_cores.begin(), transport_cores.end()), transport_cores.end());
    record.transport_cores = core_list(transport_cores);
    return record;
  }

  // Every rank hands its events to rank 0 through the store; rank 0 writes one file with the
  // earliest event of any rank at 0.
  void write_trace(const TracedStep& traced) {
    const int step = traced.step;
    const std::string prefix = fmt::format("trace/{}/", step);
    if (env_.rank != 0) {
      store_->set(prefix + std::to_string(env_.rank), nlohmann::json(rank_trace(traced)).dump());
      return;
    }
    std::vector<RankTraceRecord> records{rank_trace(traced)};
    for (int r = 1; r < env_.world_size; ++r)
      records.push_back(nlohmann::json::parse(store_->get(prefix + std::to_string(r))).get<RankTraceRecord>());
    traces::write_trace(measured_trace(plan_, traced, records, bound_cores_), traced.path);
  }

  const RunPlan& plan_;
  WorkerEnvironment env_;
  std::unique_ptr<Transport> world_;
  std::shared_ptr<KeyValueStore> store_;
  std::shared_ptr<ComputeDevice> device_;            // the one the engine computes on (the probes time it)
  std::vector<pid_t> transport_threads_;             // started by the transport: they move data between ranks
  bool bound_cores_ = false;                         // this rank runs on its share of the cores (binds_cores)
  bool own_cores_ = false;                           // and that share is its own: no other rank's
  std::shared_ptr<ExpertParallel> expert_parallel_;  // MoE models only
  std::optional<TextBatches> text_;                  // the text data; empty for synthetic data
};

}  // namespace

int run_worker(const RunPlan& plan, const WorkerEnvironment& env) {
  // A peer that died closes its sockets; writing to one must be an error this rank reports
  // (naming the step and the peer), not a SIGPIPE that kills it silently.
  std::signal(SIGPIPE, SIG_IGN);
  keep_library_logs_quiet();  // this rank's one error line says what failed, not c10d's log
  try {
    install_counting_cpu_allocator();
    retain_freed_cpu_memory();
    set_rank_threads(plan.options.threads_per_rank);
    Worker(plan, env).run();
    return 0;
  } catch (const RuntimeError& e) {
    report_failure_to_launcher(env.rank);
    std::fprintf(stderr, "pprun: error: %s\n", printable(e.what()).c_str());
  } catch (const UsageError& e) {
    // Bad input found only here (a checkpoint that does not fit): usage status.
    report_failure_to_launcher(env.rank);
    std::fprintf(stderr, "pprun: error: rank %d: %s\n", env.rank, printable(e.what()).c_str());
    return 2;
  } catch (const std::exception& e) {
    report_failure_to_launcher(env.rank);
    std::string message = e.what();
    if (auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl);
    std::fprintf(stderr, "pprun: error: rank %d: %s\n", env.rank, printable(message).c_str());
  }
  return 1;
}

}  // namespace pipescope::exec
