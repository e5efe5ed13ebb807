#include "pipescope/traces/trace.hpp"

#include <algorithm>

namespace pipescope::traces {

int Trace::rank_count() const {
  int highest = -1;
  for (const auto& e : events) highest = std::max(highest, e.rank);
  for (const auto& m : memory) highest = std::max(highest, m.rank);
  highest = std::max(highest, static_cast<int>(rank_names.size()) - 1);
  return std::max(meta.num_ranks, highest + 1);
}

double Trace::end_us() const {
  double end = 0;
  for (const auto& e : events) end = std::max(end, e.end_us());
  return end;
}

}  // namespace pipescope::traces
