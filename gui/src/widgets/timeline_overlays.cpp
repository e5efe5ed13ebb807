// What the timeline draws over its lanes: the send/receive arrows (all shafts in one call,
// a notice instead of a grey wash past kMaxArrows) and the critical path (boxes folded per
// pixel like the blocks, hops between lanes only while they can be told apart).
#include <QPainter>
#include <QPainterPath>

#include <algorithm>
#include <cmath>

#include "pipescope/gui/kinds.hpp"
#include "timeline_paint_support.hpp"
#include "timeline_widget.hpp"

namespace pipescope::gui {

using namespace timeline_paint;

void TimelineWidget::paint_flows(QPainter& p) const {
  const double t0 = view_.visible_start_us(), t1 = view_.visible_end_us();
  // Beyond this many arrows in view they are a grey wash: say so instead of drawing them.
  constexpr int kMaxArrows = 3000;
  std::vector<std::pair<int, const traces::Flow*>> visible;
  for (int s = 0; s < model_->series_count(); ++s) {
    const auto& flows = model_->flows_by_start(s);
    auto it = std::lower_bound(flows.begin(), flows.end(), t0 - model_->longest_flow_us(s),
                               [](const traces::Flow& f, double t) { return f.from_ts_us < t; });
    for (; it != flows.end() && it->from_ts_us <= t1; ++it) {
      if (std::max(it->from_ts_us, it->to_ts_us) < t0) continue;
      visible.emplace_back(s, &*it);
      if (static_cast<int>(visible.size()) > kMaxArrows) break;
    }
  }
  if (static_cast<int>(visible.size()) > kMaxArrows) {
    p.setPen(QColor(60, 60, 60));
    p.drawText(QRect(header_width() + 8, content_top() + 2, 600, 16), Qt::AlignLeft | Qt::AlignTop,
               "more than 3000 send/receive arrows in view: zoom in to see them");
    return;
  }
  // All shafts in one call and all heads in one path: one setup for thousands of arrows.
  // Past a few hundred arrows they are drawn plainly (aliased, heads as two strokes):
  // smoothing costs more per arrow than the rest of the repaint and is not seen in a crowd.
  constexpr std::size_t kMaxSmoothArrows = 300;
  const bool smooth = visible.size() <= kMaxSmoothArrows;
  std::vector<QLineF> shafts;
  shafts.reserve(visible.size() * (smooth ? 1 : 3));
  QPainterPath heads;
  for (const auto& [s, f] : visible) {
    const QRect from = lane_rect(f->from_rank, s, f->from_lane), to = lane_rect(f->to_rank, s, f->to_lane);
    if (from.isEmpty() || to.isEmpty()) continue;
    const QPointF a(header_width() + view_.time_to_x(f->from_ts_us), from.center().y());
    const QPointF b(header_width() + view_.time_to_x(f->to_ts_us), to.center().y());
    shafts.emplace_back(a, b);
    const double angle = std::atan2(b.y() - a.y(), b.x() - a.x());
    const QPointF left_wing = b - QPointF(std::cos(angle - 0.4) * 7, std::sin(angle - 0.4) * 7);
    const QPointF right_wing = b - QPointF(std::cos(angle + 0.4) * 7, std::sin(angle + 0.4) * 7);
    if (smooth) {
      heads.moveTo(b);
      heads.lineTo(left_wing);
      heads.lineTo(right_wing);
      heads.closeSubpath();
    } else {
      shafts.emplace_back(b, left_wing);
      shafts.emplace_back(b, right_wing);
    }
  }
  p.setRenderHint(QPainter::Antialiasing, smooth);
  p.setPen(QPen(QColor(60, 60, 60, 170), 1));
  p.drawLines(shafts.data(), static_cast<int>(shafts.size()));
  if (smooth) p.fillPath(heads, QColor(60, 60, 60, 200));
  p.setRenderHint(QPainter::Antialiasing, false);
}

void TimelineWidget::paint_critical_path(QPainter& p) const {
  const QColor color = rgb(kCriticalPathRgb);
  const int top = content_top() - scroll_offset();
  const auto& rows = model_->rows();
  // Boxes narrower than their outlines are solid: those go into a one-pixel strip per lane,
  // drawn stretched in one call (as the folded blocks in paint_lanes).
  const int width_px = time_area_width();
  std::vector<std::uint32_t> strip(static_cast<std::size_t>(width_px), 0u), strip_block;
  // The boxes, per lane, folded per pixel like the blocks: a repaint costs the pixels of the
  // visible lanes, not the steps of the path.
  for (const auto& l : lanes_) {
    const int y = top + l.y;
    if (y > content_bottom() || y + l.height < content_top()) continue;
    const Row* row = model_->row(l.rank, l.series, l.lane);
    if (!row) continue;
    const auto index = static_cast<std::size_t>(row - rows.data());
    if (index >= critical_rows_.size() || critical_rows_[index].blocks.empty()) continue;
    bool strip_used = false;
    visit_visible(critical_rows_[index], view_, kMinBlockPx, [&](const Span& span) {
      const double x0 = std::max(span.x0, -10.0), x1 = std::min(span.x1, width_px + 10.0);
      if (x1 - x0 < 8) {
        const int from = std::clamp(pixel(x0), 0, width_px - 1);
        const int to = std::clamp(pixel(std::max(x1, x0 + 2)), from + 1, width_px);
        std::fill(strip.begin() + from, strip.begin() + to, 0xff000000u | kCriticalPathRgb);
        strip_used = true;
        return;
      }
      outline(p, pixel_rect(header_width() + x0, y + 1, header_width() + std::max(x1, x0 + 2), y + l.height - 1), color,
              2);
    });
    if (strip_used) draw_strip(p, strip, strip_block, header_width(), y + 1, l.height - 2);
  }
  // The hops between lanes, when there are fewer steps in view than pixel pairs; with more
  // they are a solid smear and only the boxes are drawn.
  p.setPen(QPen(color, 2));
  p.setBrush(Qt::NoBrush);
  const double t0 = view_.visible_start_us(), t1 = view_.visible_end_us();
  for (int s = 0; s < static_cast<int>(critical_path_.size()); ++s) {
    const auto& events = model_->trace(s).events;
    const auto& path = critical_path_[s];
    // The path is in time order: start one step before the first event that reaches the view.
    auto first =
        std::lower_bound(path.begin(), path.end(), t0, [&](std::size_t i, double t) { return events[i].end_us() < t; });
    if (first != path.begin()) --first;
    auto last = std::upper_bound(first, path.end(), t1, [&](double t, std::size_t i) { return t < events[i].ts_us; });
    if (last != path.end()) ++last;
    if ((last - first) > time_area_width() / 2) continue;
    QPointF previous;
    bool have_previous = false;
    for (auto it = first; it != last; ++it) {
      const auto& e = events[*it];
      const QRect lane = lane_rect(e.rank, s, e.lane);
      if (lane.isEmpty()) continue;
      const double x0 = header_width() + std::max(-10.0, view_.time_to_x(e.ts_us));
      const double x1 = header_width() + std::min(time_area_width() + 10.0, view_.time_to_x(e.end_us()));
      const QPointF start(x0, lane.center().y());
      if (have_previous && std::fabs(previous.y() - start.y()) > 1) p.drawLine(previous, start);
      previous = QPointF(x1, lane.center().y());
      have_previous = true;
    }
  }
}

}  // namespace pipescope::gui
