#include "pipescope/gui/lane_detail.hpp"

#include <algorithm>

namespace pipescope::gui {
namespace {

Row empty_like(const Row& row) {
  Row out;
  out.rank = row.rank;
  out.series = row.series;
  out.lane = row.lane;
  return out;
}

}  // namespace

Kind BlockMix::dominant_kind(Kind fallback) const {
  int best = -1;
  double best_us = 0;
  for (int k = 0; k < kKindCount; ++k)
    if (kind_us[k] > best_us) {
      best_us = kind_us[k];
      best = k;
    }
  return best < 0 ? fallback : static_cast<Kind>(best);
}

Kind BlockMix::second_kind(Kind dominant, double& share) const {
  double total = 0, best_us = 0;
  int best = -1;
  for (int k = 0; k < kKindCount; ++k) {
    total += kind_us[k];
    if (k != static_cast<int>(dominant) && kind_us[k] > best_us) {
      best_us = kind_us[k];
      best = k;
    }
  }
  share = total > 0 ? best_us / total : 0;
  return best < 0 ? dominant : static_cast<Kind>(best);
}

double BlockMix::mean_error() const {
  if (matched_us <= 0 || unmatched_us > matched_us) return std::numeric_limits<double>::quiet_NaN();
  return error_weighted_us / matched_us;
}

RowTally::RowTally(const Row& row, const std::function<double(std::uint32_t)>& error_of) {
  const std::size_t n = row.blocks.size();
  if (error_of) {
    errors_.resize(n);
    for (std::size_t i = 0; i < n; ++i) errors_[i] = static_cast<float>(error_of(row.blocks[i].event));
  }
  const std::size_t groups = n / kGroup + 1;
  group_prefix_.resize(groups + 1);
  group_longest_us_.assign(groups, 0.0);
  BlockMix running;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % kGroup == 0) group_prefix_[i / kGroup] = running;
    add(running, row, i);
    auto& longest = group_longest_us_[i / kGroup];
    longest = std::max(longest, row.blocks[i].end_us - row.blocks[i].start_us);
  }
  group_prefix_[(n + kGroup - 1) / kGroup] = running;
}

void RowTally::add(BlockMix& mix, const Row& row, std::size_t block) const {
  const Block& b = row.blocks[block];
  const double duration = std::max(0.0, b.end_us - b.start_us);
  mix.kind_us[static_cast<int>(b.kind)] += duration;
  if (errors_.empty()) return;
  const double error = errors_[block];
  if (std::isfinite(error)) {
    mix.error_weighted_us += duration * error;
    mix.matched_us += duration;
  } else {
    mix.unmatched_us += duration;
  }
}

BlockMix RowTally::prefix(const Row& row, std::size_t count) const {
  BlockMix mix = group_prefix_[count / kGroup];
  for (std::size_t i = count / kGroup * kGroup; i < count; ++i) add(mix, row, i);
  return mix;
}

BlockMix RowTally::mix(const Row& row, std::size_t first, std::size_t last) const {
  BlockMix out;
  if (last <= first) return out;
  // Short runs (most, close in) are summed directly; long ones as a difference of prefixes.
  if (last - first <= 2 * kGroup) {
    for (std::size_t i = first; i < last; ++i) add(out, row, i);
    return out;
  }
  const BlockMix to = prefix(row, last), from = prefix(row, first);
  for (int k = 0; k < kKindCount; ++k) out.kind_us[k] = std::max(0.0, to.kind_us[k] - from.kind_us[k]);
  out.error_weighted_us = to.error_weighted_us - from.error_weighted_us;
  out.matched_us = std::max(0.0, to.matched_us - from.matched_us);
  out.unmatched_us = std::max(0.0, to.unmatched_us - from.unmatched_us);
  return out;
}

std::size_t RowTally::first_wide(const Row& row, std::size_t first, std::size_t last, double wide_us) const {
  auto wide = [&](std::size_t i) { return row.blocks[i].end_us - row.blocks[i].start_us >= wide_us; };
  std::size_t i = first;
  // Block by block up to a group boundary, then a group at a time while no block of the
  // group is wide enough, then block by block inside the group that has one.
  for (; i < last && i % kGroup != 0; ++i)
    if (wide(i)) return i;
  for (; i + kGroup <= last; i += kGroup)
    if (group_longest_us_[i / kGroup] >= wide_us) break;
  for (; i < last; ++i)
    if (wide(i)) return i;
  return last;
}

std::vector<Row> stack_overlaps(const Row& row, double tolerance_us) {
  if (row.blocks.size() < 2) return {};  // nothing to overlap (most rows of a very wide trace)
  std::vector<double> free_from;  // per sub-row: the end of its last block
  std::vector<std::size_t> assigned(row.blocks.size(), 0);
  for (std::size_t i = 0; i < row.blocks.size(); ++i) {
    const Block& b = row.blocks[i];
    std::size_t sub = 0;
    while (sub < free_from.size() && b.start_us < free_from[sub] - tolerance_us) ++sub;
    if (sub == free_from.size()) free_from.push_back(b.end_us);
    free_from[sub] = std::max(b.start_us, b.end_us);
    assigned[i] = sub;
  }
  if (free_from.size() <= 1) return {};
  std::vector<Row> sub_rows(free_from.size(), empty_like(row));
  for (std::size_t i = 0; i < row.blocks.size(); ++i) sub_rows[assigned[i]].blocks.push_back(row.blocks[i]);
  for (Row& sub : sub_rows) sub.fill_prefix_max_end();
  return sub_rows;
}

std::vector<Row> split_by_depth(const Row& row) {
  if (row.depths.empty() || row.depth_count <= 1) return {};
  std::vector<Row> sub_rows(static_cast<std::size_t>(row.depth_count), empty_like(row));
  for (std::size_t i = 0; i < row.blocks.size(); ++i) sub_rows[static_cast<std::size_t>(row.depth(i))].blocks.push_back(row.blocks[i]);
  for (Row& sub : sub_rows) sub.fill_prefix_max_end();
  return sub_rows;
}

Row merge_rows(const std::vector<const Row*>& rows) {
  Row out = rows.empty() ? Row{} : empty_like(*rows.front());
  out.lane = -1;
  std::size_t total = 0;
  for (const Row* r : rows) total += r->blocks.size();
  out.blocks.reserve(total);
  for (const Row* r : rows) {
    const auto middle = static_cast<std::ptrdiff_t>(out.blocks.size());
    out.blocks.insert(out.blocks.end(), r->blocks.begin(), r->blocks.end());
    // Each row is start-sorted already: merging keeps the cost linear per row.
    std::inplace_merge(out.blocks.begin(), out.blocks.begin() + middle, out.blocks.end(),
                       [](const Block& a, const Block& b) { return a.start_us < b.start_us; });
  }
  out.fill_prefix_max_end();
  return out;
}

}  // namespace pipescope::gui
