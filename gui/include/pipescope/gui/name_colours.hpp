// Colours of plain Chrome and profiler traces, whose blocks are named, not kinds: one colour
// per name, from a stable hash, so a name keeps its colour across runs, files and zooms.
#pragma once

#include <cstdint>
#include <string_view>

namespace pipescope::gui {

// 0xRRGGBB of a name: the hue from an FNV-1a hash of the text, saturation and lightness
// fixed in a middle band so black or white text reads on every one.
std::uint32_t name_rgb(std::string_view name);

}  // namespace pipescope::gui
