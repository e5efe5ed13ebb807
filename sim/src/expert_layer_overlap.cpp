// The overlapped F&B step (costs.hpp, overlapped_step): two passes' slices list-scheduled on
// the rank's compute and its expert-parallel link (pair_timeline.hpp), the compute slowed while
// an all-to-all runs beside it.
#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "pair_timeline.hpp"
#include "pipescope/sim/costs.hpp"

namespace pipescope::sim {

namespace {

using detail::PairPiece;
using detail::PairResource;

// One pass as its pieces in order. Forward, per MoE layer: the compute before the dispatch
// (attention, shared experts, router), the dispatch, the experts, the combine. Backward, per
// layer, in reverse: the combine's reverse, the experts' gradients, the dispatch's reverse, the
// rest of the layer's gradients; with delayed weight gradients (`weight_s` > 0) each compute
// part is its data gradient, then its weight gradient off the pass's chain. A stage without MoE
// layers is one compute piece.
void add_pass_pieces(double compute_s, const ExpertAllToAll& a2a, bool backward, double weight_s,
                     std::vector<PairPiece>& pieces) {
  using Kind = AllToAllPiece::Kind;
  const int slices = std::max(a2a.moe_layers, 1);
  const double half_weight_s = std::clamp(weight_s, 0.0, compute_s) / (2.0 * slices);
  const double half_compute_s = compute_s / (2.0 * slices) - half_weight_s;
  const double dispatch_s = (backward ? a2a.dispatch_b_s : a2a.dispatch_f_s) / slices;
  const double combine_s = (backward ? a2a.combine_b_s : a2a.combine_f_s) / slices;
  const PairPiece compute{PairResource::Compute, backward, half_compute_s, Kind::DispatchF};
  const PairPiece weight{PairResource::Compute, backward, half_weight_s, Kind::DispatchF, true};
  const PairPiece dispatch{PairResource::Link, backward, dispatch_s, backward ? Kind::DispatchB : Kind::DispatchF};
  const PairPiece combine{PairResource::Link, backward, combine_s, backward ? Kind::CombineB : Kind::CombineF};
  for (int layer = 0; layer < slices; ++layer) {
    const std::array<PairPiece, 6> slice =
        backward ? std::array<PairPiece, 6>{combine, compute, weight, dispatch, compute, weight}
                 : std::array<PairPiece, 6>{compute, dispatch, compute, combine, PairPiece{}, PairPiece{}};
    for (const PairPiece& piece : slice)
      if (piece.work_s > 0) pieces.push_back(piece);
  }
}

}  // namespace

OverlappedStep overlapped_step(double forward_compute_s, const ExpertAllToAll& forward, double backward_compute_s,
                               const ExpertAllToAll& backward, double backward_weight_s) {
  std::vector<PairPiece> pieces;
  pieces.reserve(10 * static_cast<std::size_t>(std::max({forward.moe_layers, backward.moe_layers, 1})));
  add_pass_pieces(forward_compute_s, forward, false, 0, pieces);
  add_pass_pieces(backward_compute_s, backward, true, backward_weight_s, pieces);
  // Both passes' all-to-alls share the rank's EP group, and so the SMs their kernel takes.
  const double slowdown = std::max(forward.compute_slowdown, backward.compute_slowdown);
  detail::PairTimeline timeline = detail::run_pair_timeline(pieces, detail::PairOrder::FirstReady, slowdown);
  OverlappedStep step;
  step.forward_end_s = timeline.forward_end_s;
  step.backward_end_s = timeline.backward_end_s;
  step.pieces = std::move(timeline.link_pieces);
  return step;
}

traces::EventKind all_to_all_event_kind(AllToAllPiece::Kind kind) {
  switch (kind) {
    case AllToAllPiece::Kind::DispatchF: return traces::EventKind::AllToAllDispatchForward;
    case AllToAllPiece::Kind::CombineF: return traces::EventKind::AllToAllCombineForward;
    case AllToAllPiece::Kind::DispatchB: return traces::EventKind::AllToAllDispatchBackward;
    case AllToAllPiece::Kind::CombineB: return traces::EventKind::AllToAllCombineBackward;
  }
  return traces::EventKind::Other;
}

}  // namespace pipescope::sim
