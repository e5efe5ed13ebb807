#include "pipescope/traces/trace_limits.hpp"

#include <cmath>

#include <fmt/format.h>

namespace pipescope::traces {

std::optional<std::string> timestamp_problem(double ts_us) {
  if (std::isfinite(ts_us) && std::fabs(ts_us) <= kMaxTimestampUs) return std::nullopt;
  return fmt::format("is {:g} us, beyond the readers' limit of {:g} us (about 3,170 years)", ts_us, kMaxTimestampUs);
}

std::optional<std::string> duration_problem(double dur_us) {
  if (std::isfinite(dur_us) && dur_us < 0) return fmt::format("is negative ({:g})", dur_us);
  if (std::isfinite(dur_us) && dur_us <= kMaxDurationUs) return std::nullopt;
  return fmt::format("is {:g} us, beyond the readers' limit of {:g} us (about 11.6 days)", dur_us, kMaxDurationUs);
}

std::optional<std::string> bytes_problem(double bytes, bool negative_allowed) {
  if (std::isfinite(bytes) && bytes < 0 && !negative_allowed) return fmt::format("is negative ({:g} bytes)", bytes);
  if (std::isfinite(bytes) && std::fabs(bytes) <= static_cast<double>(kMaxTraceBytes)) return std::nullopt;
  return fmt::format("is {:g} bytes, beyond the readers' limit of 2^60 bytes (1 EiB)", bytes);
}

std::optional<std::string> span_problem(double earliest_us, double latest_us) {
  if (!(latest_us - earliest_us > kMaxDurationUs)) return std::nullopt;
  return fmt::format("its times span {:g} us (from {:g} to {:g}), beyond the readers' limit of {:g} us (about 11.6 days)",
                     latest_us - earliest_us, earliest_us, latest_us, kMaxDurationUs);
}

}  // namespace pipescope::traces
