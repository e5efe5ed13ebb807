#include "pipescope/traces/bubble.hpp"

#include <algorithm>
#include <vector>

namespace pipescope::traces {

double busy_time_us(const Trace& trace, int rank) {
  std::vector<TimeRange> busy;
  for (const auto& e : trace.events)
    if (e.rank == rank && counts_as_busy(e.lane)) busy.push_back(e.range());
  std::sort(busy.begin(), busy.end(), [](const TimeRange& a, const TimeRange& b) { return a.start_us < b.start_us; });
  BusyTime total;
  for (const auto& r : busy) total.add(r.start_us, r.end_us);
  return total.total_us();
}

double bubble_fraction_of(double busy, double iteration) {
  if (iteration <= 0) return 0;
  return std::clamp(1.0 - busy / iteration, 0.0, 1.0);
}

}  // namespace pipescope::traces
