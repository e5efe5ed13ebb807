#include "pipescope/gui/timeline_model.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <future>
#include <limits>
#include <numeric>
#include <string_view>
#include <tuple>
#include <unordered_set>

#include <fmt/format.h>

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
  return static_cast<std::size_t>(std::upper_bound(prefix_max_end.begin(), prefix_max_end.end(), t_us) - prefix_max_end.begin());
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
  return static_cast<std::size_t>(std::lower_bound(blocks.begin() + static_cast<std::ptrdiff_t>(low), blocks.begin() + static_cast<std::ptrdiff_t>(high), t_us, starts_before) -
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
    if (level == level_end.size()) level_end.push_back(b.end_us);
    else level_end[level] = std::max(level_end[level], b.end_us);
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

}  // namespace

void TimelineModel::set_traces(Trace first, std::optional<Trace> second) {
  traces_.clear();
  traces_.push_back(std::make_shared<const Trace>(std::move(first)));
  if (second) traces_.push_back(std::make_shared<const Trace>(std::move(*second)));
  const int series = series_count();
  // The comparison is the dearest part of a pair and needs only the two traces: it runs on a
  // second thread while the rows, bubbles and memory curves are built here.
  std::future<traces::Comparison> comparison;
  if (series == 2)
    comparison = std::async(std::launch::async, [predicted = traces_[0], measured = traces_[1]] {
      return traces::compare_traces(*predicted, *measured, 20);
    });

  rank_count_ = 0;
  end_us_ = 0;
  for (const auto& t : traces_) {
    rank_count_ = std::max(rank_count_, t->rank_count());
    end_us_ = std::max(end_us_, t->end_us());
    for (const auto& m : t->memory) end_us_ = std::max(end_us_, m.ts_us);
    for (const auto& c : t->counters) end_us_ = std::max(end_us_, c.ts_us);
    for (const auto& i : t->instants) end_us_ = std::max(end_us_, i.ts_us);
  }
  has_pipeline_.clear();
  for (const auto& t : traces_) has_pipeline_.push_back(is_pipeline(*t));

  // Which lanes each rank uses, in any series, in flat tables (no allocation per rank: a trace
  // may have a million ranks): lane_base_[r] .. lane_base_[r + 1] are rank r's lane slots.
  lane_base_.assign(static_cast<std::size_t>(rank_count_) + 1, 0);
  for (const auto& t : traces_)
    for (const auto& e : t->events)
      lane_base_[static_cast<std::size_t>(e.rank) + 1] = std::max(lane_base_[static_cast<std::size_t>(e.rank) + 1], e.lane + 1);
  for (int r = 0; r < rank_count_; ++r) lane_base_[r + 1] += lane_base_[r];
  std::vector<char> used(static_cast<std::size_t>(lane_base_.back()), 0);
  for (const auto& t : traces_)
    for (const auto& e : t->events) used[static_cast<std::size_t>(lane_base_[e.rank] + e.lane)] = 1;

  rows_.clear();
  row_slot_.assign(static_cast<std::size_t>(lane_base_.back()) * series, -1);
  first_row_.clear();
  first_row_.reserve(static_cast<std::size_t>(rank_count_) * series + 1);
  for (int r = 0; r < rank_count_; ++r)
    for (int s = 0; s < series; ++s) {
      first_row_.push_back(rows_.size());
      for (int lane = 0; lane < lane_base_[r + 1] - lane_base_[r]; ++lane) {
        if (!used[static_cast<std::size_t>(lane_base_[r] + lane)]) continue;
        row_slot_[row_slot(r, s, lane)] = static_cast<int>(rows_.size());
        Row row;
        row.rank = r;
        row.series = s;
        row.lane = lane;
        rows_.push_back(std::move(row));
      }
    }
  first_row_.push_back(rows_.size());
  // Count first, so each row is allocated once at its final size.
  std::vector<std::size_t> row_sizes(rows_.size(), 0);
  for (int s = 0; s < series; ++s)
    for (const TraceEvent& e : traces_[s]->events) ++row_sizes[static_cast<std::size_t>(row_slot_[row_slot(e.rank, s, e.lane)])];
  for (std::size_t r = 0; r < rows_.size(); ++r) rows_[r].blocks.reserve(row_sizes[r]);
  for (int s = 0; s < series; ++s) {
    const auto& events = traces_[s]->events;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const TraceEvent& e = events[i];
      rows_[static_cast<std::size_t>(row_slot_[row_slot(e.rank, s, e.lane)])].blocks.push_back(
          {e.ts_us, e.end_us(), static_cast<std::uint32_t>(i), kind_of(e.kind)});
    }
  }
  for (auto& row : rows_) {
    auto by_start = [](const Block& a, const Block& b) { return a.start_us < b.start_us; };
    // In a plain trace a parent slice and its first child start together: the longer one
    // goes first, so it takes the upper level.
    auto by_start_parent_first = [](const Block& a, const Block& b) {
      return a.start_us < b.start_us || (a.start_us == b.start_us && a.end_us > b.end_us);
    };
    if (!has_pipeline_[row.series]) {
      if (!std::is_sorted(row.blocks.begin(), row.blocks.end(), by_start_parent_first))
        std::stable_sort(row.blocks.begin(), row.blocks.end(), by_start_parent_first);
    } else if (!std::is_sorted(row.blocks.begin(), row.blocks.end(), by_start)) {
      std::stable_sort(row.blocks.begin(), row.blocks.end(), by_start);
    }
    row.fill_prefix_max_end();
    fill_depths(row);
    if (row.blocks.size() > 4 * kSummaryBlocks && end_us_ > 0) add_summary(row, end_us_ / kSummaryBlocks);
  }

  memory_.assign(series, std::vector<std::vector<traces::MemorySample>>(rank_count_));
  iteration_us_.clear();
  peak_memory_.clear();
  memory_pyramid_.clear();
  max_memory_ = 0;
  flows_.clear();
  longest_flow_us_.clear();
  partner_.clear();
  fill_plain_trace_data();
  bubbles_.assign(series, std::vector<double>(rank_count_, 0));
  for (int s = 0; s < series; ++s) {
    for (const auto& m : traces_[s]->memory) memory_[s][m.rank].push_back(m);
    for (auto& samples : memory_[s])
      std::stable_sort(samples.begin(), samples.end(), [](const auto& a, const auto& b) { return a.ts_us < b.ts_us; });
    peak_memory_.emplace_back(rank_count_, 0);
    memory_pyramid_.emplace_back(rank_count_);
    for (int r = 0; r < rank_count_; ++r) {
      if (memory_[s][r].empty()) continue;  // most ranks of a wide plain trace: nothing to allocate
      auto& pyramid = memory_pyramid_[s][r];
      const std::size_t blocks = memory_[s][r].size() / kMemoryBlock;  // whole blocks only
      pyramid.assign(1, std::vector<std::int64_t>(blocks, std::numeric_limits<std::int64_t>::min()));
      for (std::size_t i = 0; i < memory_[s][r].size(); ++i) {
        const std::int64_t bytes = memory_[s][r][i].bytes;
        peak_memory_[s][r] = std::max(peak_memory_[s][r], bytes);
        if (i / kMemoryBlock < blocks) pyramid[0][i / kMemoryBlock] = std::max(pyramid[0][i / kMemoryBlock], bytes);
      }
      for (std::size_t span = 2; span <= blocks; span *= 2) {
        const auto& below = pyramid.back();
        std::vector<std::int64_t> level(blocks - span + 1);
        for (std::size_t b = 0; b < level.size(); ++b) level[b] = std::max(below[b], below[b + span / 2]);
        pyramid.push_back(std::move(level));
      }
    }
    for (const auto peak : peak_memory_[s]) max_memory_ = std::max(max_memory_, peak);
    const double iteration = traces::iteration_time_us(*traces_[s]);
    iteration_us_.push_back(iteration);
    // Bubbles from the compute rows (already sorted), not by rescanning every event per rank:
    // the compute lane is the only busy one (traces/bubble.hpp).
    static_assert(traces::counts_as_busy(traces::Lane::Compute) && !traces::counts_as_busy(traces::Lane::Send) &&
                  !traces::counts_as_busy(traces::Lane::Recv) && !traces::counts_as_busy(traces::Lane::Collective));
    for (int r = 0; r < rank_count_; ++r) {
      const Row* compute = row(r, s, static_cast<int>(traces::Lane::Compute));
      traces::BusyTime busy;
      if (compute)
        for (const Block& b : compute->blocks) busy.add(b.start_us, b.end_us);
      bubbles_[s][r] = traces::bubble_fraction_of(busy.total_us(), iteration);
    }
    // Transfers paired from their events: the details of a receive, the critical path, and
    // the arrows of a trace that has no flow events of its own (a measured one).
    const auto pairs = traces::pair_transfers(*traces_[s]);
    partner_.emplace_back();
    if (!pairs.empty()) {
      partner_.back().assign(traces_[s]->events.size(), -1);
      for (const auto& pair : pairs) {
        partner_.back()[pair.send] = static_cast<std::int64_t>(pair.receive);
        partner_.back()[pair.receive] = static_cast<std::int64_t>(pair.send);
      }
    }
    flows_.push_back(traces_[s]->flows);
    if (flows_.back().empty())
      for (const auto& pair : pairs) flows_.back().push_back(traces::flow_of(*traces_[s], pair));
    std::sort(flows_.back().begin(), flows_.back().end(), [](const auto& a, const auto& b) { return a.from_ts_us < b.from_ts_us; });
    double longest = 0;
    for (const auto& f : flows_.back()) longest = std::max(longest, std::fabs(f.to_ts_us - f.from_ts_us));
    longest_flow_us_.push_back(longest);
  }

  comparison_.reset();
  measured_error_.clear();
  matched_predicted_.clear();
  if (series == 2) {
    comparison_ = comparison.get();
    measured_error_.assign(traces_[1]->events.size(), std::numeric_limits<float>::quiet_NaN());
    matched_predicted_.assign(traces_[1]->events.size(), -1);
    for (const auto& op : comparison_->matched) {
      matched_predicted_[op.measured_index] = static_cast<std::int64_t>(op.predicted_index);
      if (op.predicted_dur_us > 0) measured_error_[op.measured_index] = static_cast<float>(op.measured_dur_us / op.predicted_dur_us - 1);
    }
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
  const std::size_t slot = static_cast<std::size_t>(rank) * static_cast<std::size_t>(series_count()) + static_cast<std::size_t>(series);
  return std::span<const Row>(rows_.data() + first_row_[slot], first_row_[slot + 1] - first_row_[slot]);
}

std::span<const CounterTrack> TimelineModel::rank_counter_tracks(int series, int rank) const {
  const auto& tracks = counter_tracks_.at(series);
  const auto [first, last] = std::equal_range(tracks.begin(), tracks.end(), rank, TrackRankOrder{});
  return std::span<const CounterTrack>(tracks.data() + (first - tracks.begin()), static_cast<std::size_t>(last - first));
}

std::string TimelineModel::lane_name(int rank, int lane) const {
  for (const auto& t : traces_)
    if (rank < static_cast<int>(t->lane_names.size()) && lane < static_cast<int>(t->lane_names[rank].size()) &&
        !t->lane_names[rank][lane].empty())
      return t->lane_names[rank][lane];
  return traces::default_lane_name(lane);
}

std::string TimelineModel::rank_name(int rank) const {
  for (const auto& t : traces_)
    if (rank < static_cast<int>(t->rank_names.size()) && !t->rank_names[rank].empty()) return t->rank_names[rank];
  return "rank " + std::to_string(rank);
}

double TimelineModel::bubble_fraction(int series, int rank) const { return bubbles_.at(series).at(rank); }

const std::vector<traces::MemorySample>& TimelineModel::memory(int series, int rank) const { return memory_.at(series).at(rank); }

std::int64_t TimelineModel::peak_memory_bytes(int series, int rank) const { return peak_memory_.at(series).at(rank); }

std::int64_t TimelineModel::max_memory_bytes() const { return max_memory_; }

std::int64_t TimelineModel::memory_max_bytes(int series, int rank, std::size_t from, std::size_t to) const {
  const auto& samples = memory_.at(series).at(rank);
  const auto& pyramid = memory_pyramid_.at(series).at(rank);
  to = std::min(to, samples.size());
  if (from >= to) return 0;
  std::int64_t highest = std::numeric_limits<std::int64_t>::min();
  // The partial block at each end sample by sample; the whole blocks between as two
  // overlapping power-of-two runs of the pyramid.
  while (from < to && from % kMemoryBlock != 0) highest = std::max(highest, samples[from++].bytes);
  while (to > from && to % kMemoryBlock != 0) highest = std::max(highest, samples[--to].bytes);
  if (from < to) {
    const std::size_t first = from / kMemoryBlock, count = (to - from) / kMemoryBlock;
    std::size_t level = 0;
    while ((std::size_t{2} << level) <= count) ++level;
    highest = std::max({highest, pyramid[level][first], pyramid[level][first + count - (std::size_t{1} << level)]});
  }
  return highest;
}

void TimelineModel::fill_plain_trace_data() {
  name_rgb_.assign(traces_.size(), {});
  instants_.assign(traces_.size(), {});
  counter_tracks_.assign(traces_.size(), {});
  for (std::size_t s = 0; s < traces_.size(); ++s) {
    const Trace& t = *traces_[s];
    if (!has_pipeline_[s]) {
      // One hash per run of equal names (a profiler writes many of one name in a row).
      auto& colours = name_rgb_[s];
      colours.resize(t.events.size());
      for (std::size_t i = 0; i < t.events.size(); ++i)
        colours[i] = i > 0 && t.events[i].name == t.events[i - 1].name ? colours[i - 1] : name_rgb(t.events[i].name);
    }
    instants_[s] = t.instants;
    std::stable_sort(instants_[s].begin(), instants_[s].end(), [](const auto& a, const auto& b) { return a.ts_us < b.ts_us; });
    std::vector<traces::CounterSample> samples = t.counters;
    std::stable_sort(samples.begin(), samples.end(), [](const auto& a, const auto& b) {
      return std::tie(a.rank, a.name, a.ts_us) < std::tie(b.rank, b.name, b.ts_us);
    });
    auto& tracks = counter_tracks_[s];
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
}

std::uint32_t TimelineModel::event_rgb(int series, std::size_t event) const {
  const auto& colours = name_rgb_.at(series);
  if (event < colours.size()) return colours[event];
  return kind_rgb(kind_of(trace(series).events.at(event).kind));
}

std::optional<std::size_t> TimelineModel::transfer_partner(int series, std::size_t event) const {
  const auto& partners = partner_.at(series);
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

namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// A search query: `stage N`, `mb N` (or `micro_batch N`), `rank N` pin those fields; every
// other word must occur in the event name.
struct Query {
  std::vector<std::string> name_parts;
  int stage = -1, micro_batch = -1, rank = -1;
  bool valid = false;
};

Query parse_query(const std::string& text) {
  Query q;
  std::vector<std::string> words;
  std::string word;
  for (const char c : lower(text) + " ") {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '=' || c == ':') {
      if (!word.empty()) words.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  auto number = [](const std::string& w) {
    if (w.empty() || !std::all_of(w.begin(), w.end(), [](unsigned char c) { return std::isdigit(c); })) return -1;
    return std::stoi(w);
  };
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    const bool has_number = i + 1 < words.size() && number(words[i + 1]) >= 0;
    if (has_number && w == "stage") q.stage = number(words[++i]);
    else if (has_number && (w == "mb" || w == "micro_batch" || w == "micro-batch")) q.micro_batch = number(words[++i]);
    else if (has_number && w == "rank") q.rank = number(words[++i]);
    else q.name_parts.push_back(w);
  }
  q.valid = !words.empty();
  return q;
}

}  // namespace

std::vector<SearchHit> TimelineModel::search(const std::string& text) const {
  std::vector<SearchHit> hits;
  const Query q = parse_query(text);
  if (!q.valid) return hits;
  std::string name;
  for (int s = 0; s < series_count(); ++s) {
    const auto& events = trace(s).events;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const TraceEvent& e = events[i];
      if ((q.stage >= 0 && e.stage != q.stage) || (q.micro_batch >= 0 && e.micro_batch != q.micro_batch) ||
          (q.rank >= 0 && e.rank != q.rank))
        continue;
      name = lower(e.name);
      bool all = true;
      for (const auto& part : q.name_parts) all = all && name.find(part) != std::string::npos;
      if (all) hits.push_back({s, i});
    }
  }
  std::stable_sort(hits.begin(), hits.end(), [&](const SearchHit& a, const SearchHit& b) {
    return trace(a.series).events[a.event].ts_us < trace(b.series).events[b.event].ts_us;
  });
  return hits;
}

std::vector<std::size_t> TimelineModel::critical_path(int series) const {
  std::vector<std::size_t> path;
  const Trace& t = trace(series);
  if (t.events.empty()) return path;
  const double eps = std::max(1e-6, end_us_ * 1e-9);

  // Per rank, events ordered by end, to find "the latest that ended by then".
  std::vector<std::vector<std::size_t>> by_end(rank_count_);
  for (std::size_t i = 0; i < t.events.size(); ++i) by_end[t.events[i].rank].push_back(i);
  for (auto& list : by_end)
    std::sort(list.begin(), list.end(), [&](std::size_t a, std::size_t b) { return t.events[a].end_us() < t.events[b].end_us(); });

  // Flows by where they arrive, to find the one feeding a receive by binary search.
  // The series' flows: the trace's own, or those of its paired transfers.
  const std::vector<traces::Flow>& flows = flows_.at(series);
  std::vector<std::size_t> incoming(flows.size());
  std::iota(incoming.begin(), incoming.end(), std::size_t{0});
  auto arrival = [&](std::size_t i) { return std::tuple(flows[i].to_rank, flows[i].to_lane, flows[i].to_ts_us); };
  std::sort(incoming.begin(), incoming.end(), [&](std::size_t a, std::size_t b) { return arrival(a) < arrival(b); });
  auto flow_source = [&](const TraceEvent& e) -> std::optional<std::size_t> {
    auto it = std::lower_bound(incoming.begin(), incoming.end(), std::tuple(e.rank, e.lane, e.ts_us - eps),
                               [&](std::size_t i, const auto& key) { return arrival(i) < key; });
    for (; it != incoming.end(); ++it) {
      const auto& f = flows[*it];
      if (f.to_rank != e.rank || f.to_lane != e.lane || f.to_ts_us > e.end_us() + eps) break;
      const Row* source_row = row(f.from_rank, series, f.from_lane);
      if (!source_row) continue;
      if (auto b = source_row->block_at(f.from_ts_us, eps)) return source_row->blocks[*b].event;
    }
    return std::nullopt;
  };

  std::size_t current = 0;
  for (std::size_t i = 1; i < t.events.size(); ++i)
    if (t.events[i].end_us() > t.events[current].end_us() ||
        (t.events[i].end_us() == t.events[current].end_us() && t.events[i].lane < t.events[current].lane))
      current = i;
  std::unordered_set<std::size_t> seen;
  while (seen.insert(current).second) {
    path.push_back(current);
    const TraceEvent& e = t.events[current];
    if (e.ts_us <= eps) break;
    std::optional<std::size_t> next;
    // A receive whose send started after it was posted waited for the peer: the path goes
    // there, not through the wait on this rank.
    // A receive whose data was sent before it was posted is fed by its transfer (the flow).
    if (auto wait = receive_wait(series, current); wait && wait->waited_for_send_us > eps && !seen.count(wait->send_event))
      next = wait->send_event;
    if (!next && e.lane == static_cast<int>(traces::Lane::Recv)) next = flow_source(e);
    if (!next) {
      const auto& list = by_end[e.rank];
      auto it = std::upper_bound(list.begin(), list.end(), e.ts_us + eps,
                                 [&](double limit, std::size_t idx) { return limit < t.events[idx].end_us(); });
      while (it != list.begin()) {
        --it;
        if (*it != current && !seen.count(*it)) {
          next = *it;
          break;
        }
      }
    }
    if (!next) break;
    current = *next;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

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
