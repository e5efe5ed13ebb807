#include "pipescope/gui/kinds.hpp"

#include <algorithm>
#include <cmath>

namespace pipescope::gui {

Kind kind_of(std::string_view name) {
  if (name == "F") return Kind::Forward;
  if (name == "B") return Kind::Backward;
  if (name == "I") return Kind::BackwardInput;
  if (name == "W") return Kind::BackwardWeight;
  if (name.rfind("SEND_", 0) == 0 || name.rfind("RECV_", 0) == 0) return Kind::Communication;
  if (name == "OPTIMIZER" || name.rfind("REDUCE_", 0) == 0) return Kind::Optimizer;
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
    case Kind::Other: return "other";
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
    case Kind::Other: return 0x9c755f;
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

}  // namespace pipescope::gui
