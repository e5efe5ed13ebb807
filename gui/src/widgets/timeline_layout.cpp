// The timeline's layout: the areas of the widget (overview, ruler, rank headers, legend), and
// each rank's rows stacked top to bottom (its lanes per series, or one compact row per series
// when collapsed, then its memory and counter rows), with the scroll bar sized to them.
#include <QScrollBar>

#include <algorithm>

#include "timeline_paint_support.hpp"
#include "timeline_widget.hpp"

namespace pipescope::gui {

using namespace timeline_paint;

int TimelineWidget::header_width() const { return width() >= 1200 ? 200 : 150; }

int TimelineWidget::time_area_left() const { return header_width(); }
int TimelineWidget::time_area_width() const { return std::max(1, width() - header_width() - kScrollWidth); }
QRect TimelineWidget::overview_rect() const { return QRect(header_width(), 0, time_area_width(), kOverviewHeight); }
QRect TimelineWidget::ruler_rect() const {
  return QRect(header_width(), kOverviewHeight, time_area_width(), kRulerHeight);
}
QRect TimelineWidget::legend_rect() const { return QRect(0, height() - legend_height(), width(), legend_height()); }
int TimelineWidget::content_top() const { return kOverviewHeight + kRulerHeight; }
int TimelineWidget::content_bottom() const { return height() - legend_height(); }
int TimelineWidget::scroll_offset() const { return scroll_->value(); }

int TimelineWidget::lane_layout_index(int rank, int series, int lane) const {
  if (!model_ || rank < 0 || rank >= model_->rank_count() || series < 0 || series >= model_->series_count() || lane < 0)
    return -1;
  const std::size_t slot = static_cast<std::size_t>(rank) * static_cast<std::size_t>(model_->series_count()) +
                           static_cast<std::size_t>(series);
  if (slot + 1 >= first_lane_.size()) return -1;
  const auto first = lanes_.begin() + first_lane_[slot], last = lanes_.begin() + first_lane_[slot + 1];
  if (first == last) return -1;
  if (first->lane < 0) {
    // A collapsed rank: every lane of it is found in its compact row (arrows, the path).
    const auto rows = model_->rank_rows(rank, series);
    return !rows.empty() && lane <= rows.back().lane ? static_cast<int>(first - lanes_.begin()) : -1;
  }
  const auto it = std::lower_bound(first, last, lane, [](const LaneLayout& l, int wanted) { return l.lane < wanted; });
  return it != last && it->lane == lane ? static_cast<int>(it - lanes_.begin()) : -1;
}

QRect TimelineWidget::lane_rect(int rank, int series, int lane) const {
  const int index = lane_layout_index(rank, series, lane);
  if (index < 0) return {};
  const LaneLayout& l = lanes_[index];
  return QRect(header_width(), content_top() + l.y - scroll_offset(), time_area_width(), l.height);
}

QRect TimelineWidget::memory_rect(int rank) const {
  for (const auto& r : ranks_)
    if (r.rank == rank && r.memory_y >= 0)
      return QRect(header_width(), content_top() + r.memory_y - scroll_offset(), time_area_width(), kMemoryHeight);
  return {};
}

QRect TimelineWidget::rank_label_rect(int rank) const {
  for (const auto& r : ranks_)
    if (r.rank == rank) return QRect(0, content_top() + r.header_y - scroll_offset(), header_width(), r.header_height);
  return {};
}

int TimelineWidget::lane_sub_rows(int rank, int series, int lane) const {
  const Row* row = model_ ? model_->row(rank, series, lane) : nullptr;
  if (!row) return 0;
  const auto& painted = painted_[static_cast<std::size_t>(row - model_->rows().data())];
  return painted.sub_rows.empty() ? 1 : static_cast<int>(painted.sub_rows.size());
}

void TimelineWidget::relayout() {
  legend_height_ = measure_legend_height();
  lanes_.clear();
  ranks_.clear();
  int y = 0;
  if (model_) {
    if (collapsed_.size() != static_cast<std::size_t>(model_->rank_count()))
      collapsed_.assign(static_cast<std::size_t>(model_->rank_count()), 0);
    for (int r = 0; r < model_->rank_count(); ++r) {
      RankLayout rank{r, y, kRankHeaderHeight, -1, collapsed_[static_cast<std::size_t>(r)] != 0};
      if (rank.collapsed) {
        // One row per series, its lanes merged (compact_row); the rank's name sits beside it.
        for (int s = 0; s < model_->series_count(); ++s) {
          lanes_.push_back({r, s, -1, y, kCompactSeriesHeight});
          y += kCompactSeriesHeight;
        }
        rank.header_height = y - rank.header_y;
        ranks_.push_back(rank);
        y += kCollapsedRankGap;
        continue;
      }
      y += kRankHeaderHeight;
      for (int s = 0; s < model_->series_count(); ++s) {
        bool any = false;
        for (const Row& row : model_->rank_rows(r, s)) {
          // Lanes a series never uses stay hidden (the other series may use them).
          if (row.blocks.empty()) continue;
          const int sub_rows = lane_sub_rows(r, s, row.lane);
          const int height = sub_rows <= 1 ? kLaneHeight : std::min(kMaxLaneHeight, 2 + sub_rows * kSubRowHeight);
          lanes_.push_back({r, s, row.lane, y, height});
          y += height;
          any = true;
        }
        if (any) y += kSeriesGap;
      }
      bool has_memory = false;
      for (int s = 0; s < model_->series_count(); ++s) has_memory |= !model_->memory(s, r).empty();
      if (has_memory) {
        rank.memory_y = y;
        y += kMemoryHeight;
      }
      bool has_counters = false;
      for (int s = 0; s < model_->series_count(); ++s) has_counters |= !model_->rank_counter_tracks(s, r).empty();
      if (has_counters) {
        rank.counter_y = y;
        y += kCounterHeight;
      }
      ranks_.push_back(rank);
      y += kRankGap;
    }
  }
  content_height_ = y;
  // lanes_ are in rank, then series order: each (rank, series) starts where the previous ends.
  first_lane_.clear();
  if (model_) {
    const std::size_t slot_count =
        static_cast<std::size_t>(model_->rank_count()) * static_cast<std::size_t>(model_->series_count());
    first_lane_.assign(slot_count + 1, static_cast<int>(lanes_.size()));
    for (std::size_t i = lanes_.size(); i-- > 0;)
      first_lane_[static_cast<std::size_t>(lanes_[i].rank) * static_cast<std::size_t>(model_->series_count()) +
                  static_cast<std::size_t>(lanes_[i].series)] = static_cast<int>(i);
    // A (rank, series) without lanes starts where the next one does.
    for (std::size_t k = slot_count; k-- > 0;) first_lane_[k] = std::min(first_lane_[k], first_lane_[k + 1]);
  }
  const int visible = std::max(0, content_bottom() - content_top());
  scroll_->setGeometry(width() - kScrollWidth, content_top(), kScrollWidth, visible);
  scroll_->setRange(0, std::max(0, content_height_ - visible));
  scroll_->setPageStep(visible);
  scroll_->setSingleStep(kLaneHeight);
  view_.set_width(time_area_width());
}

void TimelineWidget::resizeEvent(QResizeEvent*) {
  overview_image_ = QImage();
  const double start = view_.visible_start_us(), end = view_.visible_end_us();
  relayout();
  view_.set_visible(start, end);
}

}  // namespace pipescope::gui
