// Level of detail that never misleads. A lane too dense to draw block by block is painted as
// merged spans, and a merged span shows what fills most of its time (not its first block's
// kind), with the prediction error weighted by time (a 0.1 us op does not shade a 100 us
// neighbour). A block wider than the merge width is never merged: it keeps its own box and
// label. Overlapping blocks of one lane are split into sub-rows (stacked, not painted over
// each other), and the lanes of a rank can be merged into one row for a compact view.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <vector>

#include "pipescope/gui/kinds.hpp"
#include "pipescope/gui/timeline_model.hpp"
#include "pipescope/gui/view_state.hpp"

namespace pipescope::gui {

// What a run of blocks is made of: time per kind, and the time-weighted prediction error of
// its matched blocks.
struct BlockMix {
  std::array<double, kKindCount> kind_us{};
  double error_weighted_us = 0;  // sum of duration * error over matched blocks
  double matched_us = 0;         // their summed duration
  double unmatched_us = 0;

  // The kind filling most of the time; `fallback` when every block lasts zero time.
  Kind dominant_kind(Kind fallback) const;
  // The kind with the second most time, and its share of the time (0 when there is none).
  Kind second_kind(Kind dominant, double& share) const;
  // Time-weighted mean error of the matched blocks; NaN when unmatched time dominates (or
  // when none is matched).
  double mean_error() const;
};

// Per-row running sums from which any run of blocks is mixed in constant time (plus at most
// two groups of blocks walked), and per-group longest blocks to find a wide one quickly.
class RowTally {
 public:
  static constexpr std::size_t kGroup = 16;

  RowTally() = default;
  // error_of(event) is the block's prediction error (NaN when unmatched); pass nothing for a
  // series without errors.
  RowTally(const Row& row, const std::function<double(std::uint32_t)>& error_of);

  // The mix of row.blocks[first, last).
  BlockMix mix(const Row& row, std::size_t first, std::size_t last) const;
  // The first block in [first, last) lasting at least wide_us, or `last`.
  std::size_t first_wide(const Row& row, std::size_t first, std::size_t last, double wide_us) const;
  bool has_errors() const { return !errors_.empty(); }
  double error(std::size_t block) const { return errors_.empty() ? std::numeric_limits<double>::quiet_NaN() : errors_[block]; }

 private:
  void add(BlockMix& mix, const Row& row, std::size_t block) const;
  BlockMix prefix(const Row& row, std::size_t count) const;  // the mix of blocks [0, count)

  std::vector<BlockMix> group_prefix_;  // [g]: the mix of blocks [0, g * kGroup)
  std::vector<double> group_longest_us_;  // [g]: the longest block in [g * kGroup, (g + 1) * kGroup)
  std::vector<float> errors_;             // per block, NaN when unmatched; empty without errors
};

// What a lane paints between two x positions: one block, or a merged run of narrower ones.
struct LaneSpan {
  double x0 = 0;
  double x1 = 0;
  std::size_t first = 0;  // index into row.blocks
  std::size_t count = 1;
  double min_block_px = 0;
  // Drawn whole, with a box and a label: a single block at least min_block_px wide.
  bool whole() const { return count == 1 && x1 - x0 >= min_block_px; }
  bool merged() const { return count > 1; }
};

// Calls visit(const LaneSpan&) for the visible part of `row`, left to right: each block at
// least min_block_px wide on its own; runs of narrower blocks starting within min_block_px of
// each other merged, the run ending before any wide block. Binary search jumps over merged
// blocks, so the work follows the pixels, not the events.
template <class Visit>
void visit_lane(const Row& row, const RowTally& tally, const ViewState& view, double min_block_px, Visit&& visit);

// Overlapping blocks of a row (a send still running when the next starts) dealt to sub-rows:
// each block goes to the first sub-row free at its start. Empty when nothing overlaps (the row
// is its own single sub-row). Blocks touching end to start (within tolerance_us) do not overlap.
std::vector<Row> stack_overlaps(const Row& row, double tolerance_us = 1e-3);

// A plain trace's nested slices dealt to sub-rows by their depth (Row::depth): a child one
// sub-row below its parent, as a profiler shows a call stack. Empty when every depth is 0.
std::vector<Row> split_by_depth(const Row& row);

// The blocks of several rows (a rank's lanes) in one start-sorted row, for the compact view.
Row merge_rows(const std::vector<const Row*>& rows);

// ---- template ----
template <class Visit>
void visit_lane(const Row& row, const RowTally& tally, const ViewState& view, double min_block_px, Visit&& visit) {
  const auto& blocks = row.blocks;
  const double t_end = view.visible_end_us();
  const double wide_us = min_block_px * view.us_per_pixel();
  std::size_t i = row.first_ending_after(view.visible_start_us());
  while (i < blocks.size() && blocks[i].start_us < t_end) {
    const double x0 = view.time_to_x(blocks[i].start_us);
    const double x1 = view.time_to_x(blocks[i].end_us);
    if (x1 - x0 >= min_block_px) {
      visit(LaneSpan{x0, x1, i, 1, min_block_px});
      ++i;
      continue;
    }
    const double cut_us = view.x_to_time(std::max(x0, -1.0) + min_block_px);
    std::size_t j = row.first_starting_from(cut_us, i);
    if (j <= i) j = i + 1;
    // A wide block starting inside the run is not swallowed by it: the run stops before it.
    j = tally.first_wide(row, i + 1, j, wide_us);
    double end_us = blocks[i].end_us;
    for (std::size_t k = j - 1; k > i && k + 4 > j; --k) end_us = std::max(end_us, blocks[k].end_us);
    const double x_end = std::max(view.time_to_x(end_us), x0 + 1.0);
    visit(LaneSpan{x0, std::max(x_end, x1), i, j - i, min_block_px});
    i = j;
  }
}

}  // namespace pipescope::gui
