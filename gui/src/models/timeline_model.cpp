#include "pipescope/gui/timeline_model.hpp"

#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "pipescope/gui/critical_path.hpp"
#include "pipescope/traces/bubble.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "pipescope/traces/transfer_pairs.hpp"

namespace pipescope::gui {

using traces::Trace;
using traces::TraceEvent;

void Row::fill_prefix_max_end() {
  prefix_max_end.resize(blocks.size());
  double running = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < blocks.size(); ++i) prefix_max_end[i] = running = std::max(running, blocks[i].end_us);
}

std::size_t Row::first_ending_after(double t_us) const {
  return static_cast<std::size_t>(std::upper_bound(prefix_max_end.begin(), prefix_max_end.end(), t_us) -
                                  prefix_max_end.begin());
}

std::size_t Row::first_starting_from(double t_us) const {
  return static_cast<std::size_t>(
      std::lower_bound(blocks.begin(), blocks.end(), t_us, [](const Block& b, double t) { return b.start_us < t; }) -
      blocks.begin());
}

std::size_t Row::first_starting_from(double t_us, std::size_t from) const {
  const auto starts_before = [](const Block& b, double t) { return b.start_us < t; };
  std::size_t step = 1, low = from;
  while (low + step < blocks.size() && blocks[low + step].start_us < t_us) {
    low += step;
    step *= 2;
  }
  const std::size_t high = std::min(blocks.size(), low + step);
  return static_cast<std::size_t>(std::lower_bound(blocks.begin() + static_cast<std::ptrdiff_t>(low),
                                                   blocks.begin() + static_cast<std::ptrdiff_t>(high), t_us,
                                                   starts_before) -
                                  blocks.begin());
}

std::optional<std::size_t> Row::block_at(double t_us, double tolerance_us) const {
  // Blocks starting after t + tolerance cannot contain it; walk back over the ones before
  // while some earlier block may still reach t.
  std::size_t i = first_starting_from(t_us + tolerance_us + std::numeric_limits<double>::min());
  while (i > 0) {
    --i;
    if (prefix_max_end[i] < t_us - tolerance_us) break;
    if (blocks[i].start_us <= t_us + tolerance_us && blocks[i].end_us >= t_us - tolerance_us) return i;
  }
  return std::nullopt;
}

namespace {

// Summaries hold about this many blocks per row (a few per pixel of a wide window).
constexpr std::size_t kSummaryBlocks = 4096;

// Counter tracks by rank, for equal_range.
struct TrackRankOrder {
  bool operator()(const CounterTrack& track, int rank) const { return track.rank < rank; }
  bool operator()(int rank, const CounterTrack& track) const { return rank < track.rank; }
};

void add_summary(Row& row, double summary_us) {
  auto summary = std::make_shared<Row>();
  summary->rank = row.rank;
  summary->series = row.series;
  summary->lane = row.lane;
  bool open_run = false;  // whether the last summary block may take more short blocks
  for (const Block& b : row.blocks) {
    const bool short_block = b.end_us - b.start_us < summary_us;
    if (open_run && short_block && b.start_us - summary->blocks.back().start_us < summary_us) {
      summary->blocks.back().end_us = std::max(summary->blocks.back().end_us, b.end_us);
      continue;
    }
    summary->blocks.push_back(b);
    open_run = short_block;
  }
  summary->fill_prefix_max_end();
  row.summary = std::move(summary);
  row.summary_us = summary_us;
}

// Deeper levels than this share the last one: a lane of thousands of overlapping blocks
// would otherwise be thousands of sub-rows of one pixel.
constexpr int kMaxDepth = 32;

// Each block at the lowest level that is free at its start (its end times are in level_end).
void fill_depths(Row& row) {
  std::vector<double> level_end;
  std::vector<std::uint8_t> depths(row.blocks.size(), 0);
  bool any = false;
  for (std::size_t i = 0; i < row.blocks.size(); ++i) {
    const Block& b = row.blocks[i];
    std::size_t level = 0;
    while (level < level_end.size() && level_end[level] > b.start_us) ++level;
    if (level >= static_cast<std::size_t>(kMaxDepth)) level = kMaxDepth - 1;
    if (level == level_end.size())
      level_end.push_back(b.end_us);
    else
      level_end[level] = std::max(level_end[level], b.end_us);
    depths[i] = static_cast<std::uint8_t>(level);
    any = any || level > 0;
  }
  row.depth_count = std::max<int>(1, static_cast<int>(level_end.size()));
  if (any) row.depths = std::move(depths);
}

// A pipeline names its format (pipescope traces) or puts stages on its events.
bool is_pipeline(const Trace& t) {
  if (!t.meta.format.empty()) return true;
  return std::any_of(t.events.begin(), t.events.end(), [](const TraceEvent& e) { return e.stage >= 0; });
}

// A row's blocks in start order, with what the views read from them: the prefix of ends,
// the sub-rows of overlapping blocks and, for a row of many blocks, its summary.
void finish_row(Row& row, bool plain_trace, double end_us) {
  auto by_start = [](const Block& a, const Block& b) { return a.start_us < b.start_us; };
  // In a plain trace a parent slice and its first child start together: the longer one
  // goes first, so it takes the upper level.
  auto by_start_parent_first = [](const Block& a, const Block& b) {
    return a.start_us < b.start_us || (a.start_us == b.start_us && a.end_us > b.end_us);
  };
  if (plain_trace) {
    if (!std::is_sorted(row.blocks.begin(), row.blocks.end(), by_start_parent_first))
      std::stable_sort(row.blocks.begin(), row.blocks.end(), by_start_parent_first);
  } else if (!std::is_sorted(row.blocks.begin(), row.blocks.end(), by_start)) {
    std::stable_sort(row.blocks.begin(), row.blocks.end(), by_start);
  }
  row.fill_prefix_max_end();
  fill_depths(row);
  if (row.blocks.size() > 4 * kSummaryBlocks && end_us > 0) add_summary(row, end_us / kSummaryBlocks);
}

// Transfers paired from their events: the details of a receive, the critical path, and the
// arrows of a trace that has no flow events of its own (a measured one).
}  // namespace

void TimelineModel::fill_transfers(Series& series) {
  const traces::Trace& trace = *series.trace;
  const auto pairs = traces::pair_transfers(trace);
  series.partner.clear();
  if (!pairs.empty()) {
    series.partner.assign(trace.events.size(), -1);
    for (const auto& pair : pairs) {
      series.partner[pair.send] = static_cast<std::int64_t>(pair.receive);
      series.partner[pair.receive] = static_cast<std::int64_t>(pair.send);
    }
  }
  series.flows = trace.flows;
  if (series.flows.empty())
    for (const auto& pair : pairs) series.flows.push_back(traces::flow_of(trace, pair));
  std::sort(series.flows.begin(), series.flows.end(),
            [](const auto& a, const auto& b) { return a.from_ts_us < b.from_ts_us; });
  series.longest_flow_us = 0;
  for (const auto& f : series.flows)
    series.longest_flow_us = std::max(series.longest_flow_us, std::fabs(f.to_ts_us - f.from_ts_us));
}

// A plain trace's colours by name, and every trace's instants and counter tracks, sorted.
void TimelineModel::fill_plain_trace_data(Series& series) {
  const Trace& t = *series.trace;
  series.name_rgb.clear();
  if (!series.has_pipeline) {
    // One hash per run of equal names (a profiler writes many of one name in a row).
    auto& colours = series.name_rgb;
    colours.resize(t.events.size());
    for (std::size_t i = 0; i < t.events.size(); ++i)
      colours[i] = i > 0 && t.events[i].name == t.events[i - 1].name ? colours[i - 1] : name_rgb(t.events[i].name);
  }
  series.instants = t.instants;
  std::stable_sort(series.instants.begin(), series.instants.end(),
                   [](const auto& a, const auto& b) { return a.ts_us < b.ts_us; });
  std::vector<traces::CounterSample> samples = t.counters;
  std::stable_sort(samples.begin(), samples.end(), [](const auto& a, const auto& b) {
    return std::tie(a.rank, a.name, a.ts_us) < std::tie(b.rank, b.name, b.ts_us);
  });
  auto& tracks = series.counter_tracks;
  tracks.clear();
  for (auto& sample : samples) {
    if (tracks.empty() || tracks.back().rank != sample.rank || tracks.back().name != sample.name) {
      tracks.push_back({sample.rank, sample.name, {}, sample.value, sample.value});
    }
    CounterTrack& track = tracks.back();
    track.min_value = std::min(track.min_value, sample.value);
    track.max_value = std::max(track.max_value, sample.value);
    track.samples.push_back(std::move(sample));
  }
}

void TimelineModel::set_traces(Trace first, std::optional<Trace> second) {
  series_.clear();
  add_series(std::move(first));
  if (second) add_series(std::move(*second));
  // The comparison is the dearest part of a pair and needs only the two traces: it runs on a
  // second thread while the rows, bubbles and memory curves are built here.
  std::future<traces::Comparison> comparison;
  if (series_count() == 2)
    comparison = std::async(std::launch::async, [predicted = series_[0].trace, measured = series_[1].trace] {
      return traces::compare_traces(*predicted, *measured, 20);
    });
  measure_extent();
  lay_out_rows(index_lanes());
  fill_rows();
  max_memory_ = 0;
  for (int s = 0; s < series_count(); ++s) {
    Series& series = series_[static_cast<std::size_t>(s)];
    series.memory = memory_tracks_of(*series.trace, rank_count_);
    for (const MemoryTrack& track : series.memory) max_memory_ = std::max(max_memory_, track.peak_bytes());
    series.iteration_us = traces::iteration_time_us(*series.trace);
    fill_bubbles(series, s);
    fill_transfers(series);
    fill_plain_trace_data(series);
  }
  take_comparison(comparison.valid() ? std::optional<traces::Comparison>(comparison.get()) : std::nullopt);
}

void TimelineModel::add_series(Trace trace) {
  Series series;
  series.trace = std::make_shared<const Trace>(std::move(trace));
  series.has_pipeline = is_pipeline(*series.trace);
  series_.push_back(std::move(series));
}

// The rank count and the latest time of anything in either trace.
void TimelineModel::measure_extent() {
  rank_count_ = 0;
  end_us_ = 0;
  for (const Series& series : series_) {
    const Trace& t = *series.trace;
    rank_count_ = std::max(rank_count_, t.rank_count());
    end_us_ = std::max(end_us_, t.end_us());
    for (const auto& m : t.memory) end_us_ = std::max(end_us_, m.ts_us);
    for (const auto& c : t.counters) end_us_ = std::max(end_us_, c.ts_us);
    for (const auto& i : t.instants) end_us_ = std::max(end_us_, i.ts_us);
  }
}

// Which lanes each rank uses, in any series, in flat tables (no allocation per rank: a trace
// may have a million ranks): lane_base_[r] .. lane_base_[r + 1] are rank r's lane slots.
// Returns, per slot, whether some event is on it.
std::vector<char> TimelineModel::index_lanes() {
  lane_base_.assign(static_cast<std::size_t>(rank_count_) + 1, 0);
  for (const Series& series : series_)
    for (const auto& e : series.trace->events)
      lane_base_[static_cast<std::size_t>(e.rank) + 1] =
          std::max(lane_base_[static_cast<std::size_t>(e.rank) + 1], e.lane + 1);
  for (int r = 0; r < rank_count_; ++r) lane_base_[r + 1] += lane_base_[r];
  std::vector<char> used(static_cast<std::size_t>(lane_base_.back()), 0);
  for (const Series& series : series_)
    for (const auto& e : series.trace->events)
      used[static_cast<std::size_t>(lane_base_[e.rank]) + static_cast<std::size_t>(e.lane)] = 1;
  return used;
}

// An empty row for each used lane of each rank and series, in rank, series, lane order.
void TimelineModel::lay_out_rows(const std::vector<char>& used_lanes) {
  const int series = series_count();
  rows_.clear();
  row_slot_.assign(static_cast<std::size_t>(lane_base_.back()) * series, -1);
  first_row_.clear();
  first_row_.reserve(static_cast<std::size_t>(rank_count_) * series + 1);
  for (int r = 0; r < rank_count_; ++r)
    for (int s = 0; s < series; ++s) {
      first_row_.push_back(rows_.size());
      for (int lane = 0; lane < lane_base_[r + 1] - lane_base_[r]; ++lane) {
        if (!used_lanes[static_cast<std::size_t>(lane_base_[r]) + static_cast<std::size_t>(lane)]) continue;
        row_slot_[row_slot(r, s, lane)] = static_cast<int>(rows_.size());
        Row row;
        row.rank = r;
        row.series = s;
        row.lane = lane;
        rows_.push_back(std::move(row));
      }
    }
  first_row_.push_back(rows_.size());
}

// Every event as a block of its row, then each row finished (finish_row).
void TimelineModel::fill_rows() {
  const int series = series_count();
  // Count first, so each row is allocated once at its final size.
  std::vector<std::size_t> row_sizes(rows_.size(), 0);
  for (int s = 0; s < series; ++s)
    for (const TraceEvent& e : trace(s).events)
      ++row_sizes[static_cast<std::size_t>(row_slot_[row_slot(e.rank, s, e.lane)])];
  for (std::size_t r = 0; r < rows_.size(); ++r) rows_[r].blocks.reserve(row_sizes[r]);
  for (int s = 0; s < series; ++s) {
    const auto& events = trace(s).events;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const TraceEvent& e = events[i];
      rows_[static_cast<std::size_t>(row_slot_[row_slot(e.rank, s, e.lane)])].blocks.push_back(
          {e.ts_us, e.end_us(), static_cast<std::uint32_t>(i), kind_of(e.kind)});
    }
  }
  for (auto& row : rows_) finish_row(row, !series_[static_cast<std::size_t>(row.series)].has_pipeline, end_us_);
}

// Bubbles from the compute rows (already sorted), not by rescanning every event per rank:
// the compute lane is the only busy one (traces/bubble.hpp).
void TimelineModel::fill_bubbles(Series& series, int s) const {
  static_assert(traces::counts_as_busy(traces::Lane::Compute) && !traces::counts_as_busy(traces::Lane::Send) &&
                !traces::counts_as_busy(traces::Lane::Recv) && !traces::counts_as_busy(traces::Lane::Collective));
  series.bubbles.assign(static_cast<std::size_t>(rank_count_), 0);
  for (int r = 0; r < rank_count_; ++r) {
    const Row* compute = row(r, s, static_cast<int>(traces::Lane::Compute));
    traces::BusyTime busy;
    if (compute)
      for (const Block& b : compute->blocks) busy.add(b.start_us, b.end_us);
    series.bubbles[static_cast<std::size_t>(r)] = traces::bubble_fraction_of(busy.total_us(), series.iteration_us);
  }
}

// Per measured event, the predicted one it matched and its error against it.
void TimelineModel::take_comparison(std::optional<traces::Comparison> comparison) {
  comparison_ = std::move(comparison);
  measured_error_.clear();
  matched_predicted_.clear();
  if (!comparison_) return;
  const std::size_t measured_events = trace(1).events.size();
  measured_error_.assign(measured_events, std::numeric_limits<float>::quiet_NaN());
  matched_predicted_.assign(measured_events, -1);
  for (const auto& op : comparison_->matched) {
    matched_predicted_[op.measured_index] = static_cast<std::int64_t>(op.predicted_index);
    if (op.predicted_dur_us > 0)
      measured_error_[op.measured_index] = static_cast<float>(op.measured_dur_us / op.predicted_dur_us - 1);
  }
}

std::string TimelineModel::series_name(int series) const {
  const std::string& source = trace(series).meta.source;
  // Two measured runs are run A and run B, not two "measured".
  if (series_count() == 2 && trace(0).meta.source == "measured" && trace(1).meta.source == "measured")
    return series == 0 ? "run A" : "run B";
  if (!source.empty()) return source;
  if (series_count() == 1) return "trace";
  return series == 0 ? "predicted" : "measured";
}

std::size_t TimelineModel::row_slot(int rank, int series, int lane) const {
  const int lanes = lane_base_[rank + 1] - lane_base_[rank];
  return static_cast<std::size_t>(lane_base_[rank]) * static_cast<std::size_t>(series_count()) +
         static_cast<std::size_t>(series) * static_cast<std::size_t>(lanes) + static_cast<std::size_t>(lane);
}

const Row* TimelineModel::row(int rank, int series, int lane) const {
  if (rank < 0 || rank >= rank_count_ || series < 0 || series >= series_count()) return nullptr;
  if (lane < 0 || lane >= lane_base_[rank + 1] - lane_base_[rank]) return nullptr;
  const int index = row_slot_[row_slot(rank, series, lane)];
  return index < 0 ? nullptr : &rows_[static_cast<std::size_t>(index)];
}

std::span<const Row> TimelineModel::rank_rows(int rank, int series) const {
  if (rank < 0 || rank >= rank_count_ || series < 0 || series >= series_count()) return {};
  const std::size_t slot =
      static_cast<std::size_t>(rank) * static_cast<std::size_t>(series_count()) + static_cast<std::size_t>(series);
  return std::span<const Row>(rows_.data() + first_row_[slot], first_row_[slot + 1] - first_row_[slot]);
}

std::span<const CounterTrack> TimelineModel::rank_counter_tracks(int series, int rank) const {
  const auto& tracks = series_.at(series).counter_tracks;
  const auto [first, last] = std::equal_range(tracks.begin(), tracks.end(), rank, TrackRankOrder{});
  return std::span<const CounterTrack>(tracks.data() + (first - tracks.begin()),
                                       static_cast<std::size_t>(last - first));
}

std::string TimelineModel::lane_name(int rank, int lane) const {
  for (const Series& series : series_) {
    const Trace& t = *series.trace;
    if (rank < static_cast<int>(t.lane_names.size()) && lane < static_cast<int>(t.lane_names[rank].size()) &&
        !t.lane_names[rank][lane].empty())
      return t.lane_names[rank][lane];
  }
  return traces::default_lane_name(lane);
}

std::string TimelineModel::rank_name(int rank) const {
  for (const Series& series : series_) {
    const Trace& t = *series.trace;
    if (rank < static_cast<int>(t.rank_names.size()) && !t.rank_names[rank].empty()) return t.rank_names[rank];
  }
  return "rank " + std::to_string(rank);
}

double TimelineModel::bubble_fraction(int series, int rank) const { return series_.at(series).bubbles.at(rank); }

std::int64_t TimelineModel::max_memory_bytes() const { return max_memory_; }

std::uint32_t TimelineModel::event_rgb(int series, std::size_t event) const {
  const auto& colours = series_.at(series).name_rgb;
  if (event < colours.size()) return colours[event];
  return kind_rgb(kind_of(trace(series).events.at(event).kind));
}

std::optional<std::size_t> TimelineModel::transfer_partner(int series, std::size_t event) const {
  const auto& partners = series_.at(series).partner;
  if (event >= partners.size() || partners[event] < 0) return std::nullopt;
  return static_cast<std::size_t>(partners[event]);
}

std::optional<ReceiveWait> TimelineModel::receive_wait(int series, std::size_t receive_event) const {
  const auto& events = trace(series).events;
  if (receive_event >= events.size() || !traces::is_receive(events[receive_event].kind)) return std::nullopt;
  const auto send = transfer_partner(series, receive_event);
  if (!send) return std::nullopt;
  const TraceEvent& r = events[receive_event];
  const TraceEvent& s = events[*send];
  ReceiveWait wait;
  wait.send_event = *send;
  wait.peer_rank = s.rank;
  wait.waited_for_send_us = std::max(0.0, s.ts_us - r.ts_us);
  wait.data_after_us = std::max(0.0, r.end_us() - std::max(s.ts_us, r.ts_us));
  return wait;
}

const traces::StepAttribution* TimelineModel::step_attribution(int series) const {
  const Series& s = series_.at(series);
  if (!s.has_pipeline || rank_count_ < 2) return nullptr;
  if (!s.attribution) s.attribution = std::make_shared<const traces::StepAttribution>(traces::attribute_step(*s.trace));
  return s.attribution.get();
}

double TimelineModel::prediction_error(std::size_t measured_event) const {
  const auto predicted = matched_predicted(measured_event);
  if (!predicted || series_count() < 2) return std::numeric_limits<double>::quiet_NaN();
  const double measured_us = trace(1).events[measured_event].dur_us;
  if (!(measured_us > 0)) return std::numeric_limits<double>::quiet_NaN();
  return (trace(0).events[*predicted].dur_us - measured_us) / measured_us;
}

double TimelineModel::measured_error(std::size_t measured_event) const {
  if (measured_event >= measured_error_.size()) return std::numeric_limits<double>::quiet_NaN();
  return measured_error_[measured_event];
}

std::optional<std::size_t> TimelineModel::matched_predicted(std::size_t measured_event) const {
  if (measured_event >= matched_predicted_.size() || matched_predicted_[measured_event] < 0) return std::nullopt;
  return static_cast<std::size_t>(matched_predicted_[measured_event]);
}

std::vector<SearchHit> TimelineModel::search(const std::string& text) const {
  std::vector<const Trace*> traces;
  for (const Series& series : series_) traces.push_back(series.trace.get());
  return search_events(traces, text);
}

std::vector<std::size_t> TimelineModel::critical_path(int series) const { return critical_path_of(*this, series); }

std::vector<float> TimelineModel::overview_density(int series, int bins) const {
  std::vector<float> density(std::max(bins, 1), 0.0f);
  if (end_us_ <= 0 || rank_count_ == 0) return density;
  const double bin_us = end_us_ / density.size();
  for (const auto& e : trace(series).events) {
    if (e.lane != static_cast<int>(traces::Lane::Compute)) continue;
    double from = e.ts_us, to = e.end_us();
    auto b = static_cast<std::size_t>(std::clamp(from / bin_us, 0.0, density.size() - 1.0));
    while (from < to && b < density.size()) {
      const double bin_end = (b + 1) * bin_us;
      density[b] += static_cast<float>((std::min(to, bin_end) - from) / bin_us);
      from = bin_end;
      ++b;
    }
  }
  for (auto& d : density) d = std::min(1.0f, d / rank_count_);
  return density;
}

}  // namespace pipescope::gui
