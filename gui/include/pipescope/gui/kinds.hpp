// Kinds of pipeline operations as the viewer colours them, and the colours themselves (as
// 0xRRGGBB, so the widget-free models and the tests can name them without Qt).
#pragma once

#include <cstdint>
#include <string_view>

namespace pipescope::gui {

enum class Kind { Forward, Backward, BackwardInput, BackwardWeight, Communication, Optimizer, Other };

// F, B, I, W, SEND_*/RECV_*, REDUCE_* and OPTIMIZER; LOAD and names of plain traces are Other.
Kind kind_of(std::string_view event_name);
std::string_view kind_label(Kind kind);  // "F forward", ...
std::uint32_t kind_rgb(Kind kind);

// Shades of the difference view: measured longer than predicted is red, shorter is blue,
// by how much (error = measured / predicted - 1, saturating at +-50%); unmatched is grey.
std::uint32_t difference_rgb(double error);
inline constexpr std::uint32_t kUnmatchedRgb = 0x9e9e9e;
inline constexpr std::uint32_t kBubbleRgb = 0xe6e1d8;
inline constexpr std::uint32_t kCriticalPathRgb = 0xff7f0e;

}  // namespace pipescope::gui
