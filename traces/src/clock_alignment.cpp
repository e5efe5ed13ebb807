#include "pipescope/traces/clock_alignment.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "pipescope/traces/transfer_pairs.hpp"

namespace pipescope::traces {
namespace {

constexpr double kInfinityUs = std::numeric_limits<double>::infinity();

// What accumulates for one (from_rank < to_rank) before the estimate is chosen.
struct BoundBuilder {
  double lower_us = -kInfinityUs;
  double upper_us = kInfinityUs;
  double collective_lower_us = -kInfinityUs;
  double collective_upper_us = kInfinityUs;
  std::vector<double> collective_estimates_us;
  int transfers = 0;
  bool from_to = false;  // a transfer from from_rank to to_rank bounds it from below
  bool to_from = false;  // one back bounds it from above
};

using RankPair = std::pair<int, int>;

// o_b - o_a >= send_start_a - receive_end_b for a send from a to b, written for the ordered pair.
void add_transfer_bound(std::map<RankPair, BoundBuilder>& builders, const TraceEvent& send, const TraceEvent& receive) {
  if (send.rank == receive.rank) return;
  const bool forward = send.rank < receive.rank;
  BoundBuilder& b = builders[forward ? RankPair{send.rank, receive.rank} : RankPair{receive.rank, send.rank}];
  ++b.transfers;
  if (forward) {
    b.lower_us = std::max(b.lower_us, send.ts_us - receive.end_us());
    b.from_to = true;
  } else {
    b.upper_us = std::min(b.upper_us, receive.end_us() - send.ts_us);
    b.to_from = true;
  }
}

bool is_collective(EventKind kind) {
  return kind == EventKind::ReduceGrad || kind == EventKind::ReduceTied || is_all_to_all(kind);
}

// A collective's occurrence: its kind, the stage of a gradient reduction (the replicas of one
// stage reduce together), and how many of that key the rank saw before.
using CollectiveKey = std::tuple<EventKind, int, int>;

void add_collective_bounds(const Trace& trace, std::map<RankPair, BoundBuilder>& builders) {
  std::map<std::pair<int, std::pair<EventKind, int>>, int> seen;  // (rank, (kind, stage)) -> count
  std::map<CollectiveKey, std::vector<const TraceEvent*>> members;
  std::vector<const TraceEvent*> collectives;
  for (const auto& e : trace.events)
    if (is_collective(e.kind)) collectives.push_back(&e);
  std::sort(collectives.begin(), collectives.end(), [](const TraceEvent* a, const TraceEvent* b) {
    return std::tie(a->rank, a->ts_us) < std::tie(b->rank, b->ts_us);
  });
  for (const TraceEvent* e : collectives) {
    const int stage = e->kind == EventKind::ReduceGrad ? e->stage : -1;
    const int occurrence = seen[{e->rank, {e->kind, stage}}]++;
    members[{e->kind, stage, occurrence}].push_back(e);
  }
  for (const auto& entry : members) {
    const auto& group = entry.second;
    for (std::size_t i = 0; i < group.size(); ++i)
      for (std::size_t j = 0; j < group.size(); ++j) {
        const TraceEvent& a = *group[i];
        const TraceEvent& b = *group[j];
        if (a.rank >= b.rank) continue;
        BoundBuilder& bound = builders[{a.rank, b.rank}];
        // Neither end can come before the other rank's start; the ends meet.
        bound.collective_lower_us = std::max(bound.collective_lower_us, a.ts_us - b.end_us());
        bound.collective_upper_us = std::min(bound.collective_upper_us, a.end_us() - b.ts_us);
        bound.collective_estimates_us.push_back(a.end_us() - b.end_us());
      }
  }
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Transfers bound the clocks for certain; a collective only if it waited for every rank (one
// with nothing to reduce returns at once), so collectives speak only for ranks that exchanged
// no data: then the estimate is the difference of the ends, kept within their bounds.
void settle_bounds(BoundBuilder& b) {
  if (b.transfers > 0 || b.collective_estimates_us.empty()) return;
  b.lower_us = b.collective_lower_us;
  b.upper_us = b.collective_upper_us;
}

double estimate_of(const BoundBuilder& b) {
  const bool has_lower = std::isfinite(b.lower_us), has_upper = std::isfinite(b.upper_us);
  if (b.transfers == 0 && !b.collective_estimates_us.empty()) {
    if (has_lower && has_upper && b.lower_us > b.upper_us) return (b.lower_us + b.upper_us) / 2;
    return std::clamp(median(b.collective_estimates_us), b.lower_us, b.upper_us);
  }
  if (has_lower && has_upper) return (b.lower_us + b.upper_us) / 2;
  // One way only: nothing says the clocks differ unless the bound is broken, and then by at least it.
  if (has_lower) return std::max(b.lower_us, 0.0);
  if (has_upper) return std::min(b.upper_us, 0.0);
  return 0;
}

// A bound with two sides (pairs both ways, or a collective) gives an estimate; one with one side
// only says where the offset cannot be.
bool two_sided(const ClockBound& b) {
  return b.collectives > 0 || (std::isfinite(b.lower_us) && std::isfinite(b.upper_us));
}

// Offsets with the lowest rank of each connected group at 0: a walk from it sets each rank from
// its neighbour (over two-sided bounds first), rounds of averaging over every bound settle the
// ranks that several bounds reach (a V schedule's last rank talks to the first; one-sided bounds
// weigh little), and rounds of projection move each offset into the bounds it breaks.
std::vector<double> solve_offsets(int ranks, const std::vector<ClockBound>& bounds) {
  struct Edge {
    int peer;
    double delta_us;
    double weight;
  };
  const auto n = static_cast<std::size_t>(ranks);
  std::vector<std::vector<Edge>> neighbours(n);
  for (const auto& b : bounds) {
    const double weight = two_sided(b) ? 1.0 : 1e-3;
    neighbours[static_cast<std::size_t>(b.from_rank)].push_back({b.to_rank, b.estimate_us, weight});
    neighbours[static_cast<std::size_t>(b.to_rank)].push_back({b.from_rank, -b.estimate_us, weight});
  }
  std::vector<double> offset(n, 0.0);
  std::vector<bool> reached(n, false), root(n, false);
  for (int start = 0; start < ranks; ++start) {
    if (reached[static_cast<std::size_t>(start)]) continue;
    reached[static_cast<std::size_t>(start)] = root[static_cast<std::size_t>(start)] = true;
    for (const double minimum_weight : {1.0, 0.0}) {
      std::queue<int> next;
      for (int r = 0; r < ranks; ++r)
        if (reached[static_cast<std::size_t>(r)]) next.push(r);
      while (!next.empty()) {
        const int r = next.front();
        next.pop();
        for (const Edge& e : neighbours[static_cast<std::size_t>(r)]) {
          if (reached[static_cast<std::size_t>(e.peer)] || e.weight < minimum_weight) continue;
          reached[static_cast<std::size_t>(e.peer)] = true;
          offset[static_cast<std::size_t>(e.peer)] = offset[static_cast<std::size_t>(r)] + e.delta_us;
          next.push(e.peer);
        }
      }
    }
  }
  for (int round = 0; round < 100; ++round)
    for (std::size_t r = 0; r < n; ++r) {
      if (root[r] || neighbours[r].size() < 2) continue;
      double sum = 0, weights = 0;
      for (const Edge& e : neighbours[r]) {
        sum += e.weight * (offset[static_cast<std::size_t>(e.peer)] - e.delta_us);  // o_peer = o_r + delta
        weights += e.weight;
      }
      offset[r] = sum / weights;
    }
  for (int round = 0; round < 100; ++round)
    for (const auto& b : bounds) {
      const auto from = static_cast<std::size_t>(b.from_rank), to = static_cast<std::size_t>(b.to_rank);
      const double delta = offset[to] - offset[from];
      const double move = delta < b.lower_us ? b.lower_us - delta : delta > b.upper_us ? b.upper_us - delta : 0.0;
      if (move == 0) continue;
      if (root[to])
        offset[from] -= move;
      else
        offset[to] += move;
    }
  return offset;
}

}  // namespace

std::vector<ClockBound> clock_bounds(const Trace& trace) {
  std::map<RankPair, BoundBuilder> builders;
  for (const auto& pair : pair_transfers(trace))
    add_transfer_bound(builders, trace.events[pair.send], trace.events[pair.receive]);
  add_collective_bounds(trace, builders);
  std::vector<ClockBound> bounds;
  bounds.reserve(builders.size());
  for (auto& [ranks, b] : builders) {
    settle_bounds(b);
    bounds.push_back({ranks.first, ranks.second, b.lower_us, b.upper_us, estimate_of(b), b.transfers,
                      static_cast<int>(b.collective_estimates_us.size())});
  }
  return bounds;
}

bool transfers_bound_clocks(const Trace& trace) { return trace.meta.schedule != "torch.distributed.pipelining"; }

ClockAlignment estimate_clock_alignment(const Trace& trace, bool force) {
  ClockAlignment alignment;
  const int ranks = trace.rank_count();
  alignment.offset_us.assign(static_cast<std::size_t>(std::max(ranks, 0)), 0.0);
  if (!force && !transfers_bound_clocks(trace)) return alignment;
  alignment.bounds = clock_bounds(trace);
  for (const auto& b : alignment.bounds) {
    if (std::isfinite(b.lower_us)) alignment.worst_violation_us = std::max(alignment.worst_violation_us, b.lower_us);
    if (std::isfinite(b.upper_us)) alignment.worst_violation_us = std::max(alignment.worst_violation_us, -b.upper_us);
  }
  if (alignment.worst_violation_us <= kClockToleranceUs) {
    alignment.worst_violation_us = 0;
    return alignment;
  }
  alignment.offset_us = solve_offsets(ranks, alignment.bounds);
  alignment.applied = true;
  return alignment;
}

ClockAlignment align_clocks(Trace& trace, bool force) {
  ClockAlignment alignment = estimate_clock_alignment(trace, force);
  if (!alignment.applied) return alignment;
  // Keep the earliest event where it was, so that the step still starts where the file said.
  double before = kInfinityUs, after = kInfinityUs;
  const auto offset_of = [&](int rank) {
    return rank >= 0 && static_cast<std::size_t>(rank) < alignment.offset_us.size()
               ? alignment.offset_us[static_cast<std::size_t>(rank)]
               : 0.0;
  };
  for (const auto& e : trace.events) {
    before = std::min(before, e.ts_us);
    after = std::min(after, e.ts_us + offset_of(e.rank));
  }
  if (std::isfinite(before))
    for (double& o : alignment.offset_us) o += before - after;
  for (auto& e : trace.events) e.ts_us += offset_of(e.rank);
  for (auto& f : trace.flows) {
    f.from_ts_us += offset_of(f.from_rank);
    f.to_ts_us += offset_of(f.to_rank);
  }
  for (auto& m : trace.memory) m.ts_us += offset_of(m.rank);
  for (auto& i : trace.instants) i.ts_us += offset_of(i.rank);
  for (auto& c : trace.counters) c.ts_us += offset_of(c.rank);
  trace.meta.extra["clock_offsets_us"] = alignment.offset_us;
  return alignment;
}

std::string describe_clock_alignment(const ClockAlignment& alignment) {
  if (!alignment.applied) return "clocks: consistent (no offsets)";
  std::string offsets;
  for (std::size_t r = 0; r < alignment.offset_us.size(); ++r)
    offsets += fmt::format("{}{:+.1f}", r ? ", " : "", alignment.offset_us[r]);
  return fmt::format(
      "clocks: ranks' offsets {} us (the times as written broke a send/receive or collective bound by {:.1f} us)",
      offsets, alignment.worst_violation_us);
}

}  // namespace pipescope::traces
