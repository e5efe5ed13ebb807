// What the timeline's painting files share: the layout's fixed sizes and small pixel helpers
// (inline, on the repaint's hot path). Internal to the widget.
#pragma once

#include <QColor>
#include <QImage>
#include <QPainter>
#include <QPen>
#include <QRect>
#include <QString>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "pipescope/gui/memory_scale.hpp"

namespace pipescope::gui::timeline_paint {

inline constexpr int kOverviewHeight = 36;
inline constexpr int kRulerHeight = 22;
inline constexpr int kLaneHeight = 16;
inline constexpr int kSubRowHeight = 12;   // a sub-row of a lane with overlapping blocks
inline constexpr int kMaxLaneHeight = 64;  // deeper stacks get thinner sub-rows
inline constexpr int kRankHeaderHeight = 16;
inline constexpr int kCompactSeriesHeight = 6;  // a collapsed rank: one row this high per series
inline constexpr int kMemoryHeight = 72;
inline constexpr int kCounterHeight = 48;
inline constexpr int kRankGap = 4;
inline constexpr int kCollapsedRankGap = 1;
inline constexpr int kSeriesGap = 2;
inline constexpr int kLegendLineHeight = 22;
inline constexpr int kScrollWidth = 12;
// Blocks at least this wide are drawn one by one with their labels; narrower ones merge.
inline constexpr double kMinBlockPx = 3;

inline QColor rgb(std::uint32_t value) { return QColor::fromRgb(value); }
// Instant events of plain traces: near black, apart from every name colour.
inline constexpr std::uint32_t kInstantRgb = 0x202020;

inline QString bytes_text(double bytes) { return QString::fromStdString(format_bytes(bytes)); }

// Predicted curves are blue and dashed, measured ones orange and solid.
// One-pixel pens: the raster engine draws them directly, wider ones are stroked into
// paths first (a memory curve has thousands of points).
inline QPen memory_pen(int series, int series_count) {
  if (series_count == 1 || series == 1) return QPen(rgb(0xf28e2b), 1);
  QPen pen(rgb(0x1f5fb4), 1);
  pen.setStyle(Qt::DashLine);
  return pen;
}

// Nearest pixel edge (std::lround is a library call; this is on the repaint's hot path).
inline int pixel(double x) { return static_cast<int>(std::floor(x + 0.5)); }

// A pixel rectangle from fractional edges: integer rectangles take the raster engine's
// fast path, fractional ones go through the general rasteriser.
inline QRect pixel_rect(double x0, double y0, double x1, double y1) {
  const int left = pixel(x0), top = pixel(y0);
  return QRect(left, top, std::max(1, pixel(x1) - left), std::max(1, pixel(y1) - top));
}

// One row of premultiplied pixels (0 where nothing is drawn) is copied down `height` rows
// and drawn unscaled: one blend of the whole lane instead of hundreds of rectangles.
// Clears the row for the next lane.
inline void draw_strip(QPainter& p, std::vector<std::uint32_t>& row, std::vector<std::uint32_t>& block, int left, int top, int height) {
  const std::size_t width = row.size();
  if (width == 0 || height <= 0) return;
  block.resize(width * static_cast<std::size_t>(height));
  for (int y = 0; y < height; ++y) std::copy(row.begin(), row.end(), block.begin() + static_cast<std::ptrdiff_t>(width * y));
  const QImage image(reinterpret_cast<const uchar*>(block.data()), static_cast<int>(width), height, static_cast<int>(width * 4),
                     QImage::Format_ARGB32_Premultiplied);
  p.drawImage(QPoint(left, top), image);
  std::fill(row.begin(), row.end(), 0u);
}

// A box outline `thickness` pixels wide, filled rather than stroked: stroking a wide pen
// costs a path per rectangle, four fills are cheap.
inline void outline(QPainter& p, const QRect& box, const QColor& color, int thickness) {
  if (box.width() <= 2 * thickness || box.height() <= 2 * thickness) {
    p.fillRect(box, color);
    return;
  }
  p.fillRect(QRect(box.left(), box.top(), box.width(), thickness), color);
  p.fillRect(QRect(box.left(), box.bottom() - thickness + 1, box.width(), thickness), color);
  p.fillRect(QRect(box.left(), box.top() + thickness, thickness, box.height() - 2 * thickness), color);
  p.fillRect(QRect(box.right() - thickness + 1, box.top() + thickness, thickness, box.height() - 2 * thickness), color);
}

}  // namespace pipescope::gui::timeline_paint
