// The viewer's model, free of widgets: one or two traces (predicted first, measured second)
// laid out as rows (rank, series, lane) of start-sorted blocks, with what the views ask for:
// the blocks in a visible range with narrow ones folded together, hit tests, bubbles, memory
// curves, the prediction error of each measured operation, search and the critical path
// (the last three are parts of their own: memory_track.hpp, timeline_search.hpp,
// critical_path.hpp; the model holds or calls them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pipescope/traces/compare.hpp"
#include "pipescope/traces/step_attribution.hpp"
#include "pipescope/traces/trace.hpp"
#include "pipescope/gui/kinds.hpp"
#include "pipescope/gui/memory_track.hpp"
#include "pipescope/gui/name_colours.hpp"
#include "pipescope/gui/timeline_search.hpp"
#include "pipescope/gui/view_state.hpp"

namespace pipescope::gui {

struct Block {
  double start_us = 0;
  double end_us = 0;
  std::uint32_t event = 0;  // index into the series' trace events
  // The event's kind, kept here (in what would be padding) so a zoomed-out repaint colours
  // folded blocks without reaching into the events.
  Kind kind = Kind::Other;
};

struct Row {
  int rank = 0;
  int series = 0;  // 0: the first (predicted) trace, 1: the second (measured)
  int lane = 0;
  std::vector<Block> blocks;           // sorted by start
  std::vector<double> prefix_max_end;  // prefix_max_end[i] = max end of blocks[0..i]
  // Level of detail for views far out: a copy of the row in which runs of blocks shorter
  // than summary_us, starting within summary_us of the run's first, are one block (with the
  // first one's event and kind). Only for rows of many blocks; a view where a pixel spans
  // several summary_us paints from it and touches a few thousand blocks, not every one.
  std::shared_ptr<const Row> summary;
  double summary_us = 0;
  // Sub-rows of overlapping blocks (nested slices of plain traces, overlapping sends): each
  // block at the lowest level free at its start, so a nested slice sits one below its parent.
  // Empty when no block overlaps another (every depth 0); depth_count levels in all.
  std::vector<std::uint8_t> depths;
  int depth_count = 1;
  int depth(std::size_t block) const { return depths.empty() ? 0 : depths[block]; }

  // The first block that may reach past t_us (end > t_us), by binary search.
  std::size_t first_ending_after(double t_us) const;
  // The first block starting at or after t_us.
  std::size_t first_starting_from(double t_us) const;
  // The same, searching forward from block `from` (whose start is before t_us) in growing
  // steps: cheap when the answer is near, as when a repaint walks a row left to right.
  std::size_t first_starting_from(double t_us, std::size_t from) const;
  // The block under t_us (within tolerance_us), the latest-starting one when several are.
  std::optional<std::size_t> block_at(double t_us, double tolerance_us) const;
  // Fills prefix_max_end from blocks (after they are set or changed).
  void fill_prefix_max_end();
};

// What a row paints between two x positions: one block, or several folded into one because
// each was narrower than the minimum width.
struct Span {
  double x0 = 0;
  double x1 = 0;
  const Row* row = nullptr;  // the row visited: the given one, or its summary when far out
  std::size_t first = 0;     // block index into row->blocks
  std::size_t count = 1;
  bool folded() const { return count > 1; }
};

// Calls visit(const Span&) for the visible part of `row`, left to right. Blocks narrower than
// min_block_px fold with the blocks that start within min_block_px of them, so the work is
// bounded by the pixels, not by the events (binary search jumps over the folded ones). When
// min_block_px spans several of the row's summary_us, the summary is visited instead.
template <class Visit>
void visit_visible(const Row& row, const ViewState& view, double min_block_px, Visit&& visit);

// What a receive waited for: the send that fed it (pair_transfers) on `peer_rank`.
struct ReceiveWait {
  std::size_t send_event = 0;
  int peer_rank = -1;
  double waited_for_send_us = 0;  // from the receive's post to the send's start (0: sent first)
  double data_after_us = 0;       // from the later of the two to the receive's end
};

// The samples of one counter of one rank (plain traces' "C" events other than memory).
struct CounterTrack {
  int rank = 0;
  std::string name;
  std::vector<traces::CounterSample> samples;  // time-sorted
  double min_value = 0;
  double max_value = 0;
};

class TimelineModel {
 public:
  // One trace, or a predicted and a measured one of the same run.
  void set_traces(traces::Trace first, std::optional<traces::Trace> second = std::nullopt);

  int series_count() const { return static_cast<int>(series_.size()); }
  const traces::Trace& trace(int series) const { return *series_.at(series).trace; }
  std::string series_name(int series) const;  // "predicted", "measured", or the source
  int rank_count() const { return rank_count_; }
  double end_us() const { return end_us_; }  // the latest end over both traces
  bool empty() const { return series_.empty(); }

  // Rows ordered by rank, then series, then lane; only lanes used by some series of a rank
  // appear, and each used lane appears for every series (so predicted sits above measured).
  const std::vector<Row>& rows() const { return rows_; }
  const Row* row(int rank, int series, int lane) const;
  // The rows of one rank and series, lanes in order (a slice of rows()): what a rank's layout
  // and its table row read, without a scan of every rank's rows (a million ranks).
  std::span<const Row> rank_rows(int rank, int series) const;
  std::string lane_name(int rank, int lane) const;
  std::string rank_name(int rank) const;

  // The series' iteration (latest end - earliest start), computed once.
  double iteration_us(int series) const { return series_.at(series).iteration_us; }
  // The series' flows ordered by start (for a trace without flow events, such as a measured
  // one, the flows of its paired sends and receives), and the longest one, to find the visible ones fast.
  const std::vector<traces::Flow>& flows_by_start(int series) const { return series_.at(series).flows; }
  double longest_flow_us(int series) const { return series_.at(series).longest_flow_us; }

  // Idle share of a rank's compute lane within the series' own iteration.
  double bubble_fraction(int series, int rank) const;
  // A rank's memory samples (time-sorted), their peak and the range maxima (memory_track.hpp).
  const MemoryTrack& memory_track(int series, int rank) const { return series_.at(series).memory.at(rank); }
  const std::vector<traces::MemorySample>& memory(int series, int rank) const {
    return memory_track(series, rank).samples();
  }
  std::int64_t peak_memory_bytes(int series, int rank) const { return memory_track(series, rank).peak_bytes(); }
  // The highest of memory(series, rank)[from, to) (0 for an empty range), from a pyramid of
  // block maxima (level k: the maximum of 2^k blocks of kMemoryBlock samples): a pixel column
  // holding any number of samples costs at most 2 * kMemoryBlock + 2 reads.
  std::int64_t memory_max_bytes(int series, int rank, std::size_t from, std::size_t to) const {
    return memory_track(series, rank).max_bytes(from, to);
  }
  static constexpr std::size_t kMemoryBlock = MemoryTrack::kBlock;
  std::int64_t max_memory_bytes() const;  // over everything, for a shared scale

  // With two traces: the comparison, and per measured event its error against the matched
  // predicted one (measured / predicted - 1; NaN when unmatched).
  const std::optional<traces::Comparison>& comparison() const { return comparison_; }
  double measured_error(std::size_t measured_event) const;
  std::optional<std::size_t> matched_predicted(std::size_t measured_event) const;
  // The error as the CLI states it (ppsim compare): (predicted - measured) / measured of the
  // matched predicted duration, negative where the run took longer; NaN when unmatched or the
  // measured duration is 0. What the details and the tables show (measured_error drives the
  // difference shading).
  double prediction_error(std::size_t measured_event) const;

  // Events matching a query, in start order: `stage N`, `mb N`, `rank N` pin those fields and
  // every other word must occur in the name, ignoring case ("B mb 3", "send rank 2", "F")
  // (search_events, timeline_search.hpp).
  std::vector<SearchHit> search(const std::string& text) const;

  // The chain of events that ends the iteration: from the latest-ending event, each step goes
  // from a receive that waited (its send started after it was posted) to that send on the
  // peer rank, from a receive fed by a flow to the flow's source, and otherwise to the latest
  // event of the same rank that ended by the time this one started. Returned in time order
  // (event indices of the series; critical_path_of, critical_path.hpp).
  std::vector<std::size_t> critical_path(int series) const;

  // Whether the series is a pipeline (a pipescope trace, or events with stages). A plain
  // Chrome or profiler trace is not: it has no bubble or iteration to show, and its blocks
  // are coloured by name.
  bool has_pipeline(int series) const { return series_.at(series).has_pipeline; }
  // The fill colour of an event (0xRRGGBB): its kind's in a pipeline, its name's
  // (name_rgb, a stable hash) in a plain trace.
  std::uint32_t event_rgb(int series, std::size_t event) const;
  // The send paired with a receive or the receive paired with a send (pair_transfers).
  std::optional<std::size_t> transfer_partner(int series, std::size_t event) const;
  // The send a receive waited for, or nullopt for an event that is not a paired receive.
  std::optional<ReceiveWait> receive_wait(int series, std::size_t receive_event) const;
  // Whom the series' ranks waited on and the root of each wait (traces::attribute_step),
  // computed on first use and kept: nullptr for a plain trace or a single rank.
  const traces::StepAttribution* step_attribution(int series) const;
  // The series' instant events, time-sorted.
  const std::vector<traces::InstantEvent>& instants(int series) const { return series_.at(series).instants; }
  const std::vector<CounterTrack>& counter_tracks(int series) const { return series_.at(series).counter_tracks; }
  // The counter tracks of one rank (counter_tracks is ordered by rank).
  std::span<const CounterTrack> rank_counter_tracks(int series, int rank) const;

  // Busy share of [0, end_us] per bin of the first series' compute lanes, for the overview.
  std::vector<float> overview_density(int series, int bins) const;

 private:
  // What the model keeps of each series (0: the first trace, 1: the second).
  struct Series {
    std::shared_ptr<const traces::Trace> trace;
    bool has_pipeline = false;
    double iteration_us = 0;
    std::vector<double> bubbles;      // per rank
    std::vector<MemoryTrack> memory;  // per rank
    std::vector<traces::Flow> flows;  // the trace's own, or made from transfer pairs; by start
    double longest_flow_us = 0;
    std::vector<std::int64_t> partner;           // [event] -> paired event or -1; empty without pairs
    std::vector<std::uint32_t> name_rgb;         // [event], plain traces only
    std::vector<traces::InstantEvent> instants;  // time-sorted
    std::vector<CounterTrack> counter_tracks;    // by rank, then name
    // step_attribution's, made on first use (a replay of the step: not paid by a viewer that
    // never asks)
    mutable std::shared_ptr<const traces::StepAttribution> attribution;
  };

  // The steps of set_traces, in order.
  void add_series(traces::Trace trace);
  void measure_extent();
  std::vector<char> index_lanes();
  void lay_out_rows(const std::vector<char>& used_lanes);
  void fill_rows();
  void fill_bubbles(Series& series, int s) const;
  static void fill_transfers(Series& series);
  static void fill_plain_trace_data(Series& series);
  void take_comparison(std::optional<traces::Comparison> comparison);

  std::vector<Series> series_;
  std::vector<Row> rows_;
  // Rank r's lanes are slots lane_base_[r] .. lane_base_[r + 1]; row_slot_[row_slot(r, s, lane)]
  // is the rows_ index of (r, s, lane), or -1. Flat: no allocation per rank.
  std::vector<int> lane_base_;
  std::vector<int> row_slot_;
  std::size_t row_slot(int rank, int series, int lane) const;
  std::vector<std::size_t> first_row_;  // [rank * series_count + series]: its first row in rows_; one more at the end
  std::int64_t max_memory_ = 0;
  std::optional<traces::Comparison> comparison_;
  std::vector<float> measured_error_;
  std::vector<std::int64_t> matched_predicted_;
  int rank_count_ = 0;
  double end_us_ = 0;
};

// ---- template ----
template <class Visit>
void visit_visible(const Row& full_row, const ViewState& view, double min_block_px, Visit&& visit) {
  const Row& row =
      full_row.summary && view.us_per_pixel() * min_block_px >= 4 * full_row.summary_us ? *full_row.summary : full_row;
  const auto& blocks = row.blocks;
  const double t_end = view.visible_end_us();
  std::size_t i = row.first_ending_after(view.visible_start_us());
  while (i < blocks.size() && blocks[i].start_us < t_end) {
    const double x0 = view.time_to_x(blocks[i].start_us);
    const double x1 = view.time_to_x(blocks[i].end_us);
    if (x1 - x0 >= min_block_px) {
      visit(Span{x0, x1, &row, i, 1});
      ++i;
      continue;
    }
    const double cut_us = view.x_to_time(std::max(x0, -1.0) + min_block_px);
    std::size_t j = row.first_starting_from(cut_us, i);
    if (j <= i) j = i + 1;
    double last_end = blocks[j - 1].end_us;
    const double x_end = std::max(view.time_to_x(last_end), x0 + 1.0);
    visit(Span{x0, std::max(x_end, x1), &row, i, j - i});
    i = j;
  }
}

}  // namespace pipescope::gui
