// The schedule's own bubble: the trace's order of work replayed with the same costs on every
// rank, so that what idle time is left is the schedule's, not a slow rank's or a slow link's.
#include <algorithm>
#include <map>
#include <vector>

#include "pipescope/traces/step_attribution.hpp"
#include "step_attribution_graph.hpp"

namespace pipescope::traces {
namespace {

using step_graph::Graph;
using step_graph::kNone;

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The computes whose data the receives brought: each receive feeds the first compute of its
// rank that starts after it ended; the receive's data left when the compute before its send ended.
struct ReplayInputs {
  std::vector<std::vector<std::size_t>> feeding_computes;  // per event: the computes its start waits on
  std::vector<double> duration_us;                         // per event: its equal-cost duration
  double transit_us = 0;
};

ReplayInputs replay_inputs(const Graph& g) {
  const Trace& trace = *g.trace;
  ReplayInputs in;
  in.feeding_computes.resize(trace.events.size());
  in.duration_us.assign(trace.events.size(), 0.0);
  std::map<EventKind, std::pair<double, int>> by_kind;
  for (const auto& list : g.computes)
    for (std::size_t i : list) {
      auto& [sum, count] = by_kind[trace.events[i].kind];
      sum += trace.events[i].dur_us;
      ++count;
    }
  for (const auto& list : g.computes)
    for (std::size_t i : list) {
      const auto& totals = by_kind[trace.events[i].kind];
      in.duration_us[i] = totals.first / totals.second;
    }
  std::vector<double> transits;
  for (std::size_t r = 0; r < g.receives.size(); ++r) {
    const auto& computes = g.computes[r];
    std::size_t next = 0;
    for (std::size_t receive : g.receives[r]) {
      const TraceEvent& rcv = trace.events[receive];
      while (next < computes.size() && trace.events[computes[next]].ts_us < rcv.end_us() - step_graph::kTouchUs) ++next;
      const std::size_t send = g.send_of[receive];
      if (next == computes.size() || send == kNone) continue;
      const TraceEvent& snd = trace.events[send];
      transits.push_back(std::max(0.0, rcv.end_us() - std::max(snd.ts_us, rcv.ts_us)));
      const std::size_t source = step_graph::compute_ending_by(g, snd.rank, snd.ts_us);
      if (source != kNone) in.feeding_computes[computes[next]].push_back(source);
    }
  }
  in.transit_us = median_of(transits);
  return in;
}

}  // namespace

std::vector<double> equal_cost_idle_us(const Trace& trace, double& replay_step_us) {
  const Graph g = step_graph::build_graph(trace);
  const ReplayInputs in = replay_inputs(g);
  const std::size_t ranks = g.computes.size();
  std::vector<double> end_us(trace.events.size(), -1.0), busy_us(ranks, 0.0), rank_free_us(ranks, 0.0);
  std::vector<std::size_t> next(ranks, 0);
  std::size_t left = 0;
  for (const auto& list : g.computes) left += list.size();
  // Each round starts every compute whose inputs are done; a round that starts none (a cycle,
  // which only clocks that disagree can make) starts the earliest waiting compute regardless.
  while (left > 0) {
    bool progress = false;
    for (std::size_t r = 0; r < ranks; ++r) {
      while (next[r] < g.computes[r].size()) {
        const std::size_t c = g.computes[r][next[r]];
        double start = rank_free_us[r];
        bool ready = true;
        for (std::size_t source : in.feeding_computes[c]) {
          if (end_us[source] < 0) ready = false;
          start = std::max(start, end_us[source] + in.transit_us);
        }
        if (!ready) break;
        end_us[c] = start + in.duration_us[c];
        rank_free_us[r] = end_us[c];
        busy_us[r] += in.duration_us[c];
        ++next[r];
        --left;
        progress = true;
      }
    }
    if (progress) continue;
    for (std::size_t r = 0; r < ranks; ++r) {
      if (next[r] >= g.computes[r].size()) continue;
      const std::size_t c = g.computes[r][next[r]];
      end_us[c] = rank_free_us[r] + in.duration_us[c];
      rank_free_us[r] = end_us[c];
      busy_us[r] += in.duration_us[c];
      ++next[r];
      --left;
      break;
    }
  }
  replay_step_us = ranks ? *std::max_element(rank_free_us.begin(), rank_free_us.end()) : 0.0;
  std::vector<double> idle(ranks);
  for (std::size_t r = 0; r < ranks; ++r) idle[r] = std::max(0.0, replay_step_us - busy_us[r]);
  return idle;
}

}  // namespace pipescope::traces
