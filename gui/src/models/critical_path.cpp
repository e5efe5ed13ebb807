#include "pipescope/gui/critical_path.hpp"

#include <algorithm>
#include <numeric>
#include <optional>
#include <tuple>
#include <unordered_set>

namespace pipescope::gui {
namespace {

using traces::TraceEvent;

// Per rank, its events ordered by end: "the latest that ended by then" by binary search.
class EventsByEnd {
 public:
  EventsByEnd(const std::vector<TraceEvent>& events, int rank_count)
      : events_(events), by_end_(static_cast<std::size_t>(rank_count)) {
    for (std::size_t i = 0; i < events.size(); ++i) by_end_[static_cast<std::size_t>(events[i].rank)].push_back(i);
    for (auto& list : by_end_)
      std::sort(list.begin(), list.end(),
                [&events](std::size_t a, std::size_t b) { return events[a].end_us() < events[b].end_us(); });
  }

  // The latest event of `rank` that ended by `limit_us`, other than `current` and those seen.
  std::optional<std::size_t> latest_ended_by(int rank, double limit_us, std::size_t current,
                                             const std::unordered_set<std::size_t>& seen) const {
    const auto& list = by_end_[static_cast<std::size_t>(rank)];
    auto it = std::upper_bound(list.begin(), list.end(), limit_us,
                               [this](double limit, std::size_t idx) { return limit < events_[idx].end_us(); });
    while (it != list.begin()) {
      --it;
      if (*it != current && !seen.count(*it)) return *it;
    }
    return std::nullopt;
  }

 private:
  const std::vector<TraceEvent>& events_;
  std::vector<std::vector<std::size_t>> by_end_;
};

// The series' flows (the trace's own, or those of its paired transfers) by where they
// arrive, to find the one feeding a receive by binary search.
class FlowsByArrival {
 public:
  FlowsByArrival(const TimelineModel& model, int series, double eps)
      : model_(model), series_(series), eps_(eps), flows_(model.flows_by_start(series)), incoming_(flows_.size()) {
    std::iota(incoming_.begin(), incoming_.end(), std::size_t{0});
    std::sort(incoming_.begin(), incoming_.end(),
              [this](std::size_t a, std::size_t b) { return arrival(a) < arrival(b); });
  }

  // The event where a flow arriving at e's lane during e left from.
  std::optional<std::size_t> source_of(const TraceEvent& e) const {
    auto it = std::lower_bound(incoming_.begin(), incoming_.end(), std::tuple(e.rank, e.lane, e.ts_us - eps_),
                               [this](std::size_t i, const auto& key) { return arrival(i) < key; });
    for (; it != incoming_.end(); ++it) {
      const auto& f = flows_[*it];
      if (f.to_rank != e.rank || f.to_lane != e.lane || f.to_ts_us > e.end_us() + eps_) break;
      const Row* source_row = model_.row(f.from_rank, series_, f.from_lane);
      if (!source_row) continue;
      if (auto b = source_row->block_at(f.from_ts_us, eps_)) return source_row->blocks[*b].event;
    }
    return std::nullopt;
  }

 private:
  std::tuple<int, int, double> arrival(std::size_t i) const {
    return std::tuple(flows_[i].to_rank, flows_[i].to_lane, flows_[i].to_ts_us);
  }

  const TimelineModel& model_;
  int series_;
  double eps_;
  const std::vector<traces::Flow>& flows_;
  std::vector<std::size_t> incoming_;
};

// The latest-ending event; of those ending together, the one on the lowest lane.
std::size_t latest_ending_event(const std::vector<TraceEvent>& events) {
  std::size_t current = 0;
  for (std::size_t i = 1; i < events.size(); ++i)
    if (events[i].end_us() > events[current].end_us() ||
        (events[i].end_us() == events[current].end_us() && events[i].lane < events[current].lane))
      current = i;
  return current;
}

}  // namespace

std::vector<std::size_t> critical_path_of(const TimelineModel& model, int series) {
  std::vector<std::size_t> path;
  const auto& events = model.trace(series).events;
  if (events.empty()) return path;
  const double eps = std::max(1e-6, model.end_us() * 1e-9);
  const EventsByEnd by_end(events, model.rank_count());
  const FlowsByArrival flows(model, series, eps);

  std::size_t current = latest_ending_event(events);
  std::unordered_set<std::size_t> seen;
  while (seen.insert(current).second) {
    path.push_back(current);
    const TraceEvent& e = events[current];
    if (e.ts_us <= eps) break;
    std::optional<std::size_t> next;
    // A receive whose send started after it was posted waited for the peer: the path goes
    // there, not through the wait on this rank.
    // A receive whose data was sent before it was posted is fed by its transfer (the flow).
    if (auto wait = model.receive_wait(series, current);
        wait && wait->waited_for_send_us > eps && !seen.count(wait->send_event))
      next = wait->send_event;
    if (!next && e.lane == static_cast<int>(traces::Lane::Recv)) next = flows.source_of(e);
    if (!next) next = by_end.latest_ended_by(e.rank, e.ts_us + eps, current, seen);
    if (!next) break;
    current = *next;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

}  // namespace pipescope::gui
