// The event loop's overlapped F&B steps: which forwards start one, when one can start, and how
// much of the experts' all-to-all it hides (a pass run alone hides none).
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "pair_timeline.hpp"
#include "simulator_engine.hpp"

namespace pipescope::sim::event_loop {

namespace {

// Megatron's combined 1F1B step (--overlap-moe-expert-parallel-comm), as its code runs it:
// megatron/core/models/common/model_chunk_schedule_plan.py, TransformerModelChunkSchedulePlan.run
// and TransformerLayerSchedulePlan.run. The forward's layer i runs beside the backward's layer
// n-1-i, each layer pair issued in one fixed order onto two CUDA streams, each stream running
// its work in issue order:
//   communication: combine_b | dispatch_f -> dispatch_b | combine_f
//   computation:   pre_dispatch_f | mlp_b -> mlp_f | pre_dispatch_b
// (pre_dispatch: attention and router; mlp: the experts), each piece also waiting for its own
// pass's previous piece. Layers one pass has more of run alone afterwards, the backward's first.
// The forward's output is sent (post_forward) only after every layer of both passes has been
// issued, on the communication stream, so it leaves behind the step's last all-to-all: not as
// soon as the forward's own pieces end. Each layer's compute is split evenly between its two
// parts, as in overlapped_step; the compute runs slower while an all-to-all is on the wire
// (pair_timeline.hpp).
class MegatronCombinedStep {
 public:
  MegatronCombinedStep(double forward_compute_s, const ExpertAllToAll& forward, double backward_compute_s,
                       const ExpertAllToAll& backward)
      : forward_(slice_of(forward_compute_s, forward, false)),
        backward_(slice_of(backward_compute_s, backward, true)),
        compute_slowdown_(std::max(forward.compute_slowdown, backward.compute_slowdown)) {}

  OverlappedStep run() {
    const int paired = std::min(forward_.layers, backward_.layers);
    for (int layer = 0; layer < paired; ++layer) {
      link_piece(backward_.combine_s, AllToAllPiece::Kind::CombineB, true);
      compute_piece(forward_.half_compute_s, false);
      compute_piece(backward_.half_compute_s, true);
      link_piece(forward_.dispatch_s, AllToAllPiece::Kind::DispatchF, false);
      link_piece(backward_.dispatch_s, AllToAllPiece::Kind::DispatchB, true);
      compute_piece(forward_.half_compute_s, false);
      link_piece(forward_.combine_s, AllToAllPiece::Kind::CombineF, false);
      compute_piece(backward_.half_compute_s, true);
    }
    for (int layer = paired; layer < backward_.layers; ++layer) {
      link_piece(backward_.combine_s, AllToAllPiece::Kind::CombineB, true);
      compute_piece(backward_.half_compute_s, true);
      link_piece(backward_.dispatch_s, AllToAllPiece::Kind::DispatchB, true);
      compute_piece(backward_.half_compute_s, true);
    }
    for (int layer = paired; layer < forward_.layers; ++layer) {
      compute_piece(forward_.half_compute_s, false);
      link_piece(forward_.dispatch_s, AllToAllPiece::Kind::DispatchF, false);
      compute_piece(forward_.half_compute_s, false);
      link_piece(forward_.combine_s, AllToAllPiece::Kind::CombineF, false);
    }
    detail::PairTimeline timeline =
        detail::run_pair_timeline(issued_, detail::PairOrder::IssueOrder, compute_slowdown_);
    OverlappedStep step;
    step.forward_end_s = std::max(timeline.forward_end_s, timeline.link_free_s);
    step.backward_end_s = std::max({timeline.backward_end_s, timeline.compute_free_s, timeline.link_free_s});
    step.pieces = std::move(timeline.link_pieces);
    return step;
  }

 private:
  struct PassSlices {
    int layers = 1;
    double half_compute_s = 0;
    double dispatch_s = 0;
    double combine_s = 0;
  };

  // A pass with no MoE layer is one compute slice, as in overlapped_step.
  static PassSlices slice_of(double compute_s, const ExpertAllToAll& a2a, bool backward) {
    PassSlices p;
    p.layers = std::max(a2a.moe_layers, 1);
    p.half_compute_s = compute_s / (2.0 * p.layers);
    p.dispatch_s = (backward ? a2a.dispatch_b_s : a2a.dispatch_f_s) / p.layers;
    p.combine_s = (backward ? a2a.combine_b_s : a2a.combine_f_s) / p.layers;
    return p;
  }

  void compute_piece(double duration_s, bool backward) {
    if (duration_s > 0) issued_.push_back({detail::PairResource::Compute, backward, duration_s});
  }

  void link_piece(double duration_s, AllToAllPiece::Kind kind, bool backward) {
    if (duration_s > 0) issued_.push_back({detail::PairResource::Link, backward, duration_s, kind});
  }

  PassSlices forward_;
  PassSlices backward_;
  double compute_slowdown_ = 1;
  std::vector<detail::PairPiece> issued_;
};

}  // namespace

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
  // DualPipeV's pairs (marked by its generator) interleave freely; Megatron's follow its code.
  const OverlappedStep step =
      forward.overlaps_next_backward
          ? overlapped_step(forward_compute_s, fc.all_to_all, backward_compute_s, bc.all_to_all)
          : MegatronCombinedStep(forward_compute_s, fc.all_to_all, backward_compute_s, bc.all_to_all).run();
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
  } else {
    const double compute_s = backward_duration_s(ci) - c.all_to_all.backward_s();
    add_all_to_all_events(rank, ci, &ci, overlapped_step(0, {}, compute_s, c.all_to_all), start);
  }
}

}  // namespace pipescope::sim::event_loop
