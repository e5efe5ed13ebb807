// The timeline's repaint: the order of its layers (lanes, memory and counters, the critical
// path and arrows, the selected range, headers, then overview, ruler and legend), the overview
// strip and the time ruler, and text laid out once and cached.
#include <QPaintEvent>
#include <QPainter>
#include <QStaticText>

#include <algorithm>

#include "pipescope/gui/time_ticks.hpp"
#include "timeline_paint_support.hpp"
#include "timeline_widget.hpp"

namespace pipescope::gui {

using namespace timeline_paint;

const QStaticText& TimelineWidget::static_text(const QString& text, const QFont& font) const {
  // The viewer uses one family; size and weight tell its fonts apart (QFont::key() is dear).
  const QString key = QString::number(font.pointSizeF()) + (font.bold() ? u'b' : u'r') + text;
  auto cached = label_cache_.find(key);
  if (cached == label_cache_.end()) {
    if (label_cache_.size() > 20000) label_cache_.clear();
    cached = label_cache_.insert(key, QStaticText(text));
    cached->setTextFormat(Qt::PlainText);
    cached->prepare(QTransform(), font);
  }
  return *cached;
}

// drawText(rect, flags, text) lays the text out on every call; the cached static text does
// it once. Text wider than its box is left to drawText, which clips it.
void TimelineWidget::draw_text(QPainter& p, const QRect& box, Qt::Alignment align, const QString& text) const {
  const QStaticText& laid_out = static_text(text, p.font());
  const QSizeF size = laid_out.size();
  if (size.width() > box.width() || size.height() > box.height() || !(align & (Qt::AlignLeft | Qt::AlignHCenter))) {
    p.drawText(box, static_cast<int>(align), text);
    return;
  }
  const double x = align & Qt::AlignHCenter ? box.left() + (box.width() - size.width()) / 2 : box.left();
  const double y = align & Qt::AlignVCenter ? box.top() + (box.height() - size.height()) / 2 : box.top();
  p.drawStaticText(QPointF(x, y), laid_out);
}

void TimelineWidget::paintEvent(QPaintEvent* event) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  if (!model_ || model_->empty()) {
    p.setPen(Qt::darkGray);
    p.drawText(rect(), Qt::AlignCenter,
               "Open a trace (File > Open, drag and drop, or ppview TRACE [TRACE]).\n"
               "Two traces: the first is the prediction, the second the measurement.");
    return;
  }
  view_.set_width(time_area_width());
  p.save();
  p.setClipRect(QRect(0, content_top(), width() - kScrollWidth, content_bottom() - content_top()));
  paint_lanes(p, event->rect());
  for (const auto& r : ranks_) {
    if (r.memory_y >= 0) paint_memory(p, r);
    if (r.counter_y >= 0) paint_counters(p, r);
  }
  if (show_critical_path_) paint_critical_path(p);
  if (show_flows_) paint_flows(p);
  if (range_) {
    const double x0 = header_width() + view_.time_to_x(range_->first),
                 x1 = header_width() + view_.time_to_x(range_->second);
    p.fillRect(QRectF(x0, content_top(), std::max(1.0, x1 - x0), content_bottom() - content_top()),
               QColor(30, 100, 220, 40));
    p.setPen(QColor(30, 100, 220));
    p.drawLine(QPointF(x0, content_top()), QPointF(x0, content_bottom()));
    p.drawLine(QPointF(x1, content_top()), QPointF(x1, content_bottom()));
  }
  paint_headers(p);
  p.restore();
  paint_overview(p);
  paint_ruler(p);
  paint_legend(p);
}

void TimelineWidget::paint_overview(QPainter& p) const {
  const QRect area = overview_rect();
  p.fillRect(QRect(0, 0, width(), kOverviewHeight), rgb(0xf4f4f4));
  p.setPen(Qt::darkGray);
  draw_text(p, QRect(6, 0, header_width() - 12, kOverviewHeight), Qt::AlignVCenter | Qt::AlignLeft,
            "overview (busy share)");
  // The bars depend on the model and the size only: drawn once into an image.
  if (overview_image_.size() != area.size()) {
    overview_image_ = QImage(area.size(), QImage::Format_ARGB32_Premultiplied);
    overview_image_.fill(Qt::transparent);
    QPainter bars(&overview_image_);
    const int series = static_cast<int>(overview_density_.size());
    const double band = static_cast<double>(area.height() - 4) / std::max(series, 1);
    for (int s = 0; s < series; ++s) {
      const auto& density = overview_density_[s];
      const double full_x = view_.extent_us() > 0 ? model_->end_us() / view_.extent_us() * area.width() : area.width();
      const double bin_px = full_x / density.size();
      QColor color = s == 0 ? rgb(0x4e79a7) : rgb(0xf28e2b);
      for (std::size_t b = 0; b < density.size(); ++b) {
        const double h = density[b] * (band - 1);
        bars.fillRect(QRectF(b * bin_px, 2 + band * (s + 1) - h, std::max(1.0, bin_px), h), color);
      }
    }
  }
  p.drawImage(area.topLeft(), overview_image_);
  // The visible part of the iteration.
  const double scale = area.width() / view_.extent_us();
  const QRectF window(area.left() + view_.visible_start_us() * scale, area.top() + 1,
                      std::max(2.0, view_.span_us() * scale), area.height() - 2);
  p.setPen(QPen(QColor(20, 20, 20), 1.5));
  p.setBrush(QColor(0, 0, 0, 25));
  p.drawRect(window);
  p.setBrush(Qt::NoBrush);
}

void TimelineWidget::paint_ruler(QPainter& p) const {
  const QRect area = ruler_rect();
  p.fillRect(QRect(0, area.top(), width(), area.height()), rgb(0xfafafa));
  p.setPen(rgb(0xc8c8c8));
  p.drawLine(0, area.bottom(), width(), area.bottom());
  const auto ticks = time_ticks(view_.visible_start_us(), view_.visible_end_us(), area.width(), 90);
  for (const auto& tick : ticks) {
    const double x = area.left() + view_.time_to_x(tick.t_us);
    p.setPen(rgb(0x707070));
    p.drawLine(QPointF(x, area.bottom() - 6), QPointF(x, area.bottom()));
    p.drawStaticText(QPointF(x + 3, area.top() + 2), static_text(QString::fromStdString(tick.label), p.font()));
    p.setPen(QColor(0, 0, 0, 22));
    p.drawLine(QPointF(x, content_top()), QPointF(x, content_bottom()));
  }
  if (range_) {
    const QString text = "selection " + QString::fromStdString(format_duration_us(range_->second - range_->first));
    p.setPen(QColor(30, 100, 220));
    draw_text(p, QRect(6, area.top(), header_width() - 12, area.height()), Qt::AlignVCenter | Qt::AlignLeft, text);
  }
}

}  // namespace pipescope::gui
