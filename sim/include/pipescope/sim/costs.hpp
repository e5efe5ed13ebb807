// What one micro-batch costs on each stage, in the names the Zero Bubble and veScale
// schedulers use (SPEC.md section 6): f/b/w seconds, f/b/w memory deltas, c per transfer.
// Explicit options, a model on a device (model.hpp) and a measured profile (profile.hpp) all
// end up here; the simulator reads nothing else.
#pragma once

#include <cstdint>
#include <vector>

#include "pipescope/traces/event_kind.hpp"

namespace pipescope::sim {

// The experts' token dispatch and combine (all-to-all over the expert-parallel group) of one
// micro-batch's pass through a stage, summed over its MoE layers. Part of f_s and b_s: a pass
// run alone takes its compute and these one after the other, as a pass did before they were
// separate (every reader that does not overlap them, the planner's bounds and the zero-bubble
// schedulers among them, sees the same pass times). The simulator runs them on the rank's
// expert-parallel communication, apart from its compute, so that an overlapped F&B step
// (Instruction::overlaps_next_backward, CostModel::overlap_moe_all_to_all) hides one
// micro-batch's all-to-all behind the other's compute.
struct ExpertAllToAll {
  double dispatch_f_s = 0;  // tokens to their experts (and expert TP's all-gather)
  double combine_f_s = 0;   // the experts' outputs back (and expert TP's reduce-scatter)
  double dispatch_b_s = 0;  // the dispatch's reverse: token gradients back to their rank
  double combine_b_s = 0;   // the combine's reverse: output gradients to the experts
  // One MoE layer's dispatch and combine: the bytes a rank sends, and the group (EP ranks).
  std::int64_t dispatch_bytes = 0;
  std::int64_t combine_bytes = 0;
  int group_size = 1;
  // The stage's MoE layers: a pass splits into this many equal slices, each its layer's
  // compute before the dispatch, the dispatch, the experts, the combine (the backward in
  // reverse). Per layer, because that is the finest grain at which DualPipe interleaves two
  // micro-batches' work (DeepSeek-V3 report, 3.2.1), and the grain at which the first and last
  // slice's communication cannot hide.
  int moe_layers = 0;
  // How much longer the rank's compute runs while one of these all-to-alls is on the wire: its
  // kernel holds some of the SMs (expert_layer.hpp, compute_slowdown_beside_all_to_all). Only
  // an overlapped F&B step runs compute beside it; 1: not slowed.
  double compute_slowdown = 1;

  double forward_s() const { return dispatch_f_s + combine_f_s; }
  double backward_s() const { return dispatch_b_s + combine_b_s; }
  bool any() const { return forward_s() + backward_s() > 0; }
};

struct StageCost {
  double f_s = 1.0;  // ForwardPass
  double b_s = 1.0;  // BackwardInput (a full BackwardPass takes b_s + w_s)
  double w_s = 1.0;  // BackwardWeight
  // Memory deltas of one micro-batch; f + b + w = 0. Allocations count from the start of an
  // op, frees from its end.
  std::int64_t f_mem_bytes = 0;
  std::int64_t b_mem_bytes = 0;
  std::int64_t w_mem_bytes = 0;
  std::int64_t static_bytes = 0;      // weights, gradients, optimizer state, work buffers
  std::int64_t activation_bytes = 0;  // one stage-to-stage transfer (activation or its gradient)
  double reduce_grads_s = 0;          // data-parallel gradient all-reduce of the stage
  double reduce_tied_s = 0;           // tied-embedding all-reduce (first and last stage)
  double optimizer_s = 0;             // optimizer step of the stage
  double load_s = 0;                  // LoadMicroBatch
  double full_backward_s = 0;         // a BackwardPass, when it costs other than b_s + w_s (0: b_s + w_s)
  // Tensor-parallel collectives inside f_s and inside b_s (Megatron runs them on the compute
  // stream, so they take the pass's time): the trace shows them on the collectives lane.
  double tensor_parallel_f_s = 0;
  double tensor_parallel_b_s = 0;
  // Gradient accumulation buffer: allocated by the stage's first weight gradient of the
  // iteration (BackwardPass or BackwardWeight), freed at the end of its OptimizerStep.
  std::int64_t grad_buffer_bytes = 0;
  // The gradient reduction overlapped with the backward (Megatron's --overlap-grad-reduce, torch
  // DDP's buckets): the stage's gradients become final in `reduce_grads_buckets` equal parts
  // spread over its last weight-gradient pass, each reduced as soon as it is final, except
  // `reduce_grads_last_s` of reduce_grads_s (the first stage's embedding), final only at the
  // pass's end. 0 buckets: the whole reduction runs after the backward.
  int reduce_grads_buckets = 0;
  double reduce_grads_last_s = 0;
  ExpertAllToAll all_to_all;  // inside f_s and b_s; none for a dense model
  // Megatron's --defer-embedding-wgrad-compute: the output layer's weight gradient (part of w_s)
  // of the stage's first `deferred_micro_batches` weight passes of an iteration (0: all of them;
  // --wgrad-deferral-limit) is left out of them and computed after the rank's last backward and
  // its sends, before its gradient reduction, in the pipeline's flush. Each deferred pass holds
  // `deferred_bytes` (the layer's input and its output's gradient) until then.
  double deferred_weight_s = 0;
  int deferred_micro_batches = 0;
  std::int64_t deferred_bytes = 0;

  double backward_pass_s() const { return full_backward_s > 0 ? full_backward_s : b_s + w_s; }
  bool reduce_grads_overlapped() const { return reduce_grads_buckets > 0 && reduce_grads_s > 0; }
};

// When the stage's overlapped gradient reduction ends, its last weight-gradient pass having run
// from `pass_start_s` for `pass_s`; the buckets' reductions run one after another, each once
// its gradients are final.
double overlapped_reduce_grads_end_s(const StageCost& c, double pass_start_s, double pass_s);

// One overlapped F&B step of a forward and a backward of two micro-batches on one rank: their
// slices (ExpertAllToAll::moe_layers each; compute split evenly between a slice's two compute
// parts) go to two resources, compute and the expert-parallel link, each piece as soon as its
// pass's previous piece is done and its resource is free, the backward's first on a tie.
// `forward_compute_s` and `backward_compute_s` are the passes' times without their all-to-all.
// A pass alone (the other's times zero) takes its compute plus its all-to-all; together they
// take about max(compute F + B, all-to-all F + B) plus what the first and last slices cannot
// hide. Each all-to-all piece is reported with its place in time, for the trace.
// `backward_weight_s` (Megatron's delay_wgrad_compute; 0: off) is the part of
// `backward_compute_s` that is weight gradients: each compute part of a backward slice is then its
// data gradient followed by its share of these, and the slice's next piece waits for the data
// gradient only; the weight gradients run when the compute has nothing else ready.
struct AllToAllPiece {
  enum class Kind { DispatchF, CombineF, DispatchB, CombineB };
  Kind kind = Kind::DispatchF;
  bool backward_pass = false;  // the pair's backward's piece (else its forward's)
  double start_s = 0;          // from the step's start
  double end_s = 0;
};
struct OverlappedStep {
  double forward_end_s = 0;   // from the step's start
  double backward_end_s = 0;  // the step's length when the backward ends last
  std::vector<AllToAllPiece> pieces;
  double length_s() const { return forward_end_s > backward_end_s ? forward_end_s : backward_end_s; }
};
OverlappedStep overlapped_step(double forward_compute_s, const ExpertAllToAll& forward, double backward_compute_s,
                               const ExpertAllToAll& backward, double backward_weight_s = 0);
// The trace's kind of a piece (its name, ALL_TO_ALL_DISPATCH_F, ..., is the kinds' table's)
traces::EventKind all_to_all_event_kind(AllToAllPiece::Kind kind);

enum class TransferModel {
  FixedDelay,  // every transfer arrives c_s after it is posted (SPEC.md section 6 base model)
  Links,       // latency + bytes / bandwidth on the topology's link, shared by concurrent transfers
};

// How one runtime runs a schedule, beyond what its operations cost: its program's own work per
// message, per instruction and per step, and its collectives' waits. Calibration measures
// them in pprun's traces (calibration.hpp); the defaults (no effects) leave the SPEC.md
// section 6 model unchanged. The simulator consults them where such a runtime's program
// differs from the model: posting a send, taking a receive of arrived data, the first weight
// gradient, the end of a send's event, the first optimizer step and tied-gradient reduction.
struct StageRuntimeEffects {
  double send_s = 0;  // compute-lane time to post a send (packing, handing it to the transport)
  double recv_s = 0;  // compute-lane time of a receive whose data has already arrived
  // The same, when the receiving rank's own message to the sender is still undelivered as the
  // receive begins (traffic both ways on the pair: Gloo's transport threads then serve both
  // directions on both ranks' busy cores, and such receives have a long tail).
  double recv_contended_s = 0;
  // What a weight gradient spends adding itself into the stage's gradient sum. Micro-batch 0's
  // weight gradient becomes the sum instead (the executor accumulates in micro-batch order), so
  // its BackwardPass or BackwardWeight takes this much less than the stage's costs, which are
  // those of the later micro-batches.
  double grad_accumulate_s = 0;

  double received_data_s(bool own_message_undelivered) const {
    return own_message_undelivered ? recv_contended_s : recv_s;
  }
  double weight_gradient_saving_s(int micro_batch) const { return micro_batch == 0 ? grad_accumulate_s : 0.0; }
  bool receives_contend() const { return recv_contended_s != recv_s; }
  friend bool operator==(const StageRuntimeEffects&, const StageRuntimeEffects&) = default;
};

struct RuntimeEffects {
  std::vector<StageRuntimeEffects> stages;  // one per stage, exactly one meaning "every stage", or none
  // Program time between two instructions of a rank (dispatch, bookkeeping, memory
  // accounting): added after every instruction, drawn as a gap between its events.
  double instruction_overhead_s = 0;
  // Time of an iteration after every rank's last instruction (pprun: rank 0 gathers the step's
  // loss and memory figures): part of the iteration time, and idle time of every rank.
  double step_overhead_s = 0;
  // Clipping by the global gradient norm: each rank's first OptimizerStep of the iteration
  // starts its own time only once every rank has reached its first OptimizerStep (the norm is
  // an all-reduce over the pipeline), as Megatron, DeepSpeed and pprun do.
  bool optimizer_sync = false;
  // The tied-gradient all-reduce (tied embeddings): the first ReduceTiedGrads of the ranks
  // holding the first and the last stage starts its own time only once both got there.
  bool reduce_tied_sync = false;
  // A send's trace event lasts until its receive has completed (a rendezvous transport such
  // as Gloo completes a send when the receiver has taken the data), instead of until the
  // data arrives. Only the trace changes: the receiver's timing is the same.
  bool send_ends_at_receive = false;
  // An overlapped F&B step (DualPipeV's pairs, CostModel::overlap_moe_all_to_all) runs its two
  // passes at once, one's all-to-all behind the other's compute. False: the runtime runs them
  // one after the other, each pass's all-to-all inside it, as pprun does (its dispatch and
  // combine are part of the forward and backward instructions; docs/MOE-EXEC.md).
  bool overlapped_steps = true;

  StageRuntimeEffects stage(int s) const {
    if (stages.empty()) return {};
    return stages.size() == 1 ? stages.front() : stages[static_cast<std::size_t>(s)];
  }
  // Throws UsageError when the effects do not cover `num_stages` stages or a time is negative
  // or not finite.
  void check(int num_stages) const;
};

struct CostModel {
  std::vector<StageCost> stages;  // one per stage, or exactly one meaning "every stage"
  double c_s = 0.0;
  TransferModel transfer_model = TransferModel::FixedDelay;
  int micro_batch_size = 1;  // samples per micro-batch, for throughput
  int data_parallel = 1;     // replicas, for throughput
  RuntimeEffects runtime;    // none by default
  // Megatron's --overlap-moe-expert-parallel-comm: a forward followed on its rank by the full
  // backward of another micro-batch (interleaved 1F1B's steady state; `ppsim simulate` allows it
  // there only, as Megatron requires a virtual pipeline) runs as one overlapped F&B step.
  // DualPipeV's pairs overlap without it: its generator marks them.
  bool overlap_moe_all_to_all = false;
  // Megatron's --delay-wgrad-compute (with the pairs above or DualPipeV's): in an overlapped
  // step the backward's dispatch waits only for the experts' data gradients, their weight
  // gradients running on the compute beside it (and the attention's beside the next layer's
  // combine); under Megatron's overlap a backward run alone is cut the same way, as its
  // combined step runs it too.
  bool delay_wgrad_compute = false;

  const StageCost& stage(int s) const {
    return stages.size() == 1 ? stages.front() : stages[static_cast<std::size_t>(s)];
  }

  // Uniform stages with the SPEC.md cost names.
  static CostModel uniform(double f_s, double b_s, double w_s, double c_s, std::int64_t f_mem_bytes = 0,
                           std::int64_t b_mem_bytes = 0, std::int64_t w_mem_bytes = 0);

  // Throws UsageError when the model or its runtime effects do not cover `num_stages` stages,
  // a time is negative or not finite, or the memory deltas of a stage do not sum to zero.
  void check(int num_stages) const;
};

}  // namespace pipescope::sim
