#include "pipescope/traces/compare.hpp"

#include "pipescope/traces/bubble.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string_view>
#include <tuple>
#include <utility>
#include <unordered_map>

#include <fmt/format.h>

namespace pipescope::traces {
namespace {

double signed_error(double predicted, double measured) {
  if (measured == 0) return predicted == 0 ? 0.0 : std::numeric_limits<double>::quiet_NaN();
  return (predicted - measured) / measured;
}

// An event's identity when matching: its kind, parsed from its name once (event_kind.hpp);
// only events of no kind (plain traces, whose names are anything) are told apart by name.
// Event indices ordered by (rank, kind, name of a kind-less event, stage, micro-batch), then
// by start, so the k-th occurrences line up. Kind-less names are replaced by their rank among
// the trace's distinct such names, which keeps the string order while the sort compares plain
// numbers held in place.
std::vector<std::size_t> in_key_order(const Trace& trace) {
  std::unordered_map<std::string_view, int> name_rank;
  for (const auto& e : trace.events)
    if (e.kind == EventKind::Other) name_rank.emplace(e.name, 0);
  std::vector<std::string_view> names;
  names.reserve(name_rank.size());
  for (const auto& [name, rank] : name_rank) names.push_back(name);
  std::sort(names.begin(), names.end());
  for (std::size_t i = 0; i < names.size(); ++i) name_rank[names[i]] = static_cast<int>(i);

  struct Key {
    int rank, kind, name, stage, micro_batch;
    double ts_us;
    std::size_t index;
    bool operator<(const Key& o) const {
      return std::tie(rank, kind, name, stage, micro_batch, ts_us, index) <
             std::tie(o.rank, o.kind, o.name, o.stage, o.micro_batch, o.ts_us, o.index);
    }
  };
  std::vector<Key> keys;
  keys.reserve(trace.events.size());
  int last_rank = 0;
  std::string_view last_name;
  bool named = false;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    int name = 0;
    if (e.kind == EventKind::Other) {
      if (!named || e.name != last_name) {
        last_name = e.name;
        last_rank = name_rank[last_name];
        named = true;
      }
      name = last_rank;
    }
    keys.push_back({e.rank, static_cast<int>(e.kind), name, e.stage, e.micro_batch, e.ts_us, i});
  }
  std::sort(keys.begin(), keys.end());
  std::vector<std::size_t> order(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) order[i] = keys[i].index;
  return order;
}

// The order of in_key_order across two traces (kind-less names compared as text).
int compare_keys(const TraceEvent& x, const TraceEvent& y) {
  if (x.rank != y.rank) return x.rank < y.rank ? -1 : 1;
  if (x.kind != y.kind) return x.kind < y.kind ? -1 : 1;
  if (x.kind == EventKind::Other)
    if (const int c = x.name.compare(y.name); c != 0) return c < 0 ? -1 : 1;
  if (x.stage != y.stage) return x.stage < y.stage ? -1 : 1;
  if (x.micro_batch != y.micro_batch) return x.micro_batch < y.micro_batch ? -1 : 1;
  return 0;
}

// peak_memory_bytes of ranks 0 .. num_ranks-1 in one pass.
std::vector<std::int64_t> peak_memory_by_rank(const Trace& trace, int num_ranks) {
  std::vector<std::int64_t> peak(static_cast<std::size_t>(num_ranks), 0);
  for (const auto& m : trace.memory)
    if (m.rank >= 0 && m.rank < num_ranks)
      peak[static_cast<std::size_t>(m.rank)] = std::max(peak[static_cast<std::size_t>(m.rank)], m.bytes);
  return peak;
}

// NaN is not JSON; an undefined error is written as null.
nlohmann::json number_or_null(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

}  // namespace

double MatchedOperation::duration_error() const { return signed_error(predicted_dur_us, measured_dur_us); }

double iteration_time_us(const Trace& trace) {
  const auto& step_time_s = trace.meta.run.step_time_s;
  if (step_time_s && *step_time_s > 0) return *step_time_s * 1e6;
  return event_span_us(trace);
}

double event_span_us(const Trace& trace) {
  if (trace.events.empty()) return 0;
  double first = std::numeric_limits<double>::infinity(), last = -first;
  for (const auto& e : trace.events) {
    first = std::min(first, e.ts_us);
    last = std::max(last, e.end_us());
  }
  return last - first;
}

double bubble_fraction(const Trace& trace, int rank, double iteration_us) {
  return bubble_fraction_of(busy_time_us(trace, rank), iteration_us);
}

double stolen_time_fraction(const Trace& trace, int rank) {
  constexpr double unknown = std::numeric_limits<double>::quiet_NaN();
  const auto& stolen_s = trace.meta.run.stolen_time_s;
  if (!stolen_s || rank < 0 || static_cast<std::size_t>(rank) >= stolen_s->size()) return unknown;
  const double iteration_us = iteration_time_us(trace);
  if (iteration_us <= 0) return unknown;
  return (*stolen_s)[static_cast<std::size_t>(rank)] * 1e6 / iteration_us;
}

std::int64_t peak_memory_bytes(const Trace& trace, int rank) {
  std::int64_t peak = 0;
  for (const auto& m : trace.memory)
    if (m.rank == rank) peak = std::max(peak, m.bytes);
  return peak;
}

void check_same_rank_count(const Trace& predicted, const Trace& measured, std::string_view predicted_name,
                           std::string_view measured_name) {
  const int p = predicted.rank_count(), m = measured.rank_count();
  if (p != m)
    throw TraceError(
        fmt::format("{} has {} ranks, {} has {}: traces of pipelines of different sizes cannot be compared",
                    predicted_name, p, measured_name, m));
}

namespace {

// Time per (rank, operation name) in both traces. Both lists are ordered by (rank, name): a merge.
void compare_operation_times(const Trace& predicted, const Trace& measured, Comparison& c) {
  const auto predicted_times = time_by_operation(predicted);
  const auto measured_times = time_by_operation(measured);
  for (std::size_t a = 0, b = 0; a < predicted_times.size() || b < measured_times.size();) {
    const OperationTime* p = a < predicted_times.size() ? &predicted_times[a] : nullptr;
    const OperationTime* m = b < measured_times.size() ? &measured_times[b] : nullptr;
    const bool take_p = p && (!m || std::tie(p->rank, p->name) <= std::tie(m->rank, m->name));
    const bool take_m = m && (!p || std::tie(m->rank, m->name) <= std::tie(p->rank, p->name));
    const OperationTime& first = take_p ? *p : *m;
    OperationTimeComparison t{first.rank, first.name};
    if (take_p) {
      t.predicted_count = p->count;
      t.predicted_total_us = p->total_us;
      ++a;
    }
    if (take_m) {
      t.measured_count = m->count;
      t.measured_total_us = m->total_us;
      ++b;
    }
    c.operation_times.push_back(std::move(t));
  }
}

// Per-rank figures from one pass over each trace: a rank-by-rank scan of every event would be
// ranks x events.
void compare_ranks(const Trace& predicted, const Trace& measured, double predicted_us, double measured_us,
                   Comparison& c) {
  const int ranks = std::max(predicted.rank_count(), measured.rank_count());
  const std::vector<double> busy_predicted_us = busy_time_us_by_rank(predicted, ranks);
  const std::vector<double> busy_measured_us = busy_time_us_by_rank(measured, ranks);
  const std::vector<std::int64_t> peak_predicted = peak_memory_by_rank(predicted, ranks);
  const std::vector<std::int64_t> peak_measured = peak_memory_by_rank(measured, ranks);
  c.ranks.reserve(static_cast<std::size_t>(ranks));
  double sum_predicted = 0, sum_measured = 0;
  c.stolen_fraction_measured = ranks > 0 ? 0.0 : std::numeric_limits<double>::quiet_NaN();
  for (int r = 0; r < ranks; ++r) {
    RankComparison rc;
    rc.rank = r;
    rc.bubble_fraction_predicted = bubble_fraction_of(busy_predicted_us[r], predicted_us);
    rc.bubble_fraction_measured = bubble_fraction_of(busy_measured_us[r], measured_us);
    rc.peak_memory_predicted_bytes = peak_predicted[r];
    rc.peak_memory_measured_bytes = peak_measured[r];
    rc.peak_memory_error = signed_error(static_cast<double>(rc.peak_memory_predicted_bytes),
                                        static_cast<double>(rc.peak_memory_measured_bytes));
    rc.stolen_fraction_measured = stolen_time_fraction(measured, r);
    // NaN (a rank that does not say) makes the whole unknown: max() would drop it.
    c.stolen_fraction_measured = std::isnan(rc.stolen_fraction_measured)
                                     ? rc.stolen_fraction_measured
                                     : std::max(c.stolen_fraction_measured, rc.stolen_fraction_measured);
    sum_predicted += rc.bubble_fraction_predicted;
    sum_measured += rc.bubble_fraction_measured;
    c.ranks.push_back(rc);
  }
  if (ranks > 0) {
    c.bubble_fraction_predicted = sum_predicted / ranks;
    c.bubble_fraction_measured = sum_measured / ranks;
  }
}

}  // namespace

Comparison compare_traces(const Trace& predicted, const Trace& measured, std::size_t top) {
  Comparison c;
  const double predicted_us = iteration_time_us(predicted);
  const double measured_us = iteration_time_us(measured);
  c.iteration_time_predicted_s = predicted_us * 1e-6;
  c.iteration_time_measured_s = measured_us * 1e-6;
  c.iteration_time_error = signed_error(predicted_us, measured_us);

  // Match by (rank, kind or name, stage, micro_batch), the k-th with the k-th: a merge of two sorted lists.
  const auto p_order = in_key_order(predicted);
  const auto m_order = in_key_order(measured);
  std::size_t i = 0, j = 0;
  while (i < p_order.size() && j < m_order.size()) {
    const TraceEvent& p = predicted.events[p_order[i]];
    const TraceEvent& m = measured.events[m_order[j]];
    const int order = compare_keys(p, m);
    if (order < 0) {
      ++c.unmatched_predicted;
      ++i;
    } else if (order > 0) {
      ++c.unmatched_measured;
      ++j;
    } else {
      c.matched.push_back({p_order[i], m_order[j], p.dur_us, m.dur_us});
      ++i;
      ++j;
    }
  }
  c.unmatched_predicted += p_order.size() - i;
  c.unmatched_measured += m_order.size() - j;
  // In predicted start order; the start is copied next to each operation so the sort does
  // not reach into the events for every comparison.
  std::vector<std::pair<double, MatchedOperation>> by_start;
  by_start.reserve(c.matched.size());
  for (const auto& op : c.matched) by_start.emplace_back(predicted.events[op.predicted_index].ts_us, op);
  std::sort(by_start.begin(), by_start.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first, a.second.predicted_index) < std::tie(b.first, b.second.predicted_index);
  });
  for (std::size_t k = 0; k < by_start.size(); ++k) c.matched[k] = by_start[k].second;

  double sum_abs_error = 0, sum_abs_difference_us = 0, sum_measured_us = 0;
  for (const auto& op : c.matched) {
    if (op.measured_dur_us <= 0) continue;
    const double difference_us = std::fabs(op.predicted_dur_us - op.measured_dur_us);
    sum_abs_error += difference_us / op.measured_dur_us;
    sum_abs_difference_us += difference_us;
    sum_measured_us += op.measured_dur_us;
    ++c.mape_operations;
  }
  c.op_duration_mape = c.mape_operations ? sum_abs_error / static_cast<double>(c.mape_operations) : 0.0;
  c.op_duration_weighted_error = sum_measured_us > 0 ? sum_abs_difference_us / sum_measured_us : 0.0;

  c.top_differences = c.matched;
  std::stable_sort(c.top_differences.begin(), c.top_differences.end(),
                   [](const MatchedOperation& a, const MatchedOperation& b) {
                     return std::fabs(a.difference_us()) > std::fabs(b.difference_us());
                   });
  if (c.top_differences.size() > top) c.top_differences.resize(top);

  compare_operation_times(predicted, measured, c);
  c.receives_predicted = receive_costs(predicted);
  c.receives_measured = receive_costs(measured);
  compare_ranks(predicted, measured, predicted_us, measured_us, c);
  return c;
}

nlohmann::json comparison_to_json(const Comparison& c, const Trace& predicted, const Trace& measured) {
  using nlohmann::json;
  json out = json::object();
  out["iteration_time_predicted_s"] = c.iteration_time_predicted_s;
  out["iteration_time_measured_s"] = c.iteration_time_measured_s;
  out["iteration_time_error"] = number_or_null(c.iteration_time_error);
  out["op_duration_mape"] = c.op_duration_mape;
  out["op_duration_weighted_error"] = c.op_duration_weighted_error;
  json peak_errors = json::array();
  for (const auto& r : c.ranks) peak_errors.push_back(number_or_null(r.peak_memory_error));
  out["peak_memory_error"] = std::move(peak_errors);
  out["bubble_fraction_predicted"] = c.bubble_fraction_predicted;
  out["bubble_fraction_measured"] = c.bubble_fraction_measured;
  out["stolen_time_fraction_measured"] = number_or_null(c.stolen_fraction_measured);
  out["matched_operations"] = c.matched.size();
  out["mape_operations"] = c.mape_operations;
  out["unmatched_predicted"] = c.unmatched_predicted;
  out["unmatched_measured"] = c.unmatched_measured;
  json ranks = json::array();
  for (const auto& r : c.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"bubble_fraction_predicted", r.bubble_fraction_predicted},
                     {"bubble_fraction_measured", r.bubble_fraction_measured},
                     {"peak_memory_predicted_bytes", r.peak_memory_predicted_bytes},
                     {"peak_memory_measured_bytes", r.peak_memory_measured_bytes},
                     {"peak_memory_error", number_or_null(r.peak_memory_error)},
                     {"stolen_time_fraction_measured", number_or_null(r.stolen_fraction_measured)}});
  }
  out["ranks"] = std::move(ranks);
  json top = json::array();
  for (const auto& op : c.top_differences) {
    const TraceEvent& p = predicted.events[op.predicted_index];
    const TraceEvent& m = measured.events[op.measured_index];
    top.push_back({{"rank", p.rank},
                   {"name", p.name},
                   {"stage", p.stage},
                   {"micro_batch", p.micro_batch},
                   {"predicted_start_us", p.ts_us},
                   {"measured_start_us", m.ts_us},
                   {"predicted_dur_us", op.predicted_dur_us},
                   {"measured_dur_us", op.measured_dur_us},
                   {"difference_us", op.difference_us()},
                   {"duration_error", number_or_null(op.duration_error())}});
  }
  out["top_differences"] = std::move(top);
  json times = json::array();
  for (const auto& t : c.operation_times)
    times.push_back({{"rank", t.rank},
                     {"name", t.name},
                     {"predicted_count", t.predicted_count},
                     {"measured_count", t.measured_count},
                     {"predicted_total_us", t.predicted_total_us},
                     {"measured_total_us", t.measured_total_us}});
  out["operation_times"] = std::move(times);
  auto receives = [](const ReceiveCosts& r) {
    return json{{"ready", r.ready},
                {"ready_mean_us", number_or_null(r.ready_mean_us())},
                {"waited", r.waited},
                {"waited_mean_us", number_or_null(r.waited_mean_us())},
                {"unmatched", r.unmatched}};
  };
  out["receives"] = {{"predicted", receives(c.receives_predicted)}, {"measured", receives(c.receives_measured)}};
  return out;
}

}  // namespace pipescope::traces
