#include "pipescope/traces/trace.hpp"

#include <algorithm>

namespace pipescope::traces {

int Trace::rank_count() const {
  int highest = -1;
  for (const auto& e : events) highest = std::max(highest, e.rank);
  for (const auto& m : memory) highest = std::max(highest, m.rank);
  for (const auto& c : counters) highest = std::max(highest, c.rank);
  for (const auto& i : instants) highest = std::max(highest, i.rank);
  highest = std::max(highest, static_cast<int>(rank_names.size()) - 1);
  return std::max(meta.num_ranks, highest + 1);
}

const std::string* Trace::args_of(std::size_t event) const {
  auto it = std::lower_bound(args.begin(), args.end(), event, [](const EventArgs& a, std::size_t e) { return a.event < e; });
  return it != args.end() && it->event == event ? &it->json : nullptr;
}

double Trace::end_us() const {
  double end = 0;
  for (const auto& e : events) end = std::max(end, e.end_us());
  return end;
}

}  // namespace pipescope::traces
