#include "pipescope/traces/step_attribution.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "step_attribution_graph.hpp"

namespace pipescope::traces {
namespace {

using step_graph::Graph;
using step_graph::kNone;

constexpr double kSameWorkRatio = 10;

// Per rank and kind of compute: how many and how long, to compare a rank with the others.
struct ComputeTotals {
  std::vector<std::map<EventKind, std::pair<double, int>>> by_rank;  // (total us, count)

  // The mean duration of `kind` on every rank but `rank`; NaN when they have none.
  double others_mean_us(int rank, EventKind kind) const {
    double sum = 0;
    int count = 0;
    for (std::size_t r = 0; r < by_rank.size(); ++r) {
      if (static_cast<int>(r) == rank) continue;
      const auto it = by_rank[r].find(kind);
      if (it == by_rank[r].end()) continue;
      sum += it->second.first;
      count += it->second.second;
    }
    return count ? sum / count : std::nan("");
  }
  // others_mean_us when the rank's own mean is within kSameWorkRatio of it either way; else NaN:
  // beyond that it is other work under one name (a first stage computes no input gradient),
  // not the same work slower.
  double comparable_mean_us(int rank, EventKind kind) const {
    const double others = others_mean_us(rank, kind), own = own_mean_us(rank, kind);
    if (std::isnan(others) || std::isnan(own) || others <= 0 || own <= 0) return std::nan("");
    return own / others > kSameWorkRatio || others / own > kSameWorkRatio ? std::nan("") : others;
  }
  double own_mean_us(int rank, EventKind kind) const {
    const auto& mine = by_rank[static_cast<std::size_t>(rank)];
    const auto it = mine.find(kind);
    return it == mine.end() || it->second.second == 0 ? std::nan("") : it->second.first / it->second.second;
  }
  // The rank's compute time over what the other ranks' means say the same work takes.
  double ratio(int rank) const {
    double own = 0, expected = 0;
    for (const auto& [kind, totals] : by_rank[static_cast<std::size_t>(rank)]) {
      const double others = comparable_mean_us(rank, kind);
      if (std::isnan(others)) continue;
      own += totals.first;
      expected += others * totals.second;
    }
    return expected > 0 ? own / expected : 1.0;
  }
};

ComputeTotals compute_totals(const Graph& g) {
  ComputeTotals t;
  t.by_rank.resize(g.computes.size());
  for (std::size_t r = 0; r < g.computes.size(); ++r)
    for (std::size_t i : g.computes[r]) {
      auto& entry = t.by_rank[r][g.trace->events[i].kind];
      entry.first += g.trace->events[i].dur_us;
      ++entry.second;
    }
  return t;
}

// From the send's start (or the receive's post, if later) to the data being there.
double transit_us(const Trace& trace, std::size_t send, std::size_t receive) {
  const TraceEvent& s = trace.events[send];
  const TraceEvent& r = trace.events[receive];
  return std::max(0.0, r.end_us() - std::max(s.ts_us, r.ts_us));
}

double median_rate(const Graph& g) {
  std::vector<double> rates;
  for (std::size_t i = 0; i < g.send_of.size(); ++i) {
    const std::size_t send = g.send_of[i];
    if (send == kNone) continue;
    const double t = transit_us(*g.trace, send, i);
    const auto bytes = g.trace->events[i].bytes > 0 ? g.trace->events[i].bytes : g.trace->events[send].bytes;
    if (t > 0 && bytes > 0) rates.push_back(static_cast<double>(bytes) / t);
  }
  if (rates.empty()) return 0;
  std::nth_element(rates.begin(), rates.begin() + static_cast<std::ptrdiff_t>(rates.size() / 2), rates.end());
  return rates[rates.size() / 2];
}

// A transfer counts as slow when it took over three times its bytes over the link rate.
double transfer_excess_us(const Graph& g, double rate, std::size_t send, std::size_t receive) {
  const auto bytes = g.trace->events[receive].bytes > 0 ? g.trace->events[receive].bytes : g.trace->events[send].bytes;
  if (rate <= 0 || bytes <= 0) return 0;
  const double expected = static_cast<double>(bytes) / rate;
  const double t = transit_us(*g.trace, send, receive);
  return t > 3 * expected ? t - expected : 0.0;
}

// Follows a wait back to the rank that was busy: receive -> peer's send -> the compute before
// it -> the receive that compute waited on -> ... until a compute that did not wait.
WaitCause follow_wait(const Graph& g, double rate, std::size_t receive) {
  const Trace& trace = *g.trace;
  WaitCause cause;
  cause.receive = receive;
  cause.send = g.send_of[receive];
  // Only a receive posted before its send waited on the transfer; one posted after took data
  // that was already on its way, and its time is the receiver's.
  if (cause.send != kNone && trace.events[cause.send].ts_us >= trace.events[receive].ts_us - step_graph::kTouchUs)
    cause.slow_transfer = transfer_excess_us(g, rate, cause.send, receive) > kMinimumCulpritUs;
  std::size_t cur = receive, via = kNone;
  for (std::size_t steps = 0; steps <= trace.events.size(); ++steps) {
    const std::size_t before = step_graph::predecessor(g, cur);
    const TraceEvent& e = trace.events[cur];
    if (before == kNone || (step_graph::is_compute(e) && !is_receive(trace.events[before].kind))) break;
    if (trace.events[before].rank != e.rank) via = before;
    cur = before;
  }
  cause.root_rank = trace.events[cur].rank;
  cause.root_event = cur;
  cause.root_via = via != kNone && trace.events[via].rank == cause.root_rank ? via : cur;
  return cause;
}

std::vector<IdleGap> idle_gaps(const Graph& g, double rate) {
  std::vector<IdleGap> gaps;
  const Trace& trace = *g.trace;
  for (std::size_t r = 0; r < g.computes.size(); ++r) {
    double free_us = g.start_us;
    for (std::size_t c : g.computes[r]) {
      const TraceEvent& e = trace.events[c];
      if (e.ts_us > free_us + step_graph::kTouchUs) {
        IdleGap gap;
        gap.rank = static_cast<int>(r);
        gap.start_us = free_us;
        gap.end_us = e.ts_us;
        const std::size_t receive = step_graph::receive_ending_in(g, e.rank, free_us, e.ts_us);
        if (receive != kNone && g.send_of[receive] != kNone) {
          gap.waited = true;
          gap.cause = follow_wait(g, rate, receive);
        }
        gaps.push_back(gap);
      }
      free_us = std::max(free_us, e.end_us());
    }
  }
  return gaps;
}

double busy_union_us(const Graph& g, std::size_t rank) {
  double busy = 0, covered_to = -1e300;
  for (std::size_t c : g.computes[rank]) {
    const TraceEvent& e = g.trace->events[c];
    const double from = std::max(e.ts_us, covered_to);
    if (e.end_us() > from) busy += e.end_us() - from;
    covered_to = std::max(covered_to, e.end_us());
  }
  return busy;
}

void attribute_ranks(const Graph& g, const ComputeTotals& totals, const std::vector<double>& replay_idle,
                     StepAttribution& a) {
  const std::size_t ranks = g.computes.size();
  a.ranks.resize(ranks);
  std::vector<double> rank_waits(ranks, 0.0), transfer_waits(ranks, 0.0), all_waits(ranks, 0.0);
  for (std::size_t r = 0; r < ranks; ++r) a.ranks[r].waited_on_rank_us.assign(ranks, 0.0);
  for (const auto& gap : a.gaps) {
    if (!gap.waited || gap.cause.root_rank < 0) continue;
    const auto r = static_cast<std::size_t>(gap.rank);
    const double t = gap.end_us - gap.start_us;
    all_waits[r] += t;
    a.ranks[r].waited_on_rank_us[static_cast<std::size_t>(gap.cause.root_rank)] += t;
    if (gap.cause.slow_transfer)
      transfer_waits[r] += t;
    else if (gap.cause.root_rank != gap.rank)
      rank_waits[r] += t;
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    RankAttribution& ra = a.ranks[r];
    ra.rank = static_cast<int>(r);
    ra.idle_us = std::max(0.0, a.step_us - busy_union_us(g, r));
    ra.schedule_bubble_us = std::min(ra.idle_us, r < replay_idle.size() ? replay_idle[r] : 0.0);
    // The waits beyond what the schedule itself makes the rank wait are the excess's part that
    // others caused; the rest of the excess is the rank's own (it idled waiting on no one).
    const double excess = ra.idle_us - ra.schedule_bubble_us;
    const double caused = std::min(excess, std::max(0.0, all_waits[r] - ra.schedule_bubble_us));
    if (all_waits[r] > 0) {
      ra.waited_on_slow_rank_us = caused * std::min(1.0, rank_waits[r] / all_waits[r]);
      ra.waited_on_transfer_us = caused * std::min(1.0, transfer_waits[r] / all_waits[r]);
    }
    ra.own_us = std::max(0.0, excess - ra.waited_on_slow_rank_us - ra.waited_on_transfer_us);
    // Whom it waited on: another rank (waits that lead back to itself are its own).
    for (std::size_t peer = 0; peer < ranks; ++peer)
      if (peer != r && ra.waited_on_rank_us[peer] > 0 &&
          (ra.waited_most_on < 0 ||
           ra.waited_on_rank_us[peer] > ra.waited_on_rank_us[static_cast<std::size_t>(ra.waited_most_on)]))
        ra.waited_most_on = static_cast<int>(peer);
    ra.compute_ratio = totals.ratio(static_cast<int>(r));
  }
}

std::vector<std::size_t> critical_path(const Graph& g) {
  std::vector<std::size_t> path;
  for (std::size_t cur = g.last_event; cur != kNone && path.size() <= g.trace->events.size();
       cur = step_graph::predecessor(g, cur))
    path.push_back(cur);
  std::reverse(path.begin(), path.end());
  return path;
}

// What each rank and link cost the critical path beyond the others: a rank's computes over the
// other ranks' mean for the same kind and its stalls (time between its own operations on the
// path with no transfer of its outstanding: a starved core, or work the trace does not show); a
// link's transfers over their bytes at the link rate.
struct PathExcess {
  std::map<int, double> compute_us, own_us;
  std::map<int, std::pair<double, std::size_t>> worst;                     // rank -> (excess, event)
  std::map<std::pair<int, int>, std::pair<double, std::size_t>> transfer;  // (from, to) -> (excess, receive)
};

// The part of [from_us, to_us] that none of `rank`'s transfers covers: a rank with a receive or
// a send outstanding is waiting on its peer (a send completes when the peer takes the data).
double uncovered_us(const Graph& g, int rank, double from_us, double to_us) {
  if (to_us - from_us <= step_graph::kTouchUs) return 0;
  std::vector<std::pair<double, double>> covered;
  for (const auto* list : {&g.receives[static_cast<std::size_t>(rank)], &g.sends[static_cast<std::size_t>(rank)]})
    for (std::size_t r : *list) {
      const TraceEvent& e = g.trace->events[r];
      if (e.end_us() > from_us && e.ts_us < to_us)
        covered.emplace_back(std::max(e.ts_us, from_us), std::min(e.end_us(), to_us));
    }
  std::sort(covered.begin(), covered.end());
  double left = to_us - from_us, reached = from_us;
  for (const auto& [begin, end] : covered) {
    if (end <= reached) continue;
    left -= end - std::max(begin, reached);
    reached = end;
  }
  return std::max(0.0, left);
}

PathExcess path_excess(const Graph& g, const ComputeTotals& totals, const StepAttribution& a) {
  const Trace& trace = *g.trace;
  PathExcess x;
  for (std::size_t k = 0; k < a.critical_path.size(); ++k) {
    const std::size_t i = a.critical_path[k];
    const TraceEvent& e = trace.events[i];
    const TraceEvent* before = k > 0 ? &trace.events[a.critical_path[k - 1]] : nullptr;
    if (before && before->rank == e.rank) {
      x.own_us[e.rank] += uncovered_us(g, e.rank, before->end_us(), e.ts_us);
    }
    if (step_graph::is_compute(e)) {
      const double others = totals.comparable_mean_us(e.rank, e.kind);
      if (std::isnan(others) || e.dur_us <= others) continue;
      x.compute_us[e.rank] += e.dur_us - others;
      auto& worst = x.worst[e.rank];
      if (e.dur_us - others > worst.first) worst = {e.dur_us - others, i};
    } else if (is_receive(e.kind) && k > 0 && g.send_of[i] == a.critical_path[k - 1]) {
      auto& t = x.transfer[{trace.events[g.send_of[i]].rank, e.rank}];
      t.first += transfer_excess_us(g, a.link_rate_bytes_per_us, g.send_of[i], i);
      t.second = i;
    }
  }
  return x;
}

// When the critical path shows no excess (its waits were receives posted after their sends,
// whose time is nobody's for certain) but the other ranks waited on one rank beyond the
// schedule's bubble, that rank is the one: named by how long the rank that waited most on it
// waited beyond the bubble.
bool name_most_waited_on(StepAttribution& a, double threshold_us) {
  Culprit& c = a.culprit;
  for (std::size_t culprit = 0; culprit < a.ranks.size(); ++culprit) {
    double held = 0;
    for (const auto& r : a.ranks)
      if (r.rank != static_cast<int>(culprit))
        held = std::max(held, std::min(r.waited_on_rank_us[culprit], r.waited_on_slow_rank_us));
    if (held >= threshold_us && held > c.held_back_us) {
      c.found = true;
      c.rank = static_cast<int>(culprit);
      c.held_back_us = c.stalled_us = held;
    }
  }
  if (!c.found) return false;
  return true;
}

// The largest excess on the critical path: a rank (its computes and stalls) or a link.
void find_culprit(const Graph& g, const ComputeTotals& totals, StepAttribution& a) {
  const Trace& trace = *g.trace;
  PathExcess x = path_excess(g, totals, a);
  std::map<int, double> rank_excess;
  for (const auto& entry : x.compute_us) rank_excess[entry.first] += entry.second;
  for (const auto& entry : x.own_us) rank_excess[entry.first] += entry.second;
  // A transfer is slow on the wire only if both ends could run: when one of them stalled on the
  // path (a starved core also moves its data late), its excess is that rank's.
  for (auto it = x.transfer.begin(); it != x.transfer.end();) {
    const int from = it->first.first, to = it->first.second;
    const double from_own = x.own_us[from], to_own = x.own_us[to];
    if (std::max(from_own, to_own) <= kMinimumCulpritUs) {
      ++it;
      continue;
    }
    rank_excess[from_own > to_own ? from : to] += it->second.first;
    it = x.transfer.erase(it);
  }
  Culprit& c = a.culprit;
  const auto name = [&c](bool transfer, int rank, int to_rank, std::size_t event, double excess) {
    c.found = true;
    c.transfer = transfer;
    c.rank = rank;
    c.to_rank = to_rank;
    c.event = event;
    c.held_back_us = excess;
  };
  for (const auto& entry : rank_excess) {
    if (entry.second <= c.held_back_us) continue;
    // The rank's worst compute names the kind; a rank that only stalled is named by its last path event.
    std::size_t event = x.worst.count(entry.first) ? x.worst[entry.first].second : kNone;
    if (event == kNone)
      for (std::size_t i : a.critical_path)
        if (trace.events[i].rank == entry.first) event = i;
    name(false, entry.first, -1, event, entry.second);
    c.compute_excess_us = x.compute_us[entry.first];
    c.stalled_us = x.own_us[entry.first];
  }
  for (const auto& entry : x.transfer)
    if (entry.second.first > c.held_back_us)
      name(true, entry.first.first, entry.first.second, entry.second.second, entry.second.first);
  const double threshold_us = std::max(kCulpritStepShare * a.step_us, kMinimumCulpritUs);
  if (c.held_back_us < threshold_us) {
    a.culprit = Culprit{};
    if (!name_most_waited_on(a, threshold_us)) return;
    for (std::size_t i = 0; i < trace.events.size(); ++i)
      if (trace.events[i].rank == c.rank) c.event = i;
  }
  if (!c.transfer && step_graph::is_compute(trace.events[c.event])) {
    const EventKind kind = trace.events[c.event].kind;
    c.kind_ratio = totals.own_mean_us(c.rank, kind) / totals.others_mean_us(c.rank, kind);
  }
  // Time waited through each kind of the culprit's events (SEND_F, SEND_B, ...), and one of them.
  std::map<EventKind, std::pair<double, std::size_t>> via_time;
  std::vector<bool> waiter(a.ranks.size(), false);
  for (const auto& gap : a.gaps) {
    if (!gap.waited || gap.rank == c.rank) continue;
    const bool on_culprit = c.transfer ? gap.cause.slow_transfer && trace.events[gap.cause.send].rank == c.rank
                                       : gap.cause.root_rank == c.rank;
    if (!on_culprit) continue;
    waiter[static_cast<std::size_t>(gap.rank)] = true;
    const std::size_t via = c.transfer ? gap.cause.send : gap.cause.root_via;
    auto& entry = via_time[trace.events[via].kind];
    entry.first += gap.end_us - gap.start_us;
    entry.second = via;
  }
  for (std::size_t r = 0; r < waiter.size(); ++r)
    if (waiter[r]) c.waiters.push_back(static_cast<int>(r));
  const auto most = std::max_element(via_time.begin(), via_time.end(),
                                     [](const auto& p, const auto& q) { return p.second.first < q.second.first; });
  if (most != via_time.end()) {
    c.waited_via = most->second.second;
    c.has_waited_via = true;
  }
}

std::string duration_text(double us) {
  return us >= 1000 ? fmt::format("{:.1f} ms", us / 1000) : fmt::format("{:.0f} us", us);
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += fmt::format("{}{}", i ? "," : "", ranks[i]);
  return text;
}

std::string kind_text(const TraceEvent& e) {
  const std::string_view name = event_kind_name(e.kind);
  return name.empty() ? e.name : std::string(name);
}

}  // namespace

StepAttribution attribute_step(const Trace& trace) {
  StepAttribution a;
  a.step = trace.meta.iteration;
  const Graph g = step_graph::build_graph(trace);
  a.step_us = g.end_us - g.start_us;
  a.link_rate_bytes_per_us = median_rate(g);
  const ComputeTotals totals = compute_totals(g);
  const std::vector<double> replay_idle = equal_cost_idle_us(trace, a.replay_step_us);
  a.gaps = idle_gaps(g, a.link_rate_bytes_per_us);
  attribute_ranks(g, totals, replay_idle, a);
  a.critical_path = critical_path(g);
  find_culprit(g, totals, a);
  return a;
}

const IdleGap* gap_ended_by(const StepAttribution& attribution, const Trace& trace, std::size_t index) {
  if (index >= trace.events.size()) return nullptr;
  const TraceEvent& e = trace.events[index];
  for (const auto& gap : attribution.gaps) {
    if (!gap.waited || gap.rank != e.rank) continue;
    if (gap.cause.receive == index) return &gap;
    if (step_graph::is_compute(e) && std::fabs(gap.end_us - e.ts_us) < step_graph::kTouchUs) return &gap;
  }
  return nullptr;
}

std::string describe_action(const Trace& trace, std::size_t index) {
  const TraceEvent& e = trace.events.at(index);
  std::string text = fmt::format("rank {}'s {}", e.rank, kind_text(e));
  if (e.stage >= 0) text += fmt::format(" stage {}", e.stage);
  if (e.micro_batch >= 0) text += fmt::format(" mb {}", e.micro_batch);
  return text;
}

std::string explain_step(const StepAttribution& a, const Trace& trace) {
  const Culprit& c = a.culprit;
  if (!c.found) {
    double bubble = 0, idle = 0;
    for (const auto& r : a.ranks) {
      bubble += r.schedule_bubble_us;
      idle += r.idle_us;
    }
    return fmt::format(
        "step {}: no rank held the step back: its idle time is the schedule's own bubble ({} of {} idle "
        "over the ranks, with equal costs on every rank)",
        a.step, duration_text(bubble), duration_text(idle));
  }
  std::string why;
  if (c.transfer) {
    const TraceEvent& receive = trace.events[c.event];
    why = fmt::format("its {} of mb {} took {} on the wire", kind_text(receive), receive.micro_batch,
                      duration_text(c.held_back_us));
  } else if (c.stalled_us > c.compute_excess_us) {
    why = fmt::format(
        "it stalled {} between its own operations with no peer to wait for: a starved core, or work the "
        "trace does not show",
        duration_text(c.stalled_us));
  } else {
    why = fmt::format("its {} computes were {:.1f}x the other ranks'", kind_text(trace.events[c.event]), c.kind_ratio);
  }
  if (!c.waiters.empty() && c.has_waited_via)
    why += fmt::format("; {} waited on its {}", rank_list(c.waiters), kind_text(trace.events[c.waited_via]));
  const std::string who =
      c.transfer ? fmt::format("the transfer rank {} -> rank {}", c.rank, c.to_rank) : fmt::format("rank {}", c.rank);
  return fmt::format("step {}: {} held the step back by {} ({})", a.step, who, duration_text(c.held_back_us), why);
}

nlohmann::json attribution_to_json(const StepAttribution& a, const Trace& trace) {
  using nlohmann::json;
  json out{{"step", a.step},
           {"step_us", a.step_us},
           {"replay_step_us", a.replay_step_us},
           {"link_rate_bytes_per_us", a.link_rate_bytes_per_us},
           {"line", explain_step(a, trace)}};
  const Culprit& c = a.culprit;
  if (c.found) {
    const TraceEvent& e = trace.events[c.event];
    out["culprit"] = {
        {"kind", c.transfer ? "transfer" : "rank"},
        {"rank", c.rank},
        {"to_rank", c.transfer ? json(c.to_rank) : json(nullptr)},
        {"held_back_us", c.held_back_us},
        {"action", {{"rank", e.rank}, {"name", e.name}, {"stage", e.stage}, {"micro_batch", e.micro_batch}}},
        {"kind_ratio", std::isfinite(c.kind_ratio) ? json(c.kind_ratio) : json(nullptr)},
        {"waiters", c.waiters},
        {"waited_via", c.has_waited_via ? json(trace.events[c.waited_via].name) : json(nullptr)}};
  } else {
    out["culprit"] = nullptr;
  }
  json ranks = json::array();
  for (const auto& r : a.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"idle_us", r.idle_us},
                     {"schedule_bubble_us", r.schedule_bubble_us},
                     {"waited_on_slow_rank_us", r.waited_on_slow_rank_us},
                     {"waited_on_transfer_us", r.waited_on_transfer_us},
                     {"own_us", r.own_us},
                     {"waited_on_rank_us", r.waited_on_rank_us},
                     {"waited_most_on", r.waited_most_on < 0 ? json(nullptr) : json(r.waited_most_on)},
                     {"compute_ratio", r.compute_ratio}});
  out["ranks"] = std::move(ranks);
  return out;
}

}  // namespace pipescope::traces
