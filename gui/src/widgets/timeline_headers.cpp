// The timeline's header column and legend: rank names (every few for collapsed ranks, so they
// never overlap), per-rank summaries, lane names, the memory axes, and the legend wrapped onto
// as many lines as the width needs.
#include <QFontMetrics>
#include <QPainter>
#include <QStaticText>

#include <algorithm>
#include <cmath>

#include "pipescope/gui/kinds.hpp"
#include "timeline_paint_support.hpp"
#include "timeline_widget.hpp"

namespace pipescope::gui {

using namespace timeline_paint;

void TimelineWidget::paint_headers(QPainter& p) const {
  const int top = content_top() - scroll_offset();
  p.fillRect(QRect(0, content_top(), header_width(), content_bottom() - content_top()), rgb(0xfafafa));
  p.setPen(rgb(0xd0d0d0));
  p.drawLine(header_width() - 1, content_top(), header_width() - 1, content_bottom());
  QFont bold = font();
  bold.setBold(true);
  QFont small = font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() - 1));
  QFont tiny = font();
  tiny.setPointSizeF(std::max(5.0, small.pointSizeF() - 1.5));
  const int series_count = model_->series_count();
  // Collapsed ranks are a few pixels high: name every one when there is room, else every
  // few, so the names never overlap.
  int collapsed_step = 1;
  if (series_count * kCompactSeriesHeight + kCollapsedRankGap < QFontMetrics(tiny).height())
    collapsed_step = (QFontMetrics(tiny).height() + series_count * kCompactSeriesHeight) /
                     (series_count * kCompactSeriesHeight + kCollapsedRankGap);
  for (const auto& r : ranks_) {
    const int y = top + r.header_y;
    if (y > content_bottom() || y + r.header_height < content_top() - 20) continue;
    if (r.collapsed) {
      p.fillRect(QRect(0, y, header_width() - 1, r.header_height), r.rank % 2 ? rgb(0xf0f2f5) : rgb(0xe6eaf0));
      if (r.rank % collapsed_step != 0) continue;
      p.setFont(tiny);
      p.setPen(rgb(0x202020));
      const QString name = QString::fromStdString(model_->rank_name(r.rank));
      const QStaticText& laid_out = static_text(name, tiny);
      p.drawStaticText(QPointF(6, y + (r.header_height - laid_out.size().height()) / 2), laid_out);
      continue;
    }
    p.fillRect(QRect(0, y, header_width(), kRankHeaderHeight), rgb(0xe3e8ef));
    p.setFont(bold);
    p.setPen(Qt::black);
    draw_text(p, QRect(6, y, header_width() - 8, kRankHeaderHeight), Qt::AlignVCenter | Qt::AlignLeft,
              QString::fromStdString(model_->rank_name(r.rank)));
    // The bubble share and peak memory of the rank, per series, across the time area.
    QString summary;
    for (int s = 0; s < series_count; ++s) {
      if (s) summary += "    ";
      summary += QString::fromStdString(model_->series_name(s));
      if (model_->has_pipeline(s))
        summary += ": bubble " + QString::number(model_->bubble_fraction(s, r.rank) * 100, 'f', 1) + "%";
      if (!model_->memory(s, r.rank).empty())
        summary += ", peak memory " + bytes_text(static_cast<double>(model_->peak_memory_bytes(s, r.rank)));
    }
    p.setFont(small);
    p.setPen(rgb(0x303030));
    draw_text(p, QRect(header_width() + 6, y, time_area_width() - 12, kRankHeaderHeight),
              Qt::AlignVCenter | Qt::AlignLeft, summary);
    if (r.memory_y >= 0) paint_memory_axis(p, r);
  }
  p.setFont(small);
  for (const auto& l : lanes_) {
    if (l.lane < 0) continue;
    const int y = top + l.y;
    if (y > content_bottom() || y + l.height < content_top()) continue;
    QString text = QString::fromStdString(model_->lane_name(l.rank, l.lane));
    if (series_count == 2) text = QString::fromStdString(model_->series_name(l.series)) + " · " + text;
    if (l.lane == static_cast<int>(traces::Lane::Compute) && model_->has_pipeline(l.series))
      text += "  " + QString::number(model_->bubble_fraction(l.series, l.rank) * 100, 'f', 1) + "% idle";
    p.setPen(l.series == 1 ? rgb(0x8a4b08) : rgb(0x1f3f6f));
    draw_text(p, QRect(14, y, header_width() - 16, std::min(l.height, kLaneHeight)), Qt::AlignVCenter | Qt::AlignLeft,
              text);
  }
  p.setFont(font());
}

std::vector<TimelineWidget::LegendEntry> TimelineWidget::legend_entries() const {
  std::vector<LegendEntry> entries;
  bool pipeline = !model_;
  for (int s = 0; model_ && s < model_->series_count(); ++s) pipeline = pipeline || model_->has_pipeline(s);
  if (!pipeline) {
    // A plain trace has no pipeline kinds, chunks or bubble: its colours are its names'.
    entries.push_back({rgb(name_rgb("slice")), "colour: the slice's name"});
    entries.push_back({rgb(merged_rgb(name_rgb("slice"))), "merged (darker)"});
    entries.push_back({rgb(kInstantRgb), "instant"});
    return entries;
  }
  for (const Kind kind : {Kind::Forward, Kind::Backward, Kind::BackwardInput, Kind::BackwardWeight, Kind::Communication,
                          Kind::Optimizer, Kind::TensorParallel, Kind::Other})
    entries.push_back(
        {rgb(kind_rgb(kind)), QString::fromUtf8(kind_label(kind).data(), static_cast<int>(kind_label(kind).size()))});
  if (has_all_to_all_)
    for (const Kind kind : {Kind::AllToAllDispatchForward, Kind::AllToAllCombineForward, Kind::AllToAllDispatchBackward,
                            Kind::AllToAllCombineBackward})
      entries.push_back(
          {rgb(kind_rgb(kind)), QString::fromUtf8(kind_label(kind).data(), static_cast<int>(kind_label(kind).size()))});
  entries.push_back({rgb(chunk_rgb(kind_rgb(Kind::Forward), 1)), "chunk 1 (lighter)"});
  entries.push_back({rgb(merged_rgb(kind_rgb(Kind::Forward))), "merged (darker)"});
  entries.push_back({rgb(kBubbleRgb), "idle (bubble)", LegendEntry::Swatch::Hatched});
  if (model_ && model_->series_count() == 2 && show_difference_) {
    entries.push_back({rgb(difference_rgb(0.5)), "measured longer"});
    entries.push_back({rgb(difference_rgb(-0.5)), "measured shorter"});
  }
  if (show_critical_path_) entries.push_back({rgb(kCriticalPathRgb), "critical path"});
  if (model_ && model_->series_count() == 2) {
    // The memory curves: predicted dashed blue, measured solid orange.
    entries.push_back({QColor(), "predicted memory", LegendEntry::Swatch::Line, 0});
    entries.push_back({QColor(), "measured memory", LegendEntry::Swatch::Line, 1});
  }
  return entries;
}

namespace {

QFont legend_font(const QFont& base) {
  QFont small = base;
  small.setPointSizeF(std::max(6.0, small.pointSizeF() - 1));
  return small;
}

}  // namespace

std::vector<QRect> TimelineWidget::legend_entry_rects(int top) const {
  // Left to right, wrapping onto a new line where the width runs out (a narrow window).
  const QFontMetrics metrics(legend_font(font()));
  std::vector<QRect> rects;
  int x = 8, line_top = top;
  for (const auto& entry : legend_entries()) {
    const int w = 26 + metrics.horizontalAdvance(entry.text);
    if (x + w > width() && x > 8) {
      x = 8;
      line_top += kLegendLineHeight;
    }
    rects.emplace_back(x, line_top, w - 8, kLegendLineHeight);
    x += w;
  }
  return rects;
}

std::vector<QRect> TimelineWidget::legend_entry_rects() const { return legend_entry_rects(legend_rect().top()); }

int TimelineWidget::measure_legend_height() const {
  const std::vector<QRect> rects = legend_entry_rects(0);
  return rects.empty() ? kLegendLineHeight : rects.back().bottom() + 1;
}

void TimelineWidget::paint_legend(QPainter& p) const {
  const QRect area = legend_rect();
  p.fillRect(area, rgb(0xf4f4f4));
  const QFont small = legend_font(font());
  p.setFont(small);
  const QFontMetrics metrics(small);
  const int ascent = metrics.ascent();
  const std::vector<LegendEntry> entries = legend_entries();
  const std::vector<QRect> rects = legend_entry_rects(area.top());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const LegendEntry& entry = entries[i];
    const int x = rects[i].left(), line_top = rects[i].top();
    switch (entry.swatch) {
      case LegendEntry::Swatch::Line:
        p.setPen(memory_pen(entry.series, 2));
        p.drawLine(x, line_top + 11, x + 14, line_top + 11);
        break;
      case LegendEntry::Swatch::Hatched:
        p.fillRect(QRect(x, line_top + 5, 14, 12), entry.color);
        p.fillRect(QRect(x, line_top + 5, 14, 12), QBrush(rgb(0xc9bfae), Qt::BDiagPattern));
        break;
      case LegendEntry::Swatch::Box: p.fillRect(QRect(x, line_top + 5, 14, 12), entry.color); break;
    }
    p.setPen(Qt::black);
    p.drawStaticText(QPointF(x + 18, line_top + 15 - ascent), static_text(entry.text, small));
  }
  p.setFont(font());
}

}  // namespace pipescope::gui
