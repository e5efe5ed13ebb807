// The timeline's memory rows: each rank's curves (predicted dashed blue, measured solid
// orange) scaled to the rank's own range with an axis of round values, and the readout of
// the values under the mouse.
#include <QPainter>

#include <algorithm>

#include "pipescope/gui/time_ticks.hpp"
#include "timeline_paint_support.hpp"
#include "timeline_widget.hpp"

namespace pipescope::gui {

using namespace timeline_paint;

int TimelineWidget::memory_height() const { return kMemoryHeight; }

void TimelineWidget::paint_memory(QPainter& p, const RankLayout& rank) const {
  const int y = content_top() - scroll_offset() + rank.memory_y;
  if (y > content_bottom() || y + kMemoryHeight < content_top()) return;
  const int left = header_width();
  p.fillRect(QRect(left, y, time_area_width(), kMemoryHeight), rgb(0xfcfcfc));
  p.setPen(rgb(0xe0e0e0));
  p.drawLine(left, y + kMemoryHeight - 1, left + time_area_width(), y + kMemoryHeight - 1);
  const MemoryRange range = memory_ranges_[static_cast<std::size_t>(rank.rank)];
  const double bottom = y + kMemoryHeight - 4, usable = kMemoryHeight - 8;
  // Grid lines at the axis' values (their labels are in the header column).
  p.setPen(QColor(0, 0, 0, 28));
  for (const double tick : memory_ticks(range, 4)) {
    const double ty = std::round(bottom - range.fraction(tick) * usable);
    p.drawLine(QPointF(left, ty), QPointF(left + time_area_width(), ty));
  }
  auto to_y = [&](double bytes) { return std::round(bottom - std::clamp(range.fraction(bytes), 0.0, 1.0) * usable); };
  for (int s = 0; s < model_->series_count(); ++s) {
    const auto& samples = model_->memory(s, rank.rank);
    if (samples.empty()) continue;
    // One step per pixel column: the value held at the column's time (binary search), so a
    // million samples cost as much as a few hundred.
    // Columns at the height of the one before add no point: the step runs on.
    QPolygonF curve;
    curve.reserve(2 * time_area_width() + 4);
    double previous_y = bottom;
    int previous_x = 0;
    bool started = false;
    const auto after = [](double v, const traces::MemorySample& m) { return v < m.ts_us; };
    auto it = std::upper_bound(samples.begin(), samples.end(), view_.x_to_time(0), after);
    for (int x = 0; x <= time_area_width(); ++x) {
      const double t = view_.x_to_time(x);
      // Columns go left to right: search forward from the last one in growing steps.
      std::size_t step = 1;
      auto low = it;
      while (samples.end() - low > static_cast<std::ptrdiff_t>(step) && !(t < (low + static_cast<std::ptrdiff_t>(step))->ts_us)) {
        low += static_cast<std::ptrdiff_t>(step);
        step *= 2;
      }
      it = std::upper_bound(low, samples.end() - low > static_cast<std::ptrdiff_t>(step) ? low + static_cast<std::ptrdiff_t>(step) + 1 : samples.end(), t, after);
      const double t_next = view_.x_to_time(x + 1);
      // Before the first sample nothing is known: the curve starts where the samples do.
      if (it == samples.begin() && !(samples.front().ts_us < t_next)) continue;
      // The highest value inside this column: the one held at its start, and the samples
      // taken within it (exactly, by block maxima, however many).
      double value = it == samples.begin() ? static_cast<double>(samples.front().bytes) : static_cast<double>((it - 1)->bytes);
      auto column_end = it;
      while (column_end != samples.end() && column_end->ts_us < t_next && column_end - it < 8) ++column_end;
      if (column_end != samples.end() && column_end->ts_us < t_next)
        column_end = std::lower_bound(column_end, samples.end(), t_next, [](const traces::MemorySample& m, double v) { return m.ts_us < v; });
      if (column_end != it)
        value = std::max(value, static_cast<double>(model_->memory_max_bytes(s, rank.rank, static_cast<std::size_t>(it - samples.begin()),
                                                                              static_cast<std::size_t>(column_end - samples.begin()))));
      const double py = to_y(value);
      if (started && py == previous_y) continue;
      if (started) curve << QPointF(left + x, previous_y);
      curve << QPointF(left + x, py);
      previous_y = py;
      previous_x = x;
      started = true;
    }
    if (started && previous_x < time_area_width()) curve << QPointF(left + time_area_width(), previous_y);
    p.setPen(memory_pen(s, model_->series_count()));
    p.drawPolyline(curve);
  }
}

// The axis in the header column: "memory" and the values of the grid lines.
void TimelineWidget::paint_memory_axis(QPainter& p, const RankLayout& rank) const {
  const int y = content_top() - scroll_offset() + rank.memory_y;
  if (y > content_bottom() || y + kMemoryHeight < content_top()) return;
  const MemoryRange range = memory_ranges_[static_cast<std::size_t>(rank.rank)];
  const double bottom = y + kMemoryHeight - 4, usable = kMemoryHeight - 8;
  p.setPen(rgb(0x303030));
  draw_text(p, QRect(14, y, header_width() / 2, 16), Qt::AlignTop | Qt::AlignLeft, "memory");
  p.setPen(rgb(0x505050));
  const int right = header_width() - 4;
  for (const double tick : memory_ticks(range, 4)) {
    const int ty = static_cast<int>(std::round(bottom - range.fraction(tick) * usable));
    p.drawLine(right - 3, ty, right, ty);
    draw_text(p, QRect(header_width() / 3, ty - 7, right - 5 - header_width() / 3, 14), Qt::AlignVCenter | Qt::AlignRight,
              bytes_text(tick));
  }
}

QString TimelineWidget::memory_readout(QPoint position) const {
  if (!model_ || position.x() < header_width()) return {};
  for (const auto& r : ranks_) {
    if (r.memory_y < 0 || !memory_rect(r.rank).contains(position)) continue;
    const double t = view_.x_to_time(position.x() - header_width());
    QString text = QString::fromStdString(model_->rank_name(r.rank)) + " memory at " + QString::fromStdString(format_duration_us(t));
    for (int s = 0; s < model_->series_count(); ++s) {
      std::int64_t bytes = 0;
      if (!memory_at(model_->memory(s, r.rank), t, bytes)) continue;
      text += "\n" + QString::fromStdString(model_->series_name(s)) + ": " + bytes_text(static_cast<double>(bytes));
    }
    return text;
  }
  return {};
}

}  // namespace pipescope::gui
