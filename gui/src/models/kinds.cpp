#include "pipescope/gui/kinds.hpp"

#include <algorithm>
#include <cmath>

namespace pipescope::gui {

Kind kind_of(traces::EventKind kind) {
  using traces::EventKind;
  switch (kind) {
    case EventKind::Forward: return Kind::Forward;
    case EventKind::Backward: return Kind::Backward;
    case EventKind::BackwardInput: return Kind::BackwardInput;
    case EventKind::BackwardWeight: return Kind::BackwardWeight;
    case EventKind::SendActivation:
    case EventKind::RecvActivation:
    case EventKind::SendGrad:
    case EventKind::RecvGrad: return Kind::Communication;
    case EventKind::AllToAllDispatchForward: return Kind::AllToAllDispatchForward;
    case EventKind::AllToAllCombineForward: return Kind::AllToAllCombineForward;
    case EventKind::AllToAllDispatchBackward: return Kind::AllToAllDispatchBackward;
    case EventKind::AllToAllCombineBackward: return Kind::AllToAllCombineBackward;
    case EventKind::ReduceGrad:
    case EventKind::ReduceTied:
    case EventKind::Optimizer: return Kind::Optimizer;
    case EventKind::TensorParallelForward:
    case EventKind::TensorParallelBackward: return Kind::TensorParallel;
    case EventKind::Other:
    case EventKind::Load:
    case EventKind::WaitSendActivation:
    case EventKind::WaitSendGrad:
    case EventKind::WaitReduceGrad:
    case EventKind::Unshard:
    case EventKind::Reshard:
    case EventKind::OverlapForwardBackward: return Kind::Other;
  }
  return Kind::Other;
}

std::string_view kind_label(Kind kind) {
  switch (kind) {
    case Kind::Forward: return "F forward";
    case Kind::Backward: return "B backward";
    case Kind::BackwardInput: return "I backward input";
    case Kind::BackwardWeight: return "W backward weight";
    case Kind::Communication: return "send / receive";
    case Kind::Optimizer: return "optimizer / reduce";
    case Kind::TensorParallel: return "tensor-parallel collective";
    case Kind::Other: return "other";
    case Kind::AllToAllDispatchForward: return "all-to-all dispatch F";
    case Kind::AllToAllCombineForward: return "all-to-all combine F";
    case Kind::AllToAllDispatchBackward: return "all-to-all dispatch B";
    case Kind::AllToAllCombineBackward: return "all-to-all combine B";
  }
  return "other";
}

std::uint32_t kind_rgb(Kind kind) {
  switch (kind) {
    case Kind::Forward: return 0x4e79a7;
    case Kind::Backward: return 0x59a14f;
    case Kind::BackwardInput: return 0x76b7b2;
    case Kind::BackwardWeight: return 0xedc948;
    case Kind::Communication: return 0xb07aa1;
    case Kind::Optimizer: return 0xe15759;
    case Kind::TensorParallel: return 0xf28e2b;
    case Kind::Other: return 0x9c755f;
    // The forward's pink and raspberry, the backward's dark teal and indigo: apart from the
    // sends' purple and from each other, dispatch lighter than its combine.
    case Kind::AllToAllDispatchForward: return 0xff9da7;
    case Kind::AllToAllCombineForward: return 0xd37295;
    case Kind::AllToAllDispatchBackward: return 0x499894;
    case Kind::AllToAllCombineBackward: return 0x6b4c9a;
  }
  return 0x9c755f;
}

std::uint32_t difference_rgb(double error) {
  if (!std::isfinite(error)) return kUnmatchedRgb;
  // White at 0, full red (longer) or blue (shorter) at +-50%.
  const double strength = std::clamp(std::fabs(error) / 0.5, 0.0, 1.0);
  const std::uint32_t target = error > 0 ? 0xd62728 : 0x1f5fb4;
  auto mix = [&](int shift) {
    const double from = 255, to = (target >> shift) & 0xff;
    return static_cast<std::uint32_t>(std::lround(from + (to - from) * strength)) << shift;
  };
  return mix(16) | mix(8) | mix(0);
}

namespace {

double channel(std::uint32_t rgb, int shift) { return static_cast<double>((rgb >> shift) & 0xff); }

std::uint32_t scale_towards(std::uint32_t rgb, std::uint32_t target, double amount) {
  std::uint32_t out = 0;
  for (const int shift : {16, 8, 0}) {
    const double from = channel(rgb, shift), to = channel(target, shift);
    out |= static_cast<std::uint32_t>(std::lround(from + (to - from) * amount)) << shift;
  }
  return out;
}

// sRGB relative luminance (WCAG 2).
double luminance(std::uint32_t rgb) {
  auto linear = [&](int shift) {
    const double c = channel(rgb, shift) / 255.0;
    return c <= 0.03928 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * linear(16) + 0.7152 * linear(8) + 0.0722 * linear(0);
}

}  // namespace

std::uint32_t merged_rgb(std::uint32_t rgb) { return scale_towards(rgb, 0x000000, 0.2); }

std::uint32_t chunk_rgb(std::uint32_t rgb, int chunk) {
  if (chunk <= 0) return rgb;
  // 1: lighter, 2: darker, 3: lighter still, ...: neighbours in a rank's order differ most.
  const int pair = (chunk + 1) / 2;  // chunks 1 and 2 one step, 3 and 4 the next
  const double amount = std::min(0.6, 0.3 * pair);
  return chunk % 2 == 1 ? scale_towards(rgb, 0xffffff, amount + 0.1) : scale_towards(rgb, 0x000000, amount);
}

double contrast_ratio(std::uint32_t a, std::uint32_t b) {
  const double la = luminance(a), lb = luminance(b);
  return (std::max(la, lb) + 0.05) / (std::min(la, lb) + 0.05);
}

std::uint32_t text_rgb_on(std::uint32_t fill) {
  return contrast_ratio(fill, 0x000000) >= contrast_ratio(fill, 0xffffff) ? 0x000000 : 0xffffff;
}

}  // namespace pipescope::gui
