// Megatron's combined 1F1B step, as its code runs it:
// megatron/core/models/common/model_chunk_schedule_plan.py, TransformerModelChunkSchedulePlan.run
// and TransformerLayerSchedulePlan.run. The forward's layer i runs beside the backward's layer
// n-1-i, each layer pair issued in one fixed order onto two CUDA streams, each stream running
// its work in issue order:
//   communication: combine_b | dispatch_f -> dispatch_b | combine_f
//   computation:   pre_dispatch_f | mlp_b -> mlp_f | pre_dispatch_b
// (pre_dispatch: attention and router; mlp: the experts), each piece also waiting for its own
// pass's previous piece (one CUDA event per chunk, recorded after each piece). Layers one pass
// has more of run alone afterwards, the backward's first. The forward's output is sent
// (post_forward) only after every layer of both passes has been issued, on the communication
// stream, so it leaves behind the step's last all-to-all: not as soon as the forward's own
// pieces end. Each layer's compute is split evenly between its two parts, as in
// overlapped_step; the compute runs slower while an all-to-all is on the wire.
//
// With delay_wgrad_compute the backward's mlp_b and pre_dispatch_b compute data gradients only;
// each is followed on the compute stream by its weight gradients (`backward_dw`), which neither
// wait for nor record the chunk's event: the layer's dispatch_b waits for mlp_b's data gradients
// alone (mlp_b -> mlp_b_dw -> mlp_f on the compute stream while dispatch_f and dispatch_b are
// on the wire), and the next layer's combine_b for pre_dispatch_b's. The attention's weight
// gradients of the backward's last layer are issued after the step's sends, last of all.
#include "megatron_combined_step.hpp"

#include <algorithm>
#include <utility>

namespace pipescope::sim::detail {

namespace {

using Kind = AllToAllPiece::Kind;

// One pass cut into its layers: the two compute halves of a layer (the backward's each as its
// data gradient and its delayed weight gradient) and its dispatch and combine.
struct PassLayers {
  int layers = 1;
  double half_compute_s = 0;  // without the delayed weight gradients
  double half_weight_s = 0;   // delayed weight gradients of one half (0: none delayed)
  double dispatch_s = 0;
  double combine_s = 0;
};

// A pass with no MoE layer is one compute slice, as in overlapped_step.
PassLayers layers_of(double compute_s, const ExpertAllToAll& a2a, bool backward, double weight_s) {
  PassLayers p;
  p.layers = std::max(a2a.moe_layers, 1);
  p.half_weight_s = std::clamp(weight_s, 0.0, compute_s) / (2.0 * p.layers);
  p.half_compute_s = compute_s / (2.0 * p.layers) - p.half_weight_s;
  p.dispatch_s = (backward ? a2a.dispatch_b_s : a2a.dispatch_f_s) / p.layers;
  p.combine_s = (backward ? a2a.combine_b_s : a2a.combine_f_s) / p.layers;
  return p;
}

class CombinedIssue {
 public:
  explicit CombinedIssue(const CombinedStepPasses& passes)
      : forward_(layers_of(passes.forward_compute_s, passes.forward, false, 0)),
        backward_(layers_of(passes.backward_compute_s, passes.backward, true, passes.backward_weight_s)) {}

  std::vector<PairPiece> issue() && {
    const int paired = std::min(forward_.layers, backward_.layers);
    const int last_backward_layer = backward_.layers - 1;
    for (int layer = 0; layer < paired; ++layer) {
      link(backward_.combine_s, Kind::CombineB, true);
      compute(forward_.half_compute_s, false);
      compute(backward_.half_compute_s, true);
      link(forward_.dispatch_s, Kind::DispatchF, false);
      weight(backward_.half_weight_s);  // mlp_b's backward_dw
      link(backward_.dispatch_s, Kind::DispatchB, true);
      compute(forward_.half_compute_s, false);
      link(forward_.combine_s, Kind::CombineF, false);
      compute(backward_.half_compute_s, true);
      if (layer != last_backward_layer) weight(backward_.half_weight_s);  // pre_dispatch_b's
    }
    for (int layer = paired; layer < backward_.layers; ++layer) {
      link(backward_.combine_s, Kind::CombineB, true);
      compute(backward_.half_compute_s, true);
      weight(backward_.half_weight_s);
      link(backward_.dispatch_s, Kind::DispatchB, true);
      compute(backward_.half_compute_s, true);
      if (layer != last_backward_layer) weight(backward_.half_weight_s);
    }
    for (int layer = paired; layer < forward_.layers; ++layer) {
      compute(forward_.half_compute_s, false);
      link(forward_.dispatch_s, Kind::DispatchF, false);
      compute(forward_.half_compute_s, false);
      link(forward_.combine_s, Kind::CombineF, false);
    }
    // The first layer's attention weight gradients, delayed past the step's sends.
    weight(backward_.half_weight_s);
    return std::move(issued_);
  }

 private:
  void compute(double duration_s, bool backward) {
    if (duration_s > 0) issued_.push_back({PairResource::Compute, backward, duration_s});
  }
  void weight(double duration_s) {
    if (duration_s > 0) issued_.push_back({PairResource::Compute, true, duration_s, Kind::DispatchF, true});
  }
  void link(double duration_s, Kind kind, bool backward) {
    if (duration_s > 0) issued_.push_back({PairResource::Link, backward, duration_s, kind});
  }

  PassLayers forward_;
  PassLayers backward_;
  std::vector<PairPiece> issued_;
};

}  // namespace

std::vector<PairPiece> megatron_combined_issue_order(const CombinedStepPasses& passes) {
  return CombinedIssue(passes).issue();
}

OverlappedStep megatron_combined_step(const CombinedStepPasses& passes) {
  const double slowdown = std::max(passes.forward.compute_slowdown, passes.backward.compute_slowdown);
  PairTimeline timeline = run_pair_timeline(megatron_combined_issue_order(passes), PairOrder::IssueOrder, slowdown);
  OverlappedStep step;
  step.forward_end_s = std::max(timeline.forward_end_s, timeline.link_free_s);
  step.backward_end_s = std::max({timeline.backward_end_s, timeline.compute_free_s, timeline.link_free_s});
  step.pieces = std::move(timeline.link_pieces);
  return step;
}

}  // namespace pipescope::sim::detail
