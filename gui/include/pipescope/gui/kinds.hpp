// Kinds of pipeline operations as the viewer colours them, and the colours themselves (as
// 0xRRGGBB, so the widget-free models and the tests can name them without Qt).
#pragma once

#include <cstdint>
#include <string_view>

#include "pipescope/traces/event_kind.hpp"

namespace pipescope::gui {

enum class Kind {
  Forward,
  Backward,
  BackwardInput,
  BackwardWeight,
  Communication,
  Optimizer,
  TensorParallel,
  Other,
  AllToAllDispatchForward,
  AllToAllCombineForward,
  AllToAllDispatchBackward,
  AllToAllCombineBackward,
};
inline constexpr int kKindCount = 12;

// The colour group of an event's kind: F, B, I, W; sends and receives (communication);
// REDUCE_GRAD, REDUCE_TIED and OPTIMIZER; TP_F and TP_B (a pass's tensor-parallel collectives,
// predicted by ppsim simulate --tensor-parallel); the all-to-all of MoE layers, each of
// dispatch and combine, forward and backward, in a colour of its own (the four alternate on
// the all-to-all lane, so they are told apart there); LOAD, torch's waits and sharding and the
// names of plain traces are Other.
Kind kind_of(traces::EventKind kind);
constexpr bool is_all_to_all(Kind kind) {
  return kind == Kind::AllToAllDispatchForward || kind == Kind::AllToAllCombineForward ||
         kind == Kind::AllToAllDispatchBackward || kind == Kind::AllToAllCombineBackward;
}
std::string_view kind_label(Kind kind);  // "F forward", ...
std::uint32_t kind_rgb(Kind kind);

// Shades of the difference view: measured longer than predicted is red, shorter is blue,
// by how much (error = measured / predicted - 1, saturating at +-50%); unmatched is grey.
std::uint32_t difference_rgb(double error);
// Blocks merged because they are too narrow to draw one by one: the colour of the kind that
// fills most of their time, a fifth darker, so a merge is never mistaken for one operation.
std::uint32_t merged_rgb(std::uint32_t rgb);
// The shade of a kind for a model chunk (the stages one rank holds, in order: chunk 0 is the
// first): chunk 0 is the kind's colour, odd chunks are lighter, further even ones darker, so
// the two chunks of an interleaved or ZBV rank are told apart at a glance.
std::uint32_t chunk_rgb(std::uint32_t rgb, int chunk);

// WCAG contrast ratio of two colours (1 to 21); text wants 4.5 or more.
double contrast_ratio(std::uint32_t a, std::uint32_t b);
// Black or white, whichever reads better on `fill`.
std::uint32_t text_rgb_on(std::uint32_t fill);

inline constexpr std::uint32_t kUnmatchedRgb = 0x9e9e9e;
inline constexpr std::uint32_t kBubbleRgb = 0xe6e1d8;
inline constexpr std::uint32_t kCriticalPathRgb = 0xff7f0e;

}  // namespace pipescope::gui
