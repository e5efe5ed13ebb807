#include "pipescope/gui/rank_summary.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "pipescope/gui/kinds.hpp"
#include "pipescope/traces/bubble.hpp"
#include "pipescope/traces/step_attribution.hpp"

namespace pipescope::gui {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The time covered by a set of ranges, overlaps counted once.
double union_us(std::vector<std::pair<double, double>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  traces::BusyTime covered;
  for (const auto& [start, end] : ranges) covered.add(start, end);
  return covered.total_us();
}

struct RankTimes {
  double busy_us = 0;
  double idle_us = 0;
  double communication_us = 0;
};

RankTimes rank_times(const TimelineModel& model, int series, int rank) {
  std::vector<std::pair<double, double>> busy, communication;
  const bool pipeline = model.has_pipeline(series);
  for (const Row& row : model.rank_rows(rank, series)) {
    const bool busy_lane = pipeline ? traces::counts_as_busy(row.lane) : true;
    const bool transfer_lane = pipeline && (row.lane == static_cast<int>(traces::Lane::Send) ||
                                            row.lane == static_cast<int>(traces::Lane::Recv) ||
                                            row.lane == static_cast<int>(traces::Lane::Collective) ||
                                            row.lane == static_cast<int>(traces::Lane::AllToAll));
    for (const Block& b : row.blocks) {
      if (busy_lane) busy.emplace_back(b.start_us, b.end_us);
      if (transfer_lane || (!pipeline && b.kind == Kind::Communication))
        communication.emplace_back(b.start_us, b.end_us);
    }
  }
  RankTimes t;
  t.busy_us = union_us(std::move(busy));
  t.communication_us = union_us(std::move(communication));
  const double span_us = pipeline ? model.iteration_us(series) : model.trace(series).end_us();
  t.idle_us = std::max(0.0, span_us - t.busy_us);
  return t;
}

// Whom each rank waited on, and the rank that held the step back (one pass over the trace).
void add_waits(const traces::StepAttribution& attribution, std::vector<RankSummary>& ranks) {
  for (auto& s : ranks) {
    if (s.rank < 0 || static_cast<std::size_t>(s.rank) >= attribution.ranks.size()) continue;
    const traces::RankAttribution& a = attribution.ranks[static_cast<std::size_t>(s.rank)];
    s.waited_most_on = a.waited_most_on;
    if (a.waited_most_on >= 0) s.waited_most_us = a.waited_on_rank_us[static_cast<std::size_t>(a.waited_most_on)];
    const traces::Culprit& c = attribution.culprit;
    s.held_step_back = c.found && !c.transfer && c.rank == s.rank;
    if (s.held_step_back) s.held_back_us = c.held_back_us;
  }
}

std::string number(double value) { return std::isfinite(value) ? fmt::format("{:.6g}", value) : std::string(); }

// A name as one CSV field: quoted when it holds a separator, a quote or a line break.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + '"';
}

}  // namespace

std::vector<RankSummary> rank_summaries(const TimelineModel& model) {
  std::vector<RankSummary> ranks;
  if (model.empty()) return ranks;
  const bool pair = model.series_count() == 2;
  const int shown = pair ? 1 : 0;
  for (int r = 0; r < model.rank_count(); ++r) {
    RankSummary s;
    s.rank = r;
    s.name = model.rank_name(r);
    const RankTimes times = rank_times(model, shown, r);
    s.busy_us = times.busy_us;
    s.idle_us = times.idle_us;
    s.communication_us = times.communication_us;
    s.predicted_busy_us = s.measured_busy_us = s.error = kNaN;
    if (pair) {
      s.predicted_busy_us = rank_times(model, 0, r).busy_us;
      s.measured_busy_us = times.busy_us;
      if (s.measured_busy_us > 0) s.error = (s.predicted_busy_us - s.measured_busy_us) / s.measured_busy_us;
    }
    ranks.push_back(std::move(s));
  }
  auto busiest =
      std::max_element(ranks.begin(), ranks.end(), [](const auto& a, const auto& b) { return a.busy_us < b.busy_us; });
  // One rank waits for nobody: a bottleneck needs others.
  if (ranks.size() > 1 && busiest != ranks.end() && busiest->busy_us > 0) busiest->bottleneck = true;
  if (const traces::StepAttribution* attribution = ranks.size() > 1 ? model.step_attribution(shown) : nullptr)
    add_waits(*attribution, ranks);
  return ranks;
}

std::string rank_summary_csv(const std::vector<RankSummary>& ranks, bool with_prediction) {
  std::string csv = "rank,name,busy_us,idle_us,communication_us";
  if (with_prediction) csv += ",predicted_busy_us,measured_busy_us,error";
  csv += ",bottleneck\n";
  for (const auto& r : ranks) {
    csv += fmt::format("{},{},{},{},{}", r.rank, csv_field(r.name), number(r.busy_us), number(r.idle_us),
                       number(r.communication_us));
    if (with_prediction)
      csv += fmt::format(",{},{},{}", number(r.predicted_busy_us), number(r.measured_busy_us), number(r.error));
    csv += fmt::format(",{}\n", r.bottleneck ? 1 : 0);
  }
  return csv;
}

}  // namespace pipescope::gui
