#include "pipescope/traces/trace_matching.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "pipescope/traces/bubble.hpp"

namespace pipescope::traces {
namespace {

// A change is worth naming when it moves the total by more than this share (noise below).
constexpr double kNotableChange = 0.02;

void largest_change_first(std::vector<TimeChange>& changes) {
  std::stable_sort(changes.begin(), changes.end(), [](const TimeChange& x, const TimeChange& y) {
    return std::fabs(x.change_us()) > std::fabs(y.change_us());
  });
}

std::string duration_change(double us) {
  const double magnitude = std::fabs(us);
  const std::string sign = us < 0 ? "-" : "+";
  return magnitude >= 1000 ? fmt::format("{}{:.1f} ms", sign, magnitude / 1000)
                           : fmt::format("{}{:.0f} us", sign, magnitude);
}

std::string fraction_text(double fraction) {
  return std::isfinite(fraction) ? fmt::format("{:+.1f}%", fraction * 100) : std::string("new");
}

// The notable changes of one sign ("F +8.1 ms (+40.0%)"), at most three.
std::string notable(const std::vector<TimeChange>& changes, double total_us, bool slower) {
  std::string text;
  int listed = 0;
  for (const auto& c : changes) {
    if ((c.change_us() > 0) != slower || std::fabs(c.change_us()) <= kNotableChange * total_us || listed == 3) continue;
    text += fmt::format("{}{} {} ({})", listed++ ? ", " : "", c.what, duration_change(c.change_us()),
                        fraction_text(c.change_fraction()));
  }
  return text;
}

}  // namespace

bool both_measured(const Trace& a, const Trace& b) {
  return a.meta.source == "measured" && b.meta.source == "measured";
}

double TimeChange::change_fraction() const {
  return a_us > 0 ? (b_us - a_us) / a_us : std::numeric_limits<double>::quiet_NaN();
}

RunDifference difference_of_runs(const Trace& a, const Trace& b, const Comparison& comparison, std::size_t top) {
  RunDifference d;
  d.a_step_us = comparison.iteration_time_predicted_s * 1e6;
  d.b_step_us = comparison.iteration_time_measured_s * 1e6;
  std::map<std::string, TimeChange> kinds;
  for (const auto& t : comparison.operation_times) {
    TimeChange& c = kinds[t.name];
    c.what = t.name;
    c.a_us += t.predicted_total_us;
    c.b_us += t.measured_total_us;
  }
  for (auto& entry : kinds) d.by_kind.push_back(std::move(entry.second));
  largest_change_first(d.by_kind);
  const int ranks = std::max(a.rank_count(), b.rank_count());
  const std::vector<double> busy_a = busy_time_us_by_rank(a, ranks), busy_b = busy_time_us_by_rank(b, ranks);
  for (int r = 0; r < ranks; ++r)
    d.by_rank.push_back(
        {fmt::format("rank {}", r), busy_a[static_cast<std::size_t>(r)], busy_b[static_cast<std::size_t>(r)]});
  largest_change_first(d.by_rank);
  d.top_changes = comparison.matched;
  std::stable_sort(d.top_changes.begin(), d.top_changes.end(),
                   [](const MatchedOperation& x, const MatchedOperation& y) {
                     return x.measured_dur_us - x.predicted_dur_us > y.measured_dur_us - y.predicted_dur_us;
                   });
  if (d.top_changes.size() > top) d.top_changes.resize(top);
  return d;
}

std::string summarize_run_difference(const RunDifference& d) {
  const double change = d.b_step_us - d.a_step_us;
  const double fraction = d.a_step_us > 0 ? change / d.a_step_us : std::numeric_limits<double>::quiet_NaN();
  std::string text = std::fabs(change) < 0.5
                         ? fmt::format("run B took as long as run A ({})", fraction_text(fraction))
                         : fmt::format("run B took {} {} than run A ({})", duration_change(std::fabs(change)).substr(1),
                                       change > 0 ? "longer" : "less", fraction_text(fraction));
  double kind_total = 0;
  for (const auto& c : d.by_kind) kind_total += c.a_us;
  const std::string slower = notable(d.by_kind, kind_total, true), faster = notable(d.by_kind, kind_total, false);
  if (!slower.empty()) text += "; slower: " + slower;
  if (!faster.empty()) text += "; faster: " + faster;
  double rank_total = 0;
  for (const auto& c : d.by_rank) rank_total = std::max(rank_total, c.a_us);
  const std::string ranks = notable(d.by_rank, rank_total, true);
  if (!ranks.empty()) text += "; busier: " + ranks;
  return text;
}

nlohmann::json run_difference_to_json(const RunDifference& d, const Trace& a) {
  using nlohmann::json;
  const auto changes = [](const std::vector<TimeChange>& list) {
    json out = json::array();
    for (const auto& c : list) {
      const double f = c.change_fraction();
      out.push_back({{"what", c.what},
                     {"a_us", c.a_us},
                     {"b_us", c.b_us},
                     {"change_us", c.change_us()},
                     {"change_fraction", std::isfinite(f) ? json(f) : json(nullptr)}});
    }
    return out;
  };
  json top = json::array();
  for (const auto& op : d.top_changes) {
    const TraceEvent& e = a.events[op.predicted_index];
    top.push_back({{"rank", e.rank},
                   {"name", e.name},
                   {"stage", e.stage},
                   {"micro_batch", e.micro_batch},
                   {"a_dur_us", op.predicted_dur_us},
                   {"b_dur_us", op.measured_dur_us},
                   {"change_us", op.measured_dur_us - op.predicted_dur_us}});
  }
  return {{"a_step_us", d.a_step_us},      {"b_step_us", d.b_step_us},      {"summary", summarize_run_difference(d)},
          {"by_kind", changes(d.by_kind)}, {"by_rank", changes(d.by_rank)}, {"top_changes", std::move(top)}};
}

}  // namespace pipescope::traces
