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

std::vector<double> busy_time_us_by_rank(const Trace& trace, int num_ranks) {
  struct Busy {
    int rank;
    TimeRange range;
  };
  std::vector<Busy> busy;
  for (const auto& e : trace.events)
    if (e.rank >= 0 && e.rank < num_ranks && counts_as_busy(e.lane)) busy.push_back({e.rank, e.range()});
  std::sort(busy.begin(), busy.end(), [](const Busy& a, const Busy& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.range.start_us < b.range.start_us;
  });
  std::vector<double> total(static_cast<std::size_t>(std::max(num_ranks, 0)), 0.0);
  for (std::size_t i = 0; i < busy.size();) {
    BusyTime rank_busy;
    const int rank = busy[i].rank;
    for (; i < busy.size() && busy[i].rank == rank; ++i) rank_busy.add(busy[i].range.start_us, busy[i].range.end_us);
    total[static_cast<std::size_t>(rank)] = rank_busy.total_us();
  }
  return total;
}

double bubble_fraction_of(double busy, double iteration) {
  if (iteration <= 0) return 0;
  return std::clamp(1.0 - busy / iteration, 0.0, 1.0);
}

}  // namespace pipescope::traces
