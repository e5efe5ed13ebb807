#include "timeline_widget.hpp"

#include <QFontMetrics>
#include <QHelpEvent>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QScrollBar>
#include <QToolTip>
#include <QWheelEvent>

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "pipescope/gui/kinds.hpp"
#include "pipescope/gui/time_ticks.hpp"

namespace pipescope::gui {
namespace {

constexpr int kHeaderWidth = 200;
constexpr int kOverviewHeight = 36;
constexpr int kRulerHeight = 22;
constexpr int kLaneHeight = 16;
constexpr int kRankHeaderHeight = 18;
constexpr int kMemoryHeight = 44;
constexpr int kRankGap = 6;
constexpr int kSeriesGap = 3;
constexpr int kLegendHeight = 22;
constexpr int kScrollWidth = 12;
constexpr double kMinBlockPx = 3;

QColor rgb(std::uint32_t value) { return QColor::fromRgb(value); }

QString mib(std::int64_t bytes) { return QString::number(static_cast<double>(bytes) / (1024.0 * 1024.0), 'f', 1) + " MiB"; }

// Predicted curves are blue and dashed, measured ones orange and solid.
// One-pixel pens: the raster engine draws them directly, wider ones are stroked into
// paths first (a memory curve has thousands of points).
QPen memory_pen(int series, int series_count) {
  if (series_count == 1 || series == 1) return QPen(rgb(0xf28e2b), 1);
  QPen pen(rgb(0x1f5fb4), 1);
  pen.setStyle(Qt::DashLine);
  return pen;
}

// QColor::darker(125) without the round trip through HSV: scaling the value of a colour
// scales its red, green and blue alike.
QColor darker_by_fifth(std::uint32_t value) {
  return QColor((value >> 16 & 0xff) * 4 / 5, (value >> 8 & 0xff) * 4 / 5, (value & 0xff) * 4 / 5);
}

// Nearest pixel edge (std::lround is a library call; this is on the repaint's hot path).
int pixel(double x) { return static_cast<int>(std::floor(x + 0.5)); }

// A pixel rectangle from fractional edges: integer rectangles take the raster engine's
// fast path, fractional ones go through the general rasteriser.
QRect pixel_rect(double x0, double y0, double x1, double y1) {
  const int left = pixel(x0), top = pixel(y0);
  return QRect(left, top, std::max(1, pixel(x1) - left), std::max(1, pixel(y1) - top));
}

// One row of premultiplied pixels (0 where nothing is drawn) is copied down `height` rows
// and drawn unscaled: one blend of the whole lane instead of hundreds of rectangles.
// Clears the row for the next lane.
void draw_strip(QPainter& p, std::vector<std::uint32_t>& row, std::vector<std::uint32_t>& block, int left, int top, int height) {
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
void outline(QPainter& p, const QRect& box, const QColor& color, int thickness) {
  if (box.width() <= 2 * thickness || box.height() <= 2 * thickness) {
    p.fillRect(box, color);
    return;
  }
  p.fillRect(QRect(box.left(), box.top(), box.width(), thickness), color);
  p.fillRect(QRect(box.left(), box.bottom() - thickness + 1, box.width(), thickness), color);
  p.fillRect(QRect(box.left(), box.top() + thickness, thickness, box.height() - 2 * thickness), color);
  p.fillRect(QRect(box.right() - thickness + 1, box.top() + thickness, thickness, box.height() - 2 * thickness), color);
}

}  // namespace

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
  if (model_ && !model_->empty()) {
    for (int s = 0; s < model_->series_count(); ++s) overview_density_.push_back(model_->overview_density(s, 1024));
    view_.set_extent(model_->end_us() * 1.01);
  }
  if (show_critical_path_) set_show_critical_path(true);
  relayout();
  update();
}

void TimelineWidget::set_show_difference(bool on) {
  show_difference_ = on;
  update();
}

void TimelineWidget::set_show_flows(bool on) {
  show_flows_ = on;
  update();
}

void TimelineWidget::set_show_critical_path(bool on) {
  show_critical_path_ = on;
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
      std::stable_sort(row.blocks.begin(), row.blocks.end(), [](const Block& a, const Block& b) { return a.start_us < b.start_us; });
      row.prefix_max_end.resize(row.blocks.size());
      double running = -std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < row.blocks.size(); ++i) row.prefix_max_end[i] = running = std::max(running, row.blocks[i].end_us);
    }
  }
  update();
}

int TimelineWidget::time_area_left() const { return kHeaderWidth; }
int TimelineWidget::time_area_width() const { return std::max(1, width() - kHeaderWidth - kScrollWidth); }
QRect TimelineWidget::overview_rect() const { return QRect(kHeaderWidth, 0, time_area_width(), kOverviewHeight); }
QRect TimelineWidget::ruler_rect() const { return QRect(kHeaderWidth, kOverviewHeight, time_area_width(), kRulerHeight); }
QRect TimelineWidget::legend_rect() const { return QRect(0, height() - kLegendHeight, width(), kLegendHeight); }
int TimelineWidget::content_top() const { return kOverviewHeight + kRulerHeight; }
int TimelineWidget::content_bottom() const { return height() - kLegendHeight; }
int TimelineWidget::scroll_offset() const { return scroll_->value(); }

QRect TimelineWidget::lane_rect(int rank, int series, int lane) const {
  if (rank < 0 || rank >= static_cast<int>(lane_index_.size()) || series < 0 ||
      series >= static_cast<int>(lane_index_[rank].size()) || lane < 0 || lane >= static_cast<int>(lane_index_[rank][series].size()))
    return {};
  const int index = lane_index_[rank][series][lane];
  if (index < 0) return {};
  const LaneLayout& l = lanes_[index];
  return QRect(kHeaderWidth, content_top() + l.y - scroll_offset(), time_area_width(), l.height);
}

QRect TimelineWidget::memory_rect(int rank) const {
  for (const auto& r : ranks_)
    if (r.rank == rank && r.memory_y >= 0)
      return QRect(kHeaderWidth, content_top() + r.memory_y - scroll_offset(), time_area_width(), kMemoryHeight);
  return {};
}

void TimelineWidget::relayout() {
  lanes_.clear();
  ranks_.clear();
  int y = 0;
  if (model_) {
    for (int r = 0; r < model_->rank_count(); ++r) {
      RankLayout rank{r, y, -1};
      y += kRankHeaderHeight;
      for (int s = 0; s < model_->series_count(); ++s) {
        bool any = false;
        for (int lane = 0; lane < 64; ++lane) {
          if (!model_->row(r, s, lane)) continue;
          lanes_.push_back({r, s, lane, y, kLaneHeight});
          y += kLaneHeight;
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
      ranks_.push_back(rank);
      y += kRankGap;
    }
  }
  content_height_ = y;
  lane_index_.clear();
  if (model_) lane_index_.assign(model_->rank_count(), std::vector<std::vector<int>>(model_->series_count()));
  for (std::size_t i = 0; i < lanes_.size(); ++i) {
    auto& by_lane = lane_index_[lanes_[i].rank][lanes_[i].series];
    if (static_cast<int>(by_lane.size()) <= lanes_[i].lane) by_lane.resize(lanes_[i].lane + 1, -1);
    by_lane[lanes_[i].lane] = static_cast<int>(i);
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

std::optional<std::pair<int, std::size_t>> TimelineWidget::event_at(QPoint position) const {
  if (!model_ || position.x() < kHeaderWidth || position.y() < content_top() || position.y() >= content_bottom())
    return std::nullopt;
  const int y = position.y() - content_top() + scroll_offset();
  for (const auto& l : lanes_) {
    if (y < l.y || y >= l.y + l.height) continue;
    const Row* row = model_->row(l.rank, l.series, l.lane);
    if (!row) return std::nullopt;
    const double t = view_.x_to_time(position.x() - kHeaderWidth);
    if (auto b = row->block_at(t, view_.us_per_pixel() * 2)) return std::pair<int, std::size_t>(l.series, row->blocks[*b].event);
    return std::nullopt;
  }
  return std::nullopt;
}

// ---- painting ----

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
  for (const auto& r : ranks_)
    if (r.memory_y >= 0) paint_memory(p, r);
  if (show_critical_path_) paint_critical_path(p);
  if (show_flows_) paint_flows(p);
  if (range_) {
    const double x0 = kHeaderWidth + view_.time_to_x(range_->first), x1 = kHeaderWidth + view_.time_to_x(range_->second);
    p.fillRect(QRectF(x0, content_top(), std::max(1.0, x1 - x0), content_bottom() - content_top()), QColor(30, 100, 220, 40));
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
  draw_text(p, QRect(6, 0, kHeaderWidth - 12, kOverviewHeight), Qt::AlignVCenter | Qt::AlignLeft, "overview (busy share)");
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
    draw_text(p, QRect(6, area.top(), kHeaderWidth - 12, area.height()), Qt::AlignVCenter | Qt::AlignLeft, text);
  }
}

void TimelineWidget::paint_lanes(QPainter& p, const QRect& dirty) const {
  const int top = content_top() - scroll_offset();
  const int left = kHeaderWidth;
  const int visible_top = std::max(dirty.top(), content_top()), visible_bottom = std::min(dirty.bottom() + 1, content_bottom());
  QFont small = font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() - 1.5));
  p.setFont(small);
  QFontMetrics metrics(small);
  const int label_width = metrics.horizontalAdvance("88") + 4;

  QBrush bubble(rgb(0xc9bfae), Qt::BDiagPattern);
  const int width_px = time_area_width();
  std::vector<std::uint32_t> strip(static_cast<std::size_t>(width_px), 0u), strip_block;
  for (const auto& r : ranks_) {
    const int y = top + r.header_y;
    if (y > visible_bottom || y + kRankHeaderHeight < visible_top) continue;
    p.fillRect(QRect(0, y, width(), kRankHeaderHeight), rgb(0xeef1f5));
  }
  for (const auto& l : lanes_) {
    const int y = top + l.y;
    if (y > visible_bottom || y + l.height < visible_top) continue;
    const Row* row = model_->row(l.rank, l.series, l.lane);
    const QRect lane_area(left, y, time_area_width(), l.height);
    p.fillRect(lane_area, l.series == 1 ? rgb(0xfbf8f3) : rgb(0xf7f9fc));
    // The bubble: idle time of the compute lane within the series' iteration, hatched.
    if (l.lane == static_cast<int>(traces::Lane::Compute) && model_->has_pipeline(l.series)) {
      const double end = model_->iteration_us(l.series);
      const double x0 = std::max(0.0, view_.time_to_x(0)), x1 = std::min<double>(time_area_width(), view_.time_to_x(end));
      if (x1 > x0) {
        p.fillRect(QRectF(left + x0, y + 1, x1 - x0, l.height - 2), rgb(kBubbleRgb));
        p.fillRect(QRectF(left + x0, y + 1, x1 - x0, l.height - 2), bubble);
      }
    }
    if (!row) continue;
    const auto& events = model_->trace(l.series).events;
    const bool difference = show_difference_ && l.series == 1 && model_->series_count() == 2;
    // Folded spans (zoomed out, that is most of them) go into a one-pixel-high strip of the
    // lane, drawn stretched in one call: hundreds of rectangles cost one image blit.
    bool strip_used = false;
    visit_visible(*row, view_, kMinBlockPx, [&](const Span& span) {
      const double x0 = std::max(span.x0, -2.0), x1 = std::min(span.x1, time_area_width() + 2.0);
      const Block& block = span.row->blocks[span.first];
      std::uint32_t color = difference ? difference_rgb(model_->measured_error(block.event))
                            : model_->has_pipeline(l.series) ? kind_rgb(block.kind) : model_->event_rgb(l.series, block.event);
      if (span.folded()) {
        const int from = std::clamp(pixel(x0), 0, width_px - 1);
        const int to = std::clamp(pixel(std::max(x1, x0 + 1)), from + 1, width_px);
        std::fill(strip.begin() + from, strip.begin() + to, 0xff000000u | darker_by_fifth(color).rgb());
        strip_used = true;
        return;
      }
      const auto& e = events[block.event];
      QRectF box(left + x0, y + 2, std::max(1.0, x1 - x0), l.height - 4);
      p.fillRect(box, rgb(color));
      if (difference && box.width() >= 4) {
        p.setPen(QColor(120, 120, 120));
        p.drawRect(box.adjusted(0, 0, -1, -1));
      } else if (box.width() >= 4) {
        p.setPen(QColor(255, 255, 255, 160));
        p.drawLine(box.topRight(), box.bottomRight());
      }
      if (e.micro_batch >= 0 && box.width() >= label_width) {
        p.setPen(difference ? QColor(40, 40, 40) : QColor(255, 255, 255));
        const QString label = box.width() >= label_width * 2.2 ? QString::fromStdString(e.name) + QString::number(e.micro_batch)
                                                               : QString::number(e.micro_batch);
        const QStaticText& laid_out = static_text(label, small);
        const QSizeF size = laid_out.size();
        if (size.width() + 2 <= box.width())
          p.drawStaticText(QPointF(box.center().x() - size.width() / 2, box.center().y() - size.height() / 2), laid_out);
      }
    });
    if (strip_used) draw_strip(p, strip, strip_block, left, y + 2, l.height - 4);
    if (selected_ && selected_->first == l.series) {
      const auto& e = events[selected_->second];
      if (e.rank == l.rank && e.lane == l.lane) {
        const double x0 = view_.time_to_x(e.ts_us), x1 = view_.time_to_x(e.end_us());
        p.setPen(QPen(Qt::black, 2));
        p.setBrush(Qt::NoBrush);
        p.drawRect(QRectF(left + x0, y + 1, std::max(2.0, x1 - x0), l.height - 2));
      }
    }
  }
  p.setFont(font());
}

void TimelineWidget::paint_memory(QPainter& p, const RankLayout& rank) const {
  const int y = content_top() - scroll_offset() + rank.memory_y;
  if (y > content_bottom() || y + kMemoryHeight < content_top()) return;
  const int left = kHeaderWidth;
  p.fillRect(QRect(left, y, time_area_width(), kMemoryHeight), rgb(0xfcfcfc));
  p.setPen(rgb(0xe0e0e0));
  p.drawLine(left, y + kMemoryHeight - 1, left + time_area_width(), y + kMemoryHeight - 1);
  const double peak = static_cast<double>(std::max<std::int64_t>(1, model_->max_memory_bytes()));
  const double bottom = y + kMemoryHeight - 3, usable = kMemoryHeight - 8;
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
      // The highest value inside this column: the one held at its start, and the samples
      // taken within it (exactly, by block maxima, however many).
      double value = it == samples.begin() ? 0.0 : static_cast<double>((it - 1)->bytes);
      const double t_next = view_.x_to_time(x + 1);
      auto column_end = it;
      while (column_end != samples.end() && column_end->ts_us < t_next && column_end - it < 8) ++column_end;
      if (column_end != samples.end() && column_end->ts_us < t_next)
        column_end = std::lower_bound(column_end, samples.end(), t_next, [](const traces::MemorySample& m, double v) { return m.ts_us < v; });
      if (column_end != it)
        value = std::max(value, static_cast<double>(model_->memory_max_bytes(s, rank.rank, static_cast<std::size_t>(it - samples.begin()),
                                                                              static_cast<std::size_t>(column_end - samples.begin()))));
      const double py = std::round(bottom - value / peak * usable);
      if (x > 0 && py == previous_y) continue;
      if (x > 0) curve << QPointF(left + x, previous_y);
      curve << QPointF(left + x, py);
      previous_y = py;
      previous_x = x;
    }
    if (previous_x < time_area_width()) curve << QPointF(left + time_area_width(), previous_y);
    p.setPen(memory_pen(s, model_->series_count()));
    p.drawPolyline(curve);
  }
  p.setPen(Qt::darkGray);
  draw_text(p, QRect(left + 4, y + 1, 300, 14), Qt::AlignLeft | Qt::AlignTop, "memory, scale " + mib(static_cast<std::int64_t>(peak)));
}

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
    p.drawText(QRect(kHeaderWidth + 8, content_top() + 2, 600, 16), Qt::AlignLeft | Qt::AlignTop,
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
    const QPointF a(kHeaderWidth + view_.time_to_x(f->from_ts_us), from.center().y());
    const QPointF b(kHeaderWidth + view_.time_to_x(f->to_ts_us), to.center().y());
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
      outline(p, pixel_rect(kHeaderWidth + x0, y + 1, kHeaderWidth + std::max(x1, x0 + 2), y + l.height - 1), color, 2);
    });
    if (strip_used) draw_strip(p, strip, strip_block, kHeaderWidth, y + 1, l.height - 2);
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
    auto first = std::lower_bound(path.begin(), path.end(), t0, [&](std::size_t i, double t) { return events[i].end_us() < t; });
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
      const double x0 = kHeaderWidth + std::max(-10.0, view_.time_to_x(e.ts_us));
      const double x1 = kHeaderWidth + std::min(time_area_width() + 10.0, view_.time_to_x(e.end_us()));
      const QPointF start(x0, lane.center().y());
      if (have_previous && std::fabs(previous.y() - start.y()) > 1) p.drawLine(previous, start);
      previous = QPointF(x1, lane.center().y());
      have_previous = true;
    }
  }
}

void TimelineWidget::paint_headers(QPainter& p) const {
  const int top = content_top() - scroll_offset();
  p.fillRect(QRect(0, content_top(), kHeaderWidth, content_bottom() - content_top()), rgb(0xfafafa));
  p.setPen(rgb(0xd0d0d0));
  p.drawLine(kHeaderWidth - 1, content_top(), kHeaderWidth - 1, content_bottom());
  QFont bold = font();
  bold.setBold(true);
  QFont small = font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() - 1));
  const int series_count = model_->series_count();
  for (const auto& r : ranks_) {
    const int y = top + r.header_y;
    p.fillRect(QRect(0, y, kHeaderWidth, kRankHeaderHeight), rgb(0xe3e8ef));
    p.setFont(bold);
    p.setPen(Qt::black);
    draw_text(p, QRect(6, y, kHeaderWidth - 8, kRankHeaderHeight), Qt::AlignVCenter | Qt::AlignLeft,
               QString::fromStdString(model_->rank_name(r.rank)));
    // The bubble share and peak memory of the rank, per series, across the time area.
    QString summary;
    for (int s = 0; s < series_count; ++s) {
      if (s) summary += "    ";
      summary += QString::fromStdString(model_->series_name(s));
      if (model_->has_pipeline(s)) summary += ": bubble " + QString::number(model_->bubble_fraction(s, r.rank) * 100, 'f', 1) + "%";
      if (!model_->memory(s, r.rank).empty()) summary += ", peak memory " + mib(model_->peak_memory_bytes(s, r.rank));
    }
    p.setFont(small);
    p.setPen(rgb(0x303030));
    draw_text(p, QRect(kHeaderWidth + 6, y, time_area_width() - 12, kRankHeaderHeight), Qt::AlignVCenter | Qt::AlignLeft, summary);
    if (r.memory_y >= 0) {
      const int my = top + r.memory_y;
      draw_text(p, QRect(14, my, kHeaderWidth - 16, kMemoryHeight), Qt::AlignVCenter | Qt::AlignLeft,
                 "memory");
    }
  }
  p.setFont(small);
  for (const auto& l : lanes_) {
    const int y = top + l.y;
    QString text = QString::fromStdString(model_->lane_name(l.rank, l.lane));
    if (series_count == 2) text = QString::fromStdString(model_->series_name(l.series)) + " · " + text;
    if (l.lane == static_cast<int>(traces::Lane::Compute) && model_->has_pipeline(l.series))
      text += "  " + QString::number(model_->bubble_fraction(l.series, l.rank) * 100, 'f', 1) + "% idle";
    p.setPen(l.series == 1 ? rgb(0x8a4b08) : rgb(0x1f3f6f));
    draw_text(p, QRect(14, y, kHeaderWidth - 16, l.height), Qt::AlignVCenter | Qt::AlignLeft, text);
  }
  p.setFont(font());
}

void TimelineWidget::paint_legend(QPainter& p) const {
  const QRect area = legend_rect();
  p.fillRect(area, rgb(0xf4f4f4));
  QFont small = font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() - 1));
  p.setFont(small);
  const int ascent = QFontMetrics(small).ascent();
  int x = 8;
  auto entry = [&](QColor color, const QString& text, bool hatched = false) {
    p.fillRect(QRect(x, area.top() + 5, 14, 12), color);
    if (hatched) p.fillRect(QRect(x, area.top() + 5, 14, 12), QBrush(rgb(0xc9bfae), Qt::BDiagPattern));
    p.setPen(Qt::black);
    p.drawStaticText(QPointF(x + 18, area.top() + 15 - ascent), static_text(text, small));
    x += 26 + static_cast<int>(std::ceil(static_text(text, small).size().width()));
  };
  for (const Kind kind : {Kind::Forward, Kind::Backward, Kind::BackwardInput, Kind::BackwardWeight, Kind::Communication,
                          Kind::Optimizer, Kind::Other})
    entry(rgb(kind_rgb(kind)), QString::fromUtf8(kind_label(kind).data(), static_cast<int>(kind_label(kind).size())));
  entry(rgb(kBubbleRgb), "idle (bubble)", true);
  if (model_ && model_->series_count() == 2 && show_difference_) {
    entry(rgb(difference_rgb(0.5)), "measured longer");
    entry(rgb(difference_rgb(-0.5)), "measured shorter");
  }
  if (show_critical_path_) entry(rgb(kCriticalPathRgb), "critical path");
  if (model_ && model_->series_count() == 2) {
    // The memory curves: predicted dashed blue, measured solid orange.
    for (int s = 0; s < 2; ++s) {
      p.setPen(memory_pen(s, 2));
      p.drawLine(x, area.top() + 11, x + 14, area.top() + 11);
      p.setPen(Qt::black);
      const QString text = s == 0 ? "predicted memory" : "measured memory";
      p.drawStaticText(QPointF(x + 18, area.top() + 15 - ascent), static_text(text, small));
      x += 26 + static_cast<int>(std::ceil(static_text(text, small).size().width()));
    }
  }
  p.setFont(font());
}

QString TimelineWidget::tooltip_text(int series, std::size_t index) const {
  const auto& e = model_->trace(series).events[index];
  QString text = QString::fromStdString(e.name) + "  (" +
                 QString::fromUtf8(kind_label(kind_of(e.name)).data(), static_cast<int>(kind_label(kind_of(e.name)).size())) + ")";
  text += "\n" + QString::fromStdString(model_->series_name(series)) + ", " + QString::fromStdString(model_->rank_name(e.rank)) +
          ", " + QString::fromStdString(model_->lane_name(e.rank, e.lane));
  if (e.stage >= 0) text += "\nstage " + QString::number(e.stage);
  if (e.micro_batch >= 0) text += (e.stage >= 0 ? ", micro-batch " : "\nmicro-batch ") + QString::number(e.micro_batch);
  text += "\nstart " + QString::fromStdString(format_duration_us(e.ts_us)) + ", duration " +
          QString::fromStdString(format_duration_us(e.dur_us));
  if (e.bytes >= 0) text += "\nbytes " + QString::number(e.bytes) + " (" + mib(e.bytes) + ")";
  if (e.peer_rank >= 0) text += "\npeer rank " + QString::number(e.peer_rank);
  if (series == 1 && model_->series_count() == 2) {
    if (auto p = model_->matched_predicted(index)) {
      const auto& pe = model_->trace(0).events[*p];
      const double error = model_->prediction_error(index);
      text += "\npredicted duration " + QString::fromStdString(format_duration_us(pe.dur_us)) + ", error " +
              (error >= 0 ? "+" : "") + QString::number(error * 100, 'f', 1) + "% (predicted - measured) / measured";
    } else {
      text += "\nnot in the prediction";
    }
  }
  return text;
}

// ---- interaction ----

bool TimelineWidget::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(e);
    if (auto hit = event_at(help->pos())) {
      QToolTip::showText(help->globalPos(), tooltip_text(hit->first, hit->second), this);
    } else {
      QToolTip::hideText();
      e->ignore();
    }
    return true;
  }
  return QWidget::event(e);
}

void TimelineWidget::wheelEvent(QWheelEvent* event) {
  if (!model_) return;
  const double steps = event->angleDelta().y() / 120.0;
  if (event->modifiers() & (Qt::ShiftModifier | Qt::AltModifier)) {
    scroll_->setValue(scroll_->value() - static_cast<int>(steps * kLaneHeight * 3));
    return;
  }
  view_.zoom_around(event->position().x() - kHeaderWidth, std::pow(1.25, steps));
  update();
}

void TimelineWidget::mousePressEvent(QMouseEvent* event) {
  if (!model_) return;
  press_position_ = event->pos();
  moved_ = false;
  if (overview_rect().contains(event->pos())) {
    drag_ = Drag::Overview;
    view_.center_on((event->pos().x() - kHeaderWidth) / static_cast<double>(time_area_width()) * view_.extent_us());
    update();
    return;
  }
  press_time_us_ = view_.x_to_time(event->pos().x() - kHeaderWidth);
  drag_ = (event->modifiers() & Qt::ShiftModifier) || event->button() == Qt::RightButton ? Drag::Select : Drag::Pan;
}

void TimelineWidget::mouseMoveEvent(QMouseEvent* event) {
  if (drag_ == Drag::None) return;
  const QPoint delta = event->pos() - press_position_;
  if (delta.manhattanLength() > 3) moved_ = true;
  switch (drag_) {
    case Drag::Overview:
      view_.center_on((event->pos().x() - kHeaderWidth) / static_cast<double>(time_area_width()) * view_.extent_us());
      update();
      break;
    case Drag::Pan: {
      if (!moved_) break;
      view_.pan_by_pixels(-(event->pos().x() - press_position_.x()));
      scroll_->setValue(scroll_->value() - (event->pos().y() - press_position_.y()));
      press_position_ = event->pos();
      update();
      break;
    }
    case Drag::Select:
      if (moved_) set_selection_range(press_time_us_, view_.x_to_time(event->pos().x() - kHeaderWidth));
      break;
    case Drag::None: break;
  }
}

void TimelineWidget::mouseReleaseEvent(QMouseEvent* event) {
  if (drag_ == Drag::Pan && !moved_) {
    if (auto hit = event_at(event->pos())) select_event(hit->first, hit->second, false);
  }
  drag_ = Drag::None;
}

void TimelineWidget::mouseDoubleClickEvent(QMouseEvent* event) {
  if (range_) {
    const double t = view_.x_to_time(event->pos().x() - kHeaderWidth);
    if (t >= range_->first && t <= range_->second) zoom_to_selection();
  }
}

void TimelineWidget::keyPressEvent(QKeyEvent* event) {
  if (!model_) return QWidget::keyPressEvent(event);
  const double center = time_area_width() / 2.0;
  switch (event->key()) {
    case Qt::Key_W: view_.zoom_around(center, 1.5); break;
    case Qt::Key_S: view_.zoom_around(center, 1 / 1.5); break;
    case Qt::Key_A: view_.pan_by_pixels(-time_area_width() * 0.15); break;
    case Qt::Key_D: view_.pan_by_pixels(time_area_width() * 0.15); break;
    case Qt::Key_Z: case Qt::Key_Return: case Qt::Key_Enter: zoom_to_selection(); return;
    case Qt::Key_0: case Qt::Key_Home: view_.show_all(); break;
    case Qt::Key_Escape: clear_selection_range(); return;
    default: return QWidget::keyPressEvent(event);
  }
  update();
}

}  // namespace pipescope::gui
