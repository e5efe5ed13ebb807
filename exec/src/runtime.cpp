// The instruction interpreter of one rank (see runtime.hpp for the exactness rules): it
// dispatches each instruction of the rank's program to the part that does that job, as
// torch's _PipelineScheduleRuntime does, and wraps what fails in an error naming the place.
// The parts live under runtime/: the stages' compute, the point-to-point channel, the
// collectives, the step recorder and the backward-split probe.
#include "pipescope/exec/runtime.hpp"

#include <ATen/ThreadLocalState.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <array>
#include <exception>
#include <optional>
#include <thread>

#include "runtime/backward_split_probe.hpp"
#include "runtime/collectives.hpp"
#include "runtime/compute_baton.hpp"
#include "runtime/compute_weights.hpp"
#include "error_text.hpp"
#include "runtime/p2p_channel.hpp"
#include "runtime/paired_steps.hpp"
#include "runtime/rank_context.hpp"
#include "runtime/stage_compute.hpp"
#include "runtime/step_recorder.hpp"

namespace pipescope::exec {

class PipelineRuntime::Impl {
 public:
  Impl(const ModelSpec& model, const Schedule& schedule, const Partition& partition, Transport& world,
       GridPosition position, RuntimeOptions options)
      : ctx_(model, schedule, partition, world, position, std::move(options)),
        recorder_(ctx_.world_rank()),
        compute_(ctx_, recorder_),
        collectives_(ctx_, recorder_),
        p2p_(ctx_, recorder_) {}

  StepResult run_step(int step_index, const StepRequest& request) {
    begin_step(step_index, request);
    const Program& program = program_to_run();
    ComputeDevice& device = *ctx_.options.device;
    for (std::size_t step = 0; step < program.size(); ++step)
      for (std::size_t i = 0; i < program[step].size(); ++i) {
        const Instruction& instr = program[step][i];
        ctx_.current = &instr;
        ctx_.current_step = static_cast<int>(step);
        if (paired_in_use_ && runtime::starts_pair(program[step], i)) {
          execute_pair(instr, program[step][++i]);
        } else {
          runtime::PassScope pass(instr);
          execute(instr);
        }
        recorder_.sample_memory(device);
      }
    ctx_.current = nullptr;
    p2p_.finish_all_receives();  // torch's semantics: receives whose data no compute took
    // A forward-only step ends with the 16-bit weights in place (a training step put the masters
    // back before its optimizer step).
    for (auto& [s, st] : ctx_.stages) runtime::restore_master_weights(*st);
    if (ctx_.active->is_training()) collectives_.finish_training_step();
    try {
      p2p_.drain_sends();
    } catch (const std::exception& e) {
      ctx_.fail(first_line(e.what()), "the sends of this step");
    }
    return recorder_.finish(device);
  }

  std::vector<BackwardSplitTiming> probe_backward_split(int repetitions) {
    return runtime::probe_backward_split(ctx_, repetitions);
  }

  std::vector<int> stage_ids() const {
    std::vector<int> ids;
    for (const auto& [s, st] : ctx_.stages) ids.push_back(s);
    return ids;
  }
  StageState& stage(int s) { return ctx_.stage(s); }

 private:
  void begin_step(int step_index, const StepRequest& request) {
    const Schedule* schedule = request.schedule ? request.schedule : ctx_.built_for;
    const Schedule& built_for = *ctx_.built_for;
    if (schedule->num_stages != built_for.num_stages || schedule->stage_to_rank != built_for.stage_to_rank)
      throw RuntimeError(
          fmt::format("rank {}: step {}: schedule '{}' places stages on ranks [{}], but the stages were built "
                      "for schedule '{}' with [{}]",
                      ctx_.world_rank(), step_index, schedule->name, fmt::join(schedule->stage_to_rank, ", "),
                      built_for.name, fmt::join(built_for.stage_to_rank, ", ")));
    ctx_.active = schedule;
    ctx_.step_index = step_index;
    scale_auxiliary_loss_gradient();
    collectives_.begin_step();
    p2p_.begin_step(schedule->communication == Communication::Torch);
    for (auto& [s, st] : ctx_.stages) {
      st->micro_batches.clear();
      st->accumulator.reset(ctx_.micro_batch_count());
      st->grads_final = st->grads_reduced = st->stepped = false;
    }
    recorder_.begin_step(*ctx_.options.device);
    compute_.begin_step(request);
  }

  // A MoE layer's auxiliary load-balancing loss is part of each micro-batch's loss, so its
  // gradient gets what seed_backward gives the loss: 1 / (micro-batches x replicas) and, with
  // loss scaling, this step's scale (the fp32 sums are divided by it before the step).
  void scale_auxiliary_loss_gradient() {
    const auto& expert_parallel = ctx_.model.expert_parallel;
    if (!expert_parallel) return;
    double scale = ctx_.micro_batch_loss_share();
    if (ctx_.options.loss_scaling) scale *= ctx_.loss_scaler.scale();
    expert_parallel->set_aux_gradient_scale(scale);
  }

  // Overlapped F&B steps run as one where the experts exchange tokens on the CPU (the CUDA
  // device would need a stream per pass: there the passes run one after the other).
  bool overlaps_pairs() const {
    const auto& ep = ctx_.model.expert_parallel;
    return ctx_.options.overlap_paired_passes && ctx_.device() == at::kCPU && ep && ep->distributed();
  }

  // This rank's program of the step: the paired one (paired_steps.hpp) when pairs overlap,
  // made once per schedule.
  const Program& program_to_run() {
    const Schedule& active = *ctx_.active;
    const auto rank = static_cast<std::size_t>(ctx_.position.pipe_rank);
    paired_in_use_ = false;
    if (!overlaps_pairs()) return active.programs.at(rank);
    if (!paired_source_ || !(*paired_source_ == active)) {
      paired_source_ = active;
      paired_ = runtime::with_paired_steps(active);
    }
    if (!paired_) return active.programs.at(rank);
    paired_in_use_ = true;
    return paired_->schedule.programs.at(rank);
  }

  // A pair's forward on this thread, its backward on a worker, each holding the compute baton
  // while it computes (compute_baton.hpp); the forward computes first. The worker gets this
  // thread's thread-local state (grad mode and the rest). Results leave by the sends after the
  // pair, once both are done.
  void execute_pair(const Instruction& forward, const Instruction& backward) {
    for (const Instruction* instr : {&forward, &backward}) {
      ctx_.current = instr;
      if (!ctx_.holds(instr->stage)) ctx_.fail_here("the stage is not held by this rank");
      if (instr->micro_batch < 0 || instr->micro_batch >= ctx_.micro_batch_count())
        ctx_.fail_here("micro-batch out of range");
      try {
        p2p_.finish_receives(instr->stage, instr->micro_batch, instr == &forward);
      } catch (const RuntimeError&) {
        throw;
      } catch (const std::exception& e) {
        ctx_.fail_here(first_line(e.what()));
      }
    }
    runtime::ComputeBaton baton(ctx_.current);
    std::exception_ptr backward_error;
    const at::ThreadLocalState thread_state;
    std::thread worker([&] {
      const at::ThreadLocalStateGuard guard(thread_state);
      try {
        run_pair_pass(backward, baton, 1);
      } catch (...) {
        backward_error = std::current_exception();
      }
    });
    std::exception_ptr forward_error;
    try {
      run_pair_pass(forward, baton, 0);
    } catch (...) {
      forward_error = std::current_exception();
    }
    worker.join();
    ctx_.current = &forward;
    if (forward_error) std::rethrow_exception(forward_error);
    if (backward_error) std::rethrow_exception(backward_error);
    record_pair(forward, backward, baton);
  }

  // One pass of a pair, its event from its first compute to its last; what fails is named at
  // its instruction, while it holds the baton.
  void run_pair_pass(const Instruction& instr, runtime::ComputeBaton& baton, int pass) {
    const runtime::PassScope scope(instr, &baton, pass);
    const runtime::HeldBaton held(baton, pass, instr);
    try {
      const auto index = recorder_.begin_event(traces::Lane::Compute, instr);
      if (instr.op == Op::ForwardPass)
        compute_.forward(instr);
      else
        compute_.backward(instr, true, instr.op == Op::BackwardPass);
      recorder_.end_event(index, runtime::now_us());
      pair_events_[pass] = index;
    } catch (const RuntimeError&) {
      throw;
    } catch (const std::exception& e) {
      ctx_.fail_here(first_line(e.what()));
    }
  }

  void record_pair(const Instruction& forward, const Instruction& backward, const runtime::ComputeBaton& baton) {
    StepResult& result = recorder_.result();
    ++result.overlapped_pairs;
    for (int pass = 0; pass < 2; ++pass) {
      StepResult::ComputeSpans spans;
      spans.event = pair_events_[pass];
      spans.overlapped_with = to_string(pass == 0 ? backward : forward);
      // The pass's event opens just after it first takes the baton and closes just before it
      // gives it back for the last time: its holds are clipped to its span.
      const traces::TraceEvent& e = result.events.at(spans.event);
      for (const auto& [start, end] : baton.holds(pass))
        spans.computing_us.emplace_back(std::clamp(start - result.origin_us, e.ts_us, e.end_us()),
                                        std::clamp(end - result.origin_us, e.ts_us, e.end_us()));
      result.overlapped_passes.push_back(std::move(spans));
    }
  }

  // One instruction: compute and collectives are timed here; transfers time themselves (a
  // send ends when the watcher sees it complete, a receive when its bytes are in). With torch's
  // semantics a compute first finishes the receives it needs (posted by RECV_F/RECV_B), outside
  // its own event, and the wait points wait for what they name.
  void execute(const Instruction& instr) {
    if (!ctx_.holds(instr.stage)) ctx_.fail_here("the stage is not held by this rank");
    if (needs_micro_batch(instr.op) && (instr.micro_batch < 0 || instr.micro_batch >= ctx_.micro_batch_count()))
      ctx_.fail_here("micro-batch out of range");
    try {
      switch (instr.op) {
        case Op::LoadMicroBatch: return compute(instr, [&] { compute_.load(instr.stage, instr.micro_batch); });
        case Op::ForwardPass:
          p2p_.finish_receives(instr.stage, instr.micro_batch, true);
          return compute(instr, [&] { compute_.forward(instr); });
        case Op::BackwardPass:
          p2p_.finish_receives(instr.stage, instr.micro_batch, false);
          return compute(instr, [&] { compute_.backward(instr, true, true); });
        case Op::BackwardInput:
          p2p_.finish_receives(instr.stage, instr.micro_batch, false);
          return compute(instr, [&] { compute_.backward(instr, true, false); });
        case Op::BackwardWeight: return compute(instr, [&] { compute_.backward(instr, false, true); });
        case Op::SendActivation:
        case Op::SendGrad: return p2p_.send(instr);
        case Op::RecvActivation:
        case Op::RecvGrad: return p2p_.recv(instr);
        case Op::ReduceTiedGrads: return collective(instr, [&] { collectives_.reduce_tied(ctx_.stage(instr.stage)); });
        case Op::ReduceGrads: return collective(instr, [&] { collectives_.reduce_grads(ctx_.stage(instr.stage)); });
        case Op::OptimizerStep: return collective(instr, [&] { collectives_.optimizer_step(ctx_.stage(instr.stage)); });
        case Op::WaitSendActivation:
        case Op::WaitSendGrad:
          return p2p_.wait_sends(instr.stage, instr.micro_batch, instr.op == Op::WaitSendActivation);
        // ReduceGrads returns once its all-reduce is done (or, deferred, before the optimizer
        // step that needs it): nothing is left to wait for.
        case Op::WaitReduceGrads: return;
        // FSDP's parameter (un)sharding: parameters here are never sharded.
        case Op::Unshard:
        case Op::Reshard: return;
      }
    } catch (const RuntimeError&) {
      throw;
    } catch (const std::exception& e) {
      ctx_.fail_here(first_line(e.what()));
    }
  }

  template <typename Work>
  void compute(const Instruction& instr, Work&& work) {
    recorder_.timed(traces::Lane::Compute, instr, *ctx_.options.device, std::forward<Work>(work));
  }
  template <typename Work>
  void collective(const Instruction& instr, Work&& work) {
    recorder_.timed(traces::Lane::Collective, instr, *ctx_.options.device, std::forward<Work>(work));
  }

  // Declaration order is construction order: the context first, the channel (whose watcher
  // thread writes into the recorder) last, so that it is destroyed first.
  runtime::RankContext ctx_;
  runtime::StepRecorder recorder_;
  runtime::StageCompute compute_;
  runtime::Collectives collectives_;
  runtime::PointToPoint p2p_;
  // The paired schedule of the last schedule run with overlapped pairs (nothing when it had
  // none), and whether this step runs it.
  std::optional<Schedule> paired_source_;
  std::optional<runtime::PairedSchedule> paired_;
  bool paired_in_use_ = false;
  std::array<std::size_t, 2> pair_events_{};
};

PipelineRuntime::PipelineRuntime(const ModelSpec& model, const Schedule& schedule, const Partition& partition,
                                 Transport& world, GridPosition position, RuntimeOptions options)
    : partition_(partition) {
  impl_ = std::make_unique<Impl>(model, schedule, partition_, world, position, options);
}

PipelineRuntime::~PipelineRuntime() = default;

StepResult PipelineRuntime::run_step(int step_index, std::int64_t first_sample) {
  StepRequest request;
  request.first_sample = first_sample;
  return impl_->run_step(step_index, request);
}

StepResult PipelineRuntime::run_step(int step_index, const StepRequest& request) {
  return impl_->run_step(step_index, request);
}

std::vector<PipelineRuntime::BackwardSplitTiming> PipelineRuntime::probe_backward_split(int repetitions) {
  return impl_->probe_backward_split(repetitions);
}

std::vector<int> PipelineRuntime::stages() const { return impl_->stage_ids(); }
StageModule& PipelineRuntime::stage_module(int s) { return *impl_->stage(s).module; }
torch::optim::Optimizer& PipelineRuntime::optimizer(int s) {
  auto& st = impl_->stage(s);
  if (!st.optimizer) throw RuntimeError(fmt::format("stage {} has no parameters to optimise", s));
  return *st.optimizer;
}

}  // namespace pipescope::exec
