#include "step_attribution_graph.hpp"

#include <algorithm>
#include <limits>

#include "pipescope/traces/transfer_pairs.hpp"

namespace pipescope::traces::step_graph {

bool is_compute(const TraceEvent& e) { return e.kind != EventKind::Other && event_kind_lane(e.kind) == Lane::Compute; }

Graph build_graph(const Trace& trace) {
  Graph g;
  g.trace = &trace;
  const auto ranks = static_cast<std::size_t>(std::max(trace.rank_count(), 0));
  g.computes.resize(ranks);
  g.receives.resize(ranks);
  g.sends.resize(ranks);
  g.send_of.assign(trace.events.size(), kNone);
  g.position.assign(trace.events.size(), kNone);
  g.start_us = std::numeric_limits<double>::infinity();
  g.end_us = -g.start_us;
  double last_compute_end = -g.start_us;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.rank < 0) continue;
    g.start_us = std::min(g.start_us, e.ts_us);
    g.end_us = std::max(g.end_us, e.end_us());
    if (is_compute(e)) {
      g.computes[static_cast<std::size_t>(e.rank)].push_back(i);
      if (e.end_us() > last_compute_end) {
        last_compute_end = e.end_us();
        g.last_event = i;
      }
    } else if (is_receive(e.kind)) {
      g.receives[static_cast<std::size_t>(e.rank)].push_back(i);
    } else if (is_send(e.kind)) {
      g.sends[static_cast<std::size_t>(e.rank)].push_back(i);
    }
  }
  if (g.computes.empty() || trace.events.empty()) g.start_us = g.end_us = 0;
  const auto by = [&](auto time) {
    return [&trace, time](std::size_t a, std::size_t b) { return time(trace.events[a]) < time(trace.events[b]); };
  };
  for (auto& list : g.computes) {
    std::stable_sort(list.begin(), list.end(), by([](const TraceEvent& e) { return e.ts_us; }));
    for (std::size_t k = 0; k < list.size(); ++k) g.position[list[k]] = k;
  }
  for (auto& list : g.receives)
    std::stable_sort(list.begin(), list.end(), by([](const TraceEvent& e) { return e.end_us(); }));
  for (const auto& pair : pair_transfers(trace)) g.send_of[pair.receive] = pair.send;
  return g;
}

std::size_t previous_compute(const Graph& g, std::size_t compute) {
  const std::size_t k = g.position[compute];
  if (k == kNone || k == 0) return kNone;
  return g.computes[static_cast<std::size_t>(g.trace->events[compute].rank)][k - 1];
}

std::size_t compute_ending_by(const Graph& g, int rank, double t_us) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= g.computes.size()) return kNone;
  std::size_t best = kNone;
  double best_end = -std::numeric_limits<double>::infinity();
  for (std::size_t i : g.computes[static_cast<std::size_t>(rank)]) {
    const TraceEvent& e = g.trace->events[i];
    if (e.ts_us > t_us) break;
    if (e.end_us() <= t_us + kTouchUs && e.end_us() > best_end) {
      best = i;
      best_end = e.end_us();
    }
  }
  return best;
}

std::size_t receive_ending_in(const Graph& g, int rank, double after_us, double by_us) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= g.receives.size()) return kNone;
  const auto& list = g.receives[static_cast<std::size_t>(rank)];
  const auto end_of = [&](std::size_t i) { return g.trace->events[i].end_us(); };
  auto it = std::upper_bound(list.begin(), list.end(), by_us + kTouchUs,
                             [&](double t, std::size_t i) { return t < end_of(i); });
  if (it == list.begin()) return kNone;
  const std::size_t candidate = *std::prev(it);
  return end_of(candidate) > after_us ? candidate : kNone;
}

std::size_t predecessor(const Graph& g, std::size_t event) {
  const TraceEvent& e = g.trace->events[event];
  if (is_compute(e)) {
    const std::size_t before = previous_compute(g, event);
    const double busy_until = before == kNone ? g.start_us - kTouchUs : g.trace->events[before].end_us() + kTouchUs;
    const std::size_t receive = receive_ending_in(g, e.rank, busy_until, e.ts_us);
    return receive != kNone ? receive : before;
  }
  if (is_receive(e.kind)) {
    const std::size_t send = g.send_of[event];
    // A receive posted before its send started waited for the sender.
    if (send != kNone && g.trace->events[send].ts_us >= e.ts_us - kTouchUs) return send;
    return compute_ending_by(g, e.rank, e.ts_us);
  }
  return compute_ending_by(g, e.rank, e.ts_us);
}

}  // namespace pipescope::traces::step_graph
