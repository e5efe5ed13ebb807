// The honest level of detail, widget-free. A row of [zero-length LOAD, 10 us F] pairs merged
// at any width is mostly forward (the LOAD weighs nothing); a 0.14 us I before a 50 us W never
// swallows the W: at 1 px per us the W is its own span, at 200 us per px the merged span is W.
// A 0.1 us op 900% late next to a 100 us op on time leaves the merge's error near 0 (time-
// weighted: 0.1 * 9 / 100.1 = 0.9%). Overlapping sends are dealt to two sub-rows, touching ones
// stay in one. Label colours read at WCAG 4.5:1 or better on every kind, chunk, merged and
// difference colour. Bytes are written in the unit of their magnitude; the memory range is the
// rank's own min..max (padded by a twentieth), with round ticks inside it.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "pipescope/gui/kinds.hpp"
#include "pipescope/gui/lane_detail.hpp"
#include "pipescope/gui/memory_scale.hpp"

using namespace pipescope::gui;

namespace {

Row row_of(const std::vector<std::tuple<double, double, Kind>>& blocks) {
  Row row;
  std::uint32_t event = 0;
  for (const auto& [start, duration, kind] : blocks) row.blocks.push_back({start, start + duration, event++, kind});
  row.prefix_max_end.resize(row.blocks.size());
  double running = -1e300;
  for (std::size_t i = 0; i < row.blocks.size(); ++i) row.prefix_max_end[i] = running = std::max(running, row.blocks[i].end_us);
  return row;
}

ViewState view_of(double start_us, double end_us, double width_px) {
  ViewState view;
  view.set_extent(1e9);
  view.set_width(width_px);
  view.set_visible(start_us, end_us);
  return view;
}

struct Painted {
  std::vector<LaneSpan> spans;
  std::vector<Kind> kinds;  // per span: its own kind, or the merge's dominant one
};

Painted paint(const Row& row, const RowTally& tally, const ViewState& view) {
  Painted out;
  visit_lane(row, tally, view, 3, [&](const LaneSpan& span) {
    out.spans.push_back(span);
    out.kinds.push_back(tally.mix(row, span.first, span.first + span.count).dominant_kind(row.blocks[span.first].kind));
  });
  return out;
}

}  // namespace

TEST_CASE("a merged span takes the kind that fills most of its time", "[lane_detail]") {
  std::vector<std::tuple<double, double, Kind>> blocks;
  for (int i = 0; i < 1000; ++i) {
    blocks.emplace_back(i * 12.0, 0.0, Kind::Other);  // LOAD
    blocks.emplace_back(i * 12.0, 10.0, Kind::Forward);
  }
  const Row row = row_of(blocks);
  const RowTally tally(row, {});
  // From the whole row (12,000 us on 800 px, everything merged) to a few pairs (F 40 px wide).
  for (const double span_us : {12000.0, 3000.0, 600.0, 200.0}) {
    const Painted painted = paint(row, tally, view_of(0, span_us, 800));
    REQUIRE_FALSE(painted.spans.empty());
    for (std::size_t i = 0; i < painted.spans.size(); ++i) {
      const LaneSpan& span = painted.spans[i];
      INFO("span of " << span_us << " us, block " << span.first);
      if (span.whole()) REQUIRE(row.blocks[span.first].kind == Kind::Forward);  // LOADs are never wide
      // A merge with a forward in it is forward; a lone LOAD (zero time) stays what it is.
      const bool has_forward = tally.mix(row, span.first, span.first + span.count).kind_us[0] > 0;
      if (has_forward) REQUIRE(painted.kinds[i] == Kind::Forward);
    }
  }
}

TEST_CASE("a wide block is never merged into its tiny neighbour", "[lane_detail]") {
  const Row row = row_of({{0, 0.14, Kind::BackwardInput}, {0.14, 50, Kind::BackwardWeight}, {60, 0.14, Kind::BackwardInput},
                          {60.14, 50, Kind::BackwardWeight}});
  const RowTally tally(row, {});
  // 1 px per us: each W is 50 px, on its own; the I before it merges alone.
  Painted close = paint(row, tally, view_of(0, 800, 800));
  int whole_w = 0;
  for (const auto& span : close.spans)
    if (span.whole()) {
      REQUIRE(row.blocks[span.first].kind == Kind::BackwardWeight);
      ++whole_w;
    }
  REQUIRE(whole_w == 2);
  // 1,000 us per px: everything merges, and the merge is W.
  const Painted far = paint(row, tally, view_of(0, 800000, 800));
  REQUIRE(far.spans.size() == 1);
  REQUIRE(far.kinds[0] == Kind::BackwardWeight);
}

TEST_CASE("first_wide finds a wide block among many narrow ones", "[lane_detail]") {
  std::vector<std::tuple<double, double, Kind>> blocks;
  for (int i = 0; i < 500; ++i) blocks.emplace_back(i * 1.0, i == 333 ? 40.0 : 0.5, Kind::Forward);
  const Row row = row_of(blocks);
  const RowTally tally(row, {});
  REQUIRE(tally.first_wide(row, 0, 500, 10) == 333);
  REQUIRE(tally.first_wide(row, 334, 500, 10) == 500);
  REQUIRE(tally.first_wide(row, 5, 20, 10) == 20);
  // Long runs are mixed from prefixes: the same sums as adding them up.
  const BlockMix mix = tally.mix(row, 3, 480);
  REQUIRE(mix.kind_us[0] == Approx(476 * 0.5 + 40));  // blocks 3..479, one of them 40 us
}

TEST_CASE("a tiny operation does not drive the difference shading of a merge", "[lane_detail]") {
  const Row row = row_of({{0, 0.1, Kind::BackwardInput}, {0.1, 100, Kind::BackwardWeight}, {200, 50, Kind::Forward}});
  const std::vector<double> errors = {9.0, 0.0, std::numeric_limits<double>::quiet_NaN()};
  const RowTally tally(row, [&](std::uint32_t event) { return errors[event]; });
  const BlockMix mix = tally.mix(row, 0, 2);
  REQUIRE(mix.mean_error() == Approx(0.9 / 100.1));
  REQUIRE(std::isnan(tally.mix(row, 2, 3).mean_error()));  // unmatched
  REQUIRE(tally.error(0) == Approx(9.0));
}

TEST_CASE("overlapping blocks of a lane go to sub-rows", "[lane_detail]") {
  const Row overlapping = row_of({{0, 100, Kind::Communication}, {50, 100, Kind::Communication}, {160, 10, Kind::Communication}});
  const auto sub_rows = stack_overlaps(overlapping);
  REQUIRE(sub_rows.size() == 2);
  REQUIRE(sub_rows[0].blocks.size() == 2);  // the first and the third (free again at 100)
  REQUIRE(sub_rows[1].blocks.size() == 1);
  REQUIRE(sub_rows[1].blocks[0].start_us == 50);
  REQUIRE(sub_rows[0].prefix_max_end.size() == 2);
  const Row touching = row_of({{0, 100, Kind::Forward}, {100, 0, Kind::Other}, {100, 50, Kind::Forward}});
  REQUIRE(stack_overlaps(touching).empty());
  // A rank's rows merged for the compact view: start-sorted, all blocks.
  const Row merged = merge_rows({&overlapping, &touching});
  REQUIRE(merged.blocks.size() == 6);
  for (std::size_t i = 1; i < merged.blocks.size(); ++i) REQUIRE(merged.blocks[i - 1].start_us <= merged.blocks[i].start_us);
}

TEST_CASE("labels read on every block colour", "[lane_detail][kinds]") {
  for (int k = 0; k < kKindCount; ++k)
    for (int chunk = 0; chunk < 4; ++chunk) {
      const std::uint32_t fill = chunk_rgb(kind_rgb(static_cast<Kind>(k)), chunk);
      INFO("kind " << k << ", chunk " << chunk);
      REQUIRE(contrast_ratio(fill, text_rgb_on(fill)) >= 4.5);
      REQUIRE(contrast_ratio(merged_rgb(fill), text_rgb_on(merged_rgb(fill))) >= 4.5);
      if (chunk > 0) REQUIRE(chunk_rgb(kind_rgb(static_cast<Kind>(k)), chunk) != kind_rgb(static_cast<Kind>(k)));
    }
  for (double error = -1; error <= 1; error += 0.05) REQUIRE(contrast_ratio(difference_rgb(error), text_rgb_on(difference_rgb(error))) >= 4.5);
  REQUIRE(text_rgb_on(kind_rgb(Kind::BackwardWeight)) == 0x000000);  // no white on yellow
  REQUIRE(contrast_ratio(0xffffff, 0x000000) == Approx(21));
}

TEST_CASE("bytes in the unit of their magnitude; memory scaled to its own range", "[lane_detail][memory]") {
  REQUIRE(format_bytes(300) == "300 B");
  REQUIRE(format_bytes(-1e-13) == "0 B");
  REQUIRE(format_bytes(1536) == "1.50 KiB");
  REQUIRE(format_bytes(12.5 * 1024 * 1024) == "12.5 MiB");
  REQUIRE(format_bytes(1.19 * 1024 * 1024 * 1024) == "1.19 GiB");
  REQUIRE(format_bytes(300LL << 30) == "300 GiB");

  const std::vector<pipescope::traces::MemorySample> a = {{0, 0, 1000}, {0, 10, 1500}}, b = {{0, 5, 1200}};
  const MemoryRange range = memory_range({&a, &b});
  REQUIRE(range.low_bytes == Approx(975));  // min 1000, max 1500, padded by 25
  REQUIRE(range.high_bytes == Approx(1525));
  const auto ticks = memory_ticks(range, 4);
  REQUIRE(ticks.size() >= 2);
  for (const double tick : ticks) {
    REQUIRE(tick >= range.low_bytes);
    REQUIRE(tick <= range.high_bytes);
  }
  const std::vector<pipescope::traces::MemorySample> flat = {{0, 0, 4096}};
  REQUIRE(memory_range({&flat}).span() > 0);
  std::int64_t bytes = 0;
  REQUIRE_FALSE(memory_at(a, -1, bytes));
  REQUIRE(memory_at(a, 5, bytes));
  REQUIRE(bytes == 1000);
  REQUIRE(memory_at(a, 10, bytes));
  REQUIRE(bytes == 1500);
}
