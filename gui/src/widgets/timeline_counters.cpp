// The timeline's counter rows: a plain trace's counters ("ph": "C" other than memory) of a
// rank, each a step line scaled to its own range (counters of different units share the
// row), named with that range at the row's left.
#include <QPainter>

#include <algorithm>

#include "timeline_paint_support.hpp"
#include "timeline_widget.hpp"

namespace pipescope::gui {

using namespace timeline_paint;

QRect TimelineWidget::counter_rect(int rank) const {
  for (const auto& r : ranks_)
    if (r.rank == rank && r.counter_y >= 0)
      return QRect(header_width(), content_top() - scroll_offset() + r.counter_y, time_area_width(), kCounterHeight);
  return {};
}

void TimelineWidget::paint_counters(QPainter& p, const RankLayout& rank) const {
  const QRect area = counter_rect(rank.rank);
  if (area.top() > content_bottom() || area.bottom() < content_top()) return;
  p.fillRect(area, rgb(0xfcfcfc));
  p.setPen(rgb(0xe0e0e0));
  p.drawLine(area.left(), area.bottom(), area.right(), area.bottom());
  const double bottom = area.bottom() - 3, usable = area.height() - 8;
  QFont small = font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() - 1.5));
  p.setFont(small);
  int label_y = area.top() + 2;
  for (int s = 0; s < model_->series_count(); ++s) {
    for (const CounterTrack& track : model_->rank_counter_tracks(s, rank.rank)) {
      if (track.samples.empty()) continue;
      const double range = track.max_value - track.min_value;
      auto to_y = [&](double value) { return bottom - (range > 0 ? (value - track.min_value) / range : 0.5) * usable; };
      // Only the samples in view, and the one held when the view starts: a step holds its
      // value until the next sample.
      const auto before = [](const traces::CounterSample& c, double t) { return c.ts_us < t; };
      auto it = std::lower_bound(track.samples.begin(), track.samples.end(), view_.visible_start_us(), before);
      if (it != track.samples.begin()) --it;
      QPolygonF line;
      for (; it != track.samples.end(); ++it) {
        const double x = area.left() + std::max(-2.0, view_.time_to_x(it->ts_us));
        if (!line.isEmpty()) line << QPointF(x, line.back().y());
        line << QPointF(x, to_y(it->value));
        if (it->ts_us > view_.visible_end_us()) break;
      }
      if (line.back().x() < area.right()) line << QPointF(area.right(), line.back().y());
      const QColor colour = rgb(name_rgb(track.name));
      p.setPen(QPen(colour, 2));
      p.drawPolyline(line);
      p.setPen(colour.darker(160));
      p.drawText(QPoint(area.left() + 4, label_y + p.fontMetrics().ascent()),
                 QString::fromStdString(track.name) + "  " + QString::number(track.min_value) + ".." + QString::number(track.max_value));
      label_y += p.fontMetrics().height();
    }
  }
  p.setFont(font());
}

}  // namespace pipescope::gui
