// The one definition of the bubble, used by the simulator's summary, `ppsim compare` and the
// viewer: a rank's bubble is the share of the iteration in which its compute lane runs nothing.
// Everything the trace puts on the compute lane is busy (F, B, I, W and loads); sends,
// receives, reductions and the optimizer step have lanes of their own and are not.
#pragma once

#include <vector>

#include "pipescope/traces/trace.hpp"

namespace pipescope::traces {

// Whether time spent on `lane` is busy time for the bubble.
constexpr bool counts_as_busy(Lane lane) { return lane == Lane::Compute; }
constexpr bool counts_as_busy(int lane) { return lane == static_cast<int>(Lane::Compute); }

// Busy time of one rank from its busy ranges given in start order; overlapping parts count once.
class BusyTime {
 public:
  void add(double start_us, double end_us) {
    const double from = start_us > covered_until_us_ ? start_us : covered_until_us_;
    if (end_us > from) busy_us_ += end_us - from;
    if (end_us > covered_until_us_) covered_until_us_ = end_us;
  }
  double total_us() const { return busy_us_; }

 private:
  double busy_us_ = 0;
  double covered_until_us_ = -1e300;
};

// The busy time of `rank` in `trace` (its events on busy lanes, in any order).
double busy_time_us(const Trace& trace, int rank);

// The busy time of ranks 0 .. num_ranks-1 in one pass over the events (events of other ranks
// are left out): what a per-rank loop over busy_time_us would give, without its ranks x events.
std::vector<double> busy_time_us_by_rank(const Trace& trace, int num_ranks);

// The bubble of a rank busy `busy` out of `iteration` (any one unit): 1 - busy / iteration,
// clamped to [0, 1]; 0 for an empty iteration.
double bubble_fraction_of(double busy, double iteration);

}  // namespace pipescope::traces
