// The bounds every trace reader (pipescope's, Chrome's, torch.profiler's) holds times and sizes
// to. A value beyond them is a broken or hostile file, never a measurement: drawn, it would
// squeeze a run into one pixel; compared or calibrated, it would swamp every mean.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pipescope::traces {

// A timestamp, in microseconds: 1e17 us is about 3,170 years, room for clocks counted from the
// Unix epoch (torch.profiler's and Perfetto's are far below it).
inline constexpr double kMaxTimestampUs = 1e17;
// An event's duration, and the whole span of a trace from its earliest to its latest time:
// 1e12 us is about 11.6 days.
inline constexpr double kMaxDurationUs = 1e12;
// Bytes held (memory counters) or moved (transfers): 2^60, one exbibyte.
inline constexpr std::int64_t kMaxTraceBytes = std::int64_t{1} << 60;

// Why a value is out of bounds ("is 1e+300 us, beyond the readers' limit of 1e+12 us (about 11.6
// days)"), or nothing. The sentence follows the field's name: "field 'dur' " + problem.
std::optional<std::string> timestamp_problem(double ts_us);
std::optional<std::string> duration_problem(double dur_us);
// Bytes: at most kMaxTraceBytes either way; negative ones are refused unless `negative_allowed`
// (a plain trace's counters and args may be deltas).
std::optional<std::string> bytes_problem(double bytes, bool negative_allowed = false);
// The problem of a trace whose times run from `earliest_us` to `latest_us`, or nothing.
std::optional<std::string> span_problem(double earliest_us, double latest_us);

}  // namespace pipescope::traces
