#include "pipescope/sim/units.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"

namespace pipescope::sim {

std::int64_t parse_bytes(std::string_view text, std::string_view option, bool allow_negative) {
  const std::string s(text);
  auto refuse = [&] {
    return UsageError(std::string(option) + ": '" + s + "' is not a size in bytes (examples: 4096, 8e9, 80GB, 1.5GiB)");
  };
  if (s.empty()) throw refuse();
  char* end = nullptr;
  const double number = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) throw refuse();
  std::string unit(end);
  for (auto& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  double scale = 1;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "gb") scale = 1e9;
  else if (unit == "tb") scale = 1e12;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else throw refuse();
  const double bytes = number * scale;
  if (!std::isfinite(bytes) || (!allow_negative && bytes < 0)) throw refuse();
  // 2^60 bytes (1 EiB) either way: no device holds more, and sums of a few such figures stay
  // inside 64 bits.
  if (std::fabs(bytes) > 0x1p60)
    throw UsageError(std::string(option) + ": '" + s + "' is beyond the limit of 2^60 bytes (1 EiB)");
  return static_cast<std::int64_t>(std::llround(bytes));
}

std::string format_bytes(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  const double magnitude = std::fabs(b);
  if (magnitude >= 1e12) return fmt::format("{:.2f} TB", b / 1e12);
  if (magnitude >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (magnitude >= 1e6) return fmt::format("{:.2f} MB", b / 1e6);
  if (magnitude >= 1e3) return fmt::format("{:.2f} kB", b / 1e3);
  return fmt::format("{} B", bytes);
}

std::string format_seconds(double seconds) {
  const double magnitude = std::fabs(seconds);
  if (magnitude == 0) return "0 s";
  if (magnitude >= 1) return fmt::format("{:.4g} s", seconds);
  if (magnitude >= 1e-3) return fmt::format("{:.4g} ms", seconds * 1e3);
  if (magnitude >= 1e-6) return fmt::format("{:.4g} us", seconds * 1e6);
  return fmt::format("{:.4g} ns", seconds * 1e9);
}

}  // namespace pipescope::sim
