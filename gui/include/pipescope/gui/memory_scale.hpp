// The memory row's scale: the range it shows (the rank's own minimum to maximum, padded, not
// from zero, so a 2% swing is visible), round tick values on it, and byte counts written in
// the unit their magnitude calls for (B, KiB, MiB, GiB: never "0.0 MiB" for 300 bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipescope/traces/trace.hpp"

namespace pipescope::gui {

// "512 B", "3.5 KiB", "12.3 MiB", "1.19 GiB" (three significant digits from KiB on).
std::string format_bytes(double bytes);

struct MemoryRange {
  double low_bytes = 0;
  double high_bytes = 1;
  double span() const { return high_bytes - low_bytes; }
  // 0 at low_bytes, 1 at high_bytes.
  double fraction(double bytes) const { return (bytes - low_bytes) / span(); }
};

// The range of the samples (of one rank, all series), padded by a twentieth of the swing on
// both sides; a flat curve gets a range around its value. Empty input gives [0, 1].
MemoryRange memory_range(const std::vector<const std::vector<traces::MemorySample>*>& curves);

// Round values inside the range (1, 2 or 5 times a power of two's worth of bytes in the unit
// of the magnitude), at most max_ticks of them.
std::vector<double> memory_ticks(const MemoryRange& range, int max_ticks);

// The value a curve holds at t_us (the last sample at or before it), or nothing before the
// first sample.
bool memory_at(const std::vector<traces::MemorySample>& samples, double t_us, std::int64_t& bytes);

}  // namespace pipescope::gui
