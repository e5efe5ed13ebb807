// The event loop's overlapped F&B steps: which forwards start one, when one can start, and how
// much of the experts' all-to-all it hides (a pass run alone hides none).
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "megatron_combined_step.hpp"
#include "simulator_engine.hpp"

namespace pipescope::sim::event_loop {

// Which forwards start an overlapped F&B step: those the generator marked (DualPipeV), and
// under Megatron's --overlap-moe-expert-parallel-comm every forward whose rank next runs the
// full backward of another micro-batch (1F1B's and interleaved 1F1B's steady state). Only
// where either pass has an all-to-all to hide: a dense model's passes run as they always did;
// and only on a runtime that overlaps them (RuntimeEffects::overlapped_steps).
void Engine::find_overlapped_steps() {
  for (const StageCost& c : stage_) any_all_to_all_ = any_all_to_all_ || c.all_to_all.any();
  if (!any_all_to_all_ || !costs_.runtime.overlapped_steps) return;
  const std::size_t n = s_.instructions.size();
  pair_backward_.assign(n, -1);
  pair_input_transfer_.assign(n, -1);
  for (std::int32_t rank = 0; rank < s_.num_ranks; ++rank) {
    const std::int32_t end = s_.rank_begin[rank + 1];
    for (std::int32_t i = s_.rank_begin[rank]; i < end; ++i) {
      const CompiledInstruction& f = s_.instructions[i];
      if (f.op != Op::ForwardPass) continue;
      std::int32_t j = i + 1;
      while (j < end && !is_compute_op(s_.instructions[j].op)) ++j;
      if (j == end) continue;
      const CompiledInstruction& b = s_.instructions[j];
      const bool marked = f.overlaps_next_backward && (b.op == Op::BackwardPass || b.op == Op::BackwardInput);
      const bool megatron = costs_.overlap_moe_all_to_all && b.op == Op::BackwardPass && b.micro_batch != f.micro_batch;
      if (!(marked || megatron)) continue;
      if (!stage_[f.stage].all_to_all.any() && !stage_[b.stage].all_to_all.any()) continue;
      pair_backward_[i] = j;
      // The backward's input: its receive between the two (SPEC semantics) or its own (torch's).
      if (s_.receives_post_only) {
        pair_input_transfer_[i] = b.transfer;
      } else {
        for (std::int32_t k = j - 1; k > i; --k) {
          const CompiledInstruction& recv = s_.instructions[k];
          if (recv.op == Op::RecvGrad && recv.stage == b.stage && recv.micro_batch == b.micro_batch) {
            pair_input_transfer_[i] = recv.transfer;
            break;
          }
        }
      }
    }
  }
}

double Engine::backward_duration_s(const CompiledInstruction& ci) const {
  const StageCost& c = stage_[ci.stage];
  if (ci.op == Op::BackwardInput) return c.b_s;
  return c.backward_pass_s() - effects_[ci.stage].weight_gradient_saving_s(ci.micro_batch);
}

// The weight gradients of a full backward that --delay-wgrad-compute moves off the pass's chain:
// the stage's own split of a backward into B and W (StageCost::b_s, w_s, as the zero-bubble
// schedules run them), less what the first accumulation saves. 0 without the option, and for a
// BackwardInput, whose weight gradients are a BackwardWeight of their own.
double Engine::delayed_weight_gradient_s(const CompiledInstruction& ci) const {
  if (!costs_.delay_wgrad_compute || ci.op != Op::BackwardPass) return 0;
  const StageCost& c = stage_[ci.stage];
  if (c.b_s + c.w_s <= 0) return 0;
  const double weight_s = c.w_s / (c.b_s + c.w_s) * c.backward_pass_s();
  return std::max(0.0, weight_s - effects_[ci.stage].weight_gradient_saving_s(ci.micro_batch));
}

// Under Megatron's overlap a backward run alone (the cool-down) goes through the combined step
// too, with no forward beside it: with delayed weight gradients its own dispatch hides behind
// them. Without them it is the pass's compute and all-to-all one after the other.
bool Engine::lone_backward_is_a_step(const CompiledInstruction& ci) const {
  return costs_.overlap_moe_all_to_all && costs_.delay_wgrad_compute && costs_.runtime.overlapped_steps &&
         ci.op == Op::BackwardPass && stage_[ci.stage].all_to_all.any();
}

OverlappedStep Engine::lone_backward_step(const CompiledInstruction& ci) const {
  const StageCost& c = stage_[ci.stage];
  return detail::megatron_combined_step(
      {0, {}, backward_duration_s(ci) - c.all_to_all.backward_s(), c.all_to_all, delayed_weight_gradient_s(ci)});
}

double Engine::lone_backward_step_s(const CompiledInstruction& ci, double alone_s) {
  const double step_s = lone_backward_step(ci).length_s();
  all_to_all_.hidden_s += std::max(0.0, alone_s - step_s);
  return step_s;
}

// An overlapped step starts once both passes' inputs are there, as DualPipe and Megatron
// receive both before it: false while the backward's is not known yet (the rank waits for
// it). Otherwise `now` moves to the step's start, `duration` becomes the forward's part and
// the rank remembers when the step ends, which its backward runs up to.
bool Engine::begin_overlapped_step(std::int32_t rank, const CompiledInstruction& forward, double& now,
                                   double& duration) {
  RankState& r = ranks_[rank];
  const std::int32_t transfer = pair_input_transfer_[r.pc];
  if (transfer >= 0) {
    if (arrival_s_[transfer] == kUnknown) {
      r.clock_s = now;
      receiver_waiting_[transfer] |= kReceiverWaits;
      return false;
    }
    now = std::max(now, arrival_s_[transfer]);
  }
  const CompiledInstruction& backward = s_.instructions[pair_backward_[r.pc]];
  const StageCost& fc = stage_[forward.stage];
  const StageCost& bc = stage_[backward.stage];
  const double backward_s = backward_duration_s(backward);
  const double forward_compute_s = fc.f_s - fc.all_to_all.forward_s();
  const double backward_compute_s = backward_s - bc.all_to_all.backward_s();
  const double weight_s = delayed_weight_gradient_s(backward);
  // DualPipeV's pairs (marked by its generator) interleave freely; Megatron's follow its code.
  const OverlappedStep step =
      forward.overlaps_next_backward
          ? overlapped_step(forward_compute_s, fc.all_to_all, backward_compute_s, bc.all_to_all, weight_s)
          : detail::megatron_combined_step(
                {forward_compute_s, fc.all_to_all, backward_compute_s, bc.all_to_all, weight_s});
  duration = step.forward_end_s;
  r.pair_backward_pc = pair_backward_[r.pc];
  r.pair_end_s = now + step.length_s();
  all_to_all_.total_s += fc.all_to_all.forward_s() + bc.all_to_all.backward_s();
  all_to_all_.hidden_s += std::max(0.0, fc.f_s + backward_s - step.length_s());
  ++all_to_all_.overlapped_pairs;
  if (options_.build_trace) add_all_to_all_events(rank, forward, &backward, step, now);
  return true;
}

// A pass run alone: its all-to-all holds it up, all of it exposed; the trace shows where.
void Engine::account_lone_all_to_all(std::int32_t rank, const CompiledInstruction& ci, double start) {
  const StageCost& c = stage_[ci.stage];
  if (!c.all_to_all.any()) return;
  const bool forward = ci.op == Op::ForwardPass;
  all_to_all_.total_s += forward ? c.all_to_all.forward_s() : c.all_to_all.backward_s();
  if (!options_.build_trace) return;
  if (forward) {
    add_all_to_all_events(rank, ci, nullptr, overlapped_step(c.f_s - c.all_to_all.forward_s(), c.all_to_all, 0, {}),
                          start);
  } else if (lone_backward_is_a_step(ci)) {
    add_all_to_all_events(rank, ci, &ci, lone_backward_step(ci), start);
  } else {
    const double compute_s = backward_duration_s(ci) - c.all_to_all.backward_s();
    add_all_to_all_events(rank, ci, &ci, overlapped_step(0, {}, compute_s, c.all_to_all), start);
  }
}

}  // namespace pipescope::sim::event_loop
