// The overlapped F&B step (costs.hpp, overlapped_step): two passes' slices list-scheduled on
// the rank's compute and its expert-parallel link.
#include <algorithm>
#include <array>

#include "pipescope/sim/costs.hpp"

namespace pipescope::sim {

namespace {

enum class StepResource { Compute, Link };

struct StepPiece {
  StepResource resource = StepResource::Compute;
  double duration_s = 0;
  AllToAllPiece::Kind kind = AllToAllPiece::Kind::DispatchF;  // link pieces only
};

// One pass as its pieces in order. Forward, per MoE layer: the compute before the dispatch
// (attention, shared experts, router), the dispatch, the experts, the combine. Backward, per
// layer, in reverse: the combine's reverse, the experts' gradients, the dispatch's reverse, the
// rest of the layer's gradients. A stage without MoE layers is one compute piece.
std::vector<StepPiece> pass_pieces(double compute_s, const ExpertAllToAll& a2a, bool backward) {
  using Kind = AllToAllPiece::Kind;
  const int slices = std::max(a2a.moe_layers, 1);
  const double half_compute_s = compute_s / (2.0 * slices);
  const double dispatch_s = (backward ? a2a.dispatch_b_s : a2a.dispatch_f_s) / slices;
  const double combine_s = (backward ? a2a.combine_b_s : a2a.combine_f_s) / slices;
  const StepPiece compute{StepResource::Compute, half_compute_s, Kind::DispatchF};
  const StepPiece dispatch{StepResource::Link, dispatch_s, backward ? Kind::DispatchB : Kind::DispatchF};
  const StepPiece combine{StepResource::Link, combine_s, backward ? Kind::CombineB : Kind::CombineF};
  std::vector<StepPiece> pieces;
  pieces.reserve(4 * static_cast<std::size_t>(slices));
  for (int layer = 0; layer < slices; ++layer) {
    const std::array<StepPiece, 4> slice = backward ? std::array<StepPiece, 4>{combine, compute, dispatch, compute}
                                                    : std::array<StepPiece, 4>{compute, dispatch, compute, combine};
    for (const StepPiece& piece : slice)
      if (piece.duration_s > 0) pieces.push_back(piece);
  }
  return pieces;
}

}  // namespace

OverlappedStep overlapped_step(double forward_compute_s, const ExpertAllToAll& forward, double backward_compute_s,
                               const ExpertAllToAll& backward) {
  const std::array<std::vector<StepPiece>, 2> passes{pass_pieces(forward_compute_s, forward, false),
                                                     pass_pieces(backward_compute_s, backward, true)};
  std::array<std::size_t, 2> next{0, 0};
  std::array<double, 2> pass_ready_s{0, 0};  // when the pass's previous piece ends
  std::array<double, 2> resource_free_s{0, 0};
  OverlappedStep step;
  auto candidate_s = [&](int pass) {
    const StepPiece& piece = passes[pass][next[pass]];
    return std::max(pass_ready_s[pass], resource_free_s[static_cast<int>(piece.resource)]);
  };
  for (;;) {
    const bool forward_left = next[0] < passes[0].size();
    const bool backward_left = next[1] < passes[1].size();
    if (!forward_left && !backward_left) break;
    // The earliest start goes first; on a tie the backward, whose result the previous stage
    // waits for.
    const int pass = !forward_left ? 1 : !backward_left ? 0 : (candidate_s(1) <= candidate_s(0) ? 1 : 0);
    const StepPiece& piece = passes[pass][next[pass]];
    const double start_s = candidate_s(pass);
    const double end_s = start_s + piece.duration_s;
    pass_ready_s[pass] = end_s;
    resource_free_s[static_cast<int>(piece.resource)] = end_s;
    if (piece.resource == StepResource::Link) step.pieces.push_back({piece.kind, pass == 1, start_s, end_s});
    ++next[pass];
  }
  step.forward_end_s = pass_ready_s[0];
  step.backward_end_s = pass_ready_s[1];
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
