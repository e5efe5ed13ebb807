// The timeline's state and commands: the model shown, the view toggles (the critical path's
// rows built when first shown), compact and collapsed ranks, zoom, the selected event and
// range. Layout, painting and interaction are in timeline_layout.cpp, timeline_painting.cpp,
// timeline_overlays.cpp (arrows, the critical path), timeline_lanes.cpp, timeline_headers.cpp,
// timeline_memory.cpp, timeline_counters.cpp and timeline_interaction.cpp.
#include "timeline_widget.hpp"

#include <QScrollBar>

#include <algorithm>

#include "timeline_paint_support.hpp"

namespace pipescope::gui {

using namespace timeline_paint;

TimelineWidget::TimelineWidget(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setFocusPolicy(Qt::StrongFocus);
  setMinimumSize(480, 240);
  setAttribute(Qt::WA_OpaquePaintEvent);
  scroll_ = new QScrollBar(Qt::Vertical, this);
  connect(scroll_, &QScrollBar::valueChanged, this, [this] { update(); });
}

void TimelineWidget::set_model(std::shared_ptr<const TimelineModel> model) {
  model_ = std::move(model);
  selected_.reset();
  range_.reset();
  critical_path_.clear();
  critical_rows_.clear();
  overview_density_.clear();
  overview_image_ = QImage();
  compact_rows_.clear();
  if (model_ && !model_->empty()) {
    for (int s = 0; s < model_->series_count(); ++s) overview_density_.push_back(model_->overview_density(s, 1024));
    view_.set_extent(model_->end_us() * 1.01);
  }
  has_all_to_all_ = model_ && std::any_of(model_->rows().begin(), model_->rows().end(), [](const Row& row) {
                      return row.lane == static_cast<int>(traces::Lane::AllToAll) ||
                             (row.lane == static_cast<int>(traces::Lane::Collective) &&
                              std::any_of(row.blocks.begin(), row.blocks.end(),
                                          [](const Block& b) { return is_all_to_all(b.kind); }));
                    });
  build_painted_lanes();
  // Many ranks open compact: one row each, so they fit on the screen.
  collapsed_.assign(model_ ? static_cast<std::size_t>(model_->rank_count()) : 0u,
                    model_ && model_->rank_count() >= kCompactFromRanks);
  if (show_critical_path_) set_show_critical_path(true);
  relayout();
  update();
}

void TimelineWidget::set_show_difference(bool on) {
  show_difference_ = on;
  relayout();  // the legend's entries, and so its height, follow
  update();
}

void TimelineWidget::set_show_flows(bool on) {
  show_flows_ = on;
  update();
}

void TimelineWidget::set_show_critical_path(bool on) {
  show_critical_path_ = on;
  relayout();  // the legend gains an entry
  // Computed once per model, when first shown; repaints only read it.
  if (on && model_ && critical_path_.empty()) {
    const auto& rows = model_->rows();
    critical_rows_.assign(rows.size(), Row{});
    for (int s = 0; s < model_->series_count(); ++s) {
      critical_path_.push_back(model_->critical_path(s));
      const auto& events = model_->trace(s).events;
      for (const std::size_t i : critical_path_.back()) {
        const auto& e = events[i];
        const Row* row = model_->row(e.rank, s, e.lane);
        if (!row) continue;
        Row& path_row = critical_rows_[static_cast<std::size_t>(row - rows.data())];
        path_row.blocks.push_back({e.ts_us, e.end_us(), static_cast<std::uint32_t>(i)});
      }
    }
    for (Row& row : critical_rows_) {
      std::stable_sort(row.blocks.begin(), row.blocks.end(),
                       [](const Block& a, const Block& b) { return a.start_us < b.start_us; });
      row.fill_prefix_max_end();
    }
  }
  update();
}

void TimelineWidget::set_compact(bool on) {
  std::fill(collapsed_.begin(), collapsed_.end(), on);
  relayout();
  update();
}

bool TimelineWidget::compact() const {
  return !collapsed_.empty() && std::all_of(collapsed_.begin(), collapsed_.end(), [](char c) { return c != 0; });
}

void TimelineWidget::set_rank_collapsed(int rank, bool collapsed) {
  if (rank < 0 || rank >= static_cast<int>(collapsed_.size())) return;
  collapsed_[static_cast<std::size_t>(rank)] = collapsed;
  relayout();
  update();
}

bool TimelineWidget::rank_collapsed(int rank) const {
  return rank >= 0 && rank < static_cast<int>(collapsed_.size()) && collapsed_[static_cast<std::size_t>(rank)];
}

QString TimelineWidget::help_text() {
  return "Wheel: zoom around the cursor. Wheel over the rank names, or Shift+wheel: scroll up and down.\n"
         "Drag: pan. Shift+drag or right-drag: select a time range; double-click it or Z: zoom to it.\n"
         "W/S: zoom in/out, A/D: pan, 0 or Home: show all, Esc: clear the selection.\n"
         "Click a rank's name: collapse it to one row or expand it. C: compact view (every rank one row) on/off.\n"
         "Merged blocks (too narrow to draw one by one) are darker and take the colour of the kind that fills most of "
         "their time.\n"
         "Labels: operation, micro-batch and, on ranks holding several stages, chunk (F3.c1); chunk 1 is lighter, "
         "chunk 2 darker.";
}

void TimelineWidget::zoom_to(double start_us, double end_us) {
  view_.set_visible(start_us, end_us);
  update();
}

void TimelineWidget::show_all() {
  view_.show_all();
  update();
}

void TimelineWidget::select_event(int series, std::size_t event, bool center) {
  if (!model_ || series >= model_->series_count() || event >= model_->trace(series).events.size()) return;
  selected_ = {series, event};
  const auto& e = model_->trace(series).events[event];
  if (center) {
    if (e.dur_us > view_.span_us() * 0.8) view_.set_visible(e.ts_us - e.dur_us * 0.5, e.end_us() + e.dur_us * 0.5);
    view_.center_on(e.ts_us + e.dur_us / 2);
    // Scroll the lane into view.
    for (const auto& l : lanes_)
      if (l.rank == e.rank && l.series == series && l.lane == e.lane) {
        const int visible = content_bottom() - content_top();
        if (l.y < scroll_offset() || l.y + l.height > scroll_offset() + visible) scroll_->setValue(l.y - visible / 3);
      }
  }
  emit event_clicked(series, static_cast<qulonglong>(event));
  update();
}

void TimelineWidget::set_selection_range(double start_us, double end_us) {
  range_ = {std::min(start_us, end_us), std::max(start_us, end_us)};
  emit range_selected(range_->first, range_->second);
  update();
}

void TimelineWidget::clear_selection_range() {
  range_.reset();
  update();
}

void TimelineWidget::zoom_to_selection() {
  // The selection becomes the view, and goes away so it does not tint everything.
  if (!range_ || !(range_->second > range_->first)) return;
  const auto [start, end] = *range_;
  range_.reset();
  zoom_to(start, end);
}

}  // namespace pipescope::gui
