#include "pipescope/gui/memory_scale.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace pipescope::gui {

std::string format_bytes(double bytes) {
  if (std::fabs(bytes) < 0.5) bytes = 0;  // a tick at -1e-13 reads "0 B", not "-0 B"
  const double magnitude = std::fabs(bytes);
  if (magnitude < 1024) return fmt::format("{:.0f} B", bytes);
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = bytes / 1024;
  int unit = 0;
  while (std::fabs(value) >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  const double shown = std::fabs(value);
  const int decimals = shown >= 100 ? 0 : shown >= 10 ? 1 : 2;
  return fmt::format("{:.{}f} {}", value, decimals, kUnits[unit]);
}

MemoryRange memory_range(const std::vector<const std::vector<traces::MemorySample>*>& curves) {
  double low = std::numeric_limits<double>::infinity(), high = -std::numeric_limits<double>::infinity();
  for (const auto* curve : curves)
    for (const auto& sample : *curve) {
      low = std::min(low, static_cast<double>(sample.bytes));
      high = std::max(high, static_cast<double>(sample.bytes));
    }
  if (!(low <= high)) return {};
  const double swing = high - low;
  if (swing <= 0) {
    const double half = std::max(1.0, std::fabs(high) * 0.05);
    return {high - half, high + half};
  }
  return {low - swing / 20, high + swing / 20};
}

std::vector<double> memory_ticks(const MemoryRange& range, int max_ticks) {
  std::vector<double> ticks;
  if (max_ticks < 1 || !(range.span() > 0)) return ticks;
  // Steps in the binary unit of the range's magnitude: 1, 2 or 5 times a power of ten of it.
  double unit = 1;
  while (std::max(std::fabs(range.high_bytes), std::fabs(range.low_bytes)) / unit >= 1024 && unit < std::pow(1024.0, 4)) unit *= 1024;
  const double raw = range.span() / unit / max_ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * power) {
      step = m * power;
      break;
    }
  step *= unit;
  for (double v = std::ceil(range.low_bytes / step) * step; v <= range.high_bytes; v += step) ticks.push_back(v);
  return ticks;
}

bool memory_at(const std::vector<traces::MemorySample>& samples, double t_us, std::int64_t& bytes) {
  const auto it = std::upper_bound(samples.begin(), samples.end(), t_us, [](double t, const traces::MemorySample& m) { return t < m.ts_us; });
  if (it == samples.begin()) return false;
  bytes = std::prev(it)->bytes;
  return true;
}

}  // namespace pipescope::gui
