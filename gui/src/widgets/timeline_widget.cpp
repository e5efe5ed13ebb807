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
#include <unordered_map>

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
QPen memory_pen(int series, int series_count) {
  if (series_count == 1 || series == 1) return QPen(rgb(0xf28e2b), 1.5);
  QPen pen(rgb(0x1f5fb4), 1.5);
  pen.setStyle(Qt::DashLine);
  return pen;
}

}  // namespace

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
  overview_density_.clear();
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
  if (on && model_ && critical_path_.empty())
    for (int s = 0; s < model_->series_count(); ++s) critical_path_.push_back(model_->critical_path(s));
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
  const double start = view_.visible_start_us(), end = view_.visible_end_us();
  relayout();
  view_.set_visible(start, end);
}

void TimelineWidget::changed_view() {
  update();
  emit view_changed();
}

void TimelineWidget::zoom_to(double start_us, double end_us) {
  view_.set_visible(start_us, end_us);
  changed_view();
}

void TimelineWidget::show_all() {
  view_.show_all();
  changed_view();
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
  changed_view();
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
  p.drawText(QRect(6, 0, kHeaderWidth - 12, kOverviewHeight), Qt::AlignVCenter | Qt::AlignLeft, "overview (busy share)");
  const int series = static_cast<int>(overview_density_.size());
  const double band = static_cast<double>(area.height() - 4) / std::max(series, 1);
  for (int s = 0; s < series; ++s) {
    const auto& density = overview_density_[s];
    const double full_x = view_.extent_us() > 0 ? model_->end_us() / view_.extent_us() * area.width() : area.width();
    const double bin_px = full_x / density.size();
    QColor color = s == 0 ? rgb(0x4e79a7) : rgb(0xf28e2b);
    for (std::size_t b = 0; b < density.size(); ++b) {
      const double h = density[b] * (band - 1);
      p.fillRect(QRectF(area.left() + b * bin_px, area.top() + 2 + band * (s + 1) - h, std::max(1.0, bin_px), h), color);
    }
  }
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
  QFontMetrics metrics(font());
  for (const auto& tick : ticks) {
    const double x = area.left() + view_.time_to_x(tick.t_us);
    p.setPen(rgb(0x707070));
    p.drawLine(QPointF(x, area.bottom() - 6), QPointF(x, area.bottom()));
    p.drawText(QPointF(x + 3, area.top() + metrics.ascent() + 2), QString::fromStdString(tick.label));
    p.setPen(QColor(0, 0, 0, 22));
    p.drawLine(QPointF(x, content_top()), QPointF(x, content_bottom()));
  }
  if (range_) {
    const QString text = "selection " + QString::fromStdString(format_duration_us(range_->second - range_->first));
    p.setPen(QColor(30, 100, 220));
    p.drawText(QRect(6, area.top(), kHeaderWidth - 12, area.height()), Qt::AlignVCenter | Qt::AlignLeft, text);
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
    if (l.lane == static_cast<int>(traces::Lane::Compute)) {
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
    visit_visible(*row, view_, kMinBlockPx, [&](const Span& span) {
      const double x0 = std::max(span.x0, -2.0), x1 = std::min(span.x1, time_area_width() + 2.0);
      const auto& e = events[row->blocks[span.first].event];
      std::uint32_t color = difference ? difference_rgb(model_->measured_error(row->blocks[span.first].event))
                                       : kind_rgb(kind_of(e.name));
      QRectF box(left + x0, y + 2, std::max(1.0, x1 - x0), l.height - 4);
      if (span.folded()) {
        p.fillRect(box, rgb(color).darker(125));
        return;
      }
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
        auto cached = label_cache_.find(label);
        if (cached == label_cache_.end()) {
          if (label_cache_.size() > 20000) label_cache_.clear();
          cached = label_cache_.insert(label, QStaticText(label));
          cached->setTextFormat(Qt::PlainText);
          cached->prepare(QTransform(), small);
        }
        const QSizeF size = cached->size();
        if (size.width() + 2 <= box.width())
          p.drawStaticText(QPointF(box.center().x() - size.width() / 2, box.center().y() - size.height() / 2), *cached);
      }
    });
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
    QPolygonF curve;
    double previous_y = bottom;
    for (int x = 0; x <= time_area_width(); ++x) {
      const double t = view_.x_to_time(x);
      auto it = std::upper_bound(samples.begin(), samples.end(), t, [](double v, const traces::MemorySample& m) { return v < m.ts_us; });
      // The highest value inside this column, when it holds a few samples.
      double value = it == samples.begin() ? 0.0 : static_cast<double>((it - 1)->bytes);
      const double t_next = view_.x_to_time(x + 1);
      int scanned = 0;
      for (auto jt = it; jt != samples.end() && jt->ts_us < t_next && scanned < 32; ++jt, ++scanned) value = std::max(value, static_cast<double>(jt->bytes));
      const double py = bottom - value / peak * usable;
      if (x > 0) curve << QPointF(left + x, previous_y);
      curve << QPointF(left + x, py);
      previous_y = py;
    }
    p.setPen(memory_pen(s, model_->series_count()));
    p.drawPolyline(curve);
  }
  p.setPen(Qt::darkGray);
  p.drawText(QRect(left + 4, y + 1, 300, 14), Qt::AlignLeft | Qt::AlignTop, "memory, scale " + mib(static_cast<std::int64_t>(peak)));
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
  p.setRenderHint(QPainter::Antialiasing, true);
  for (const auto& [s, f] : visible) {
    const QRect from = lane_rect(f->from_rank, s, f->from_lane), to = lane_rect(f->to_rank, s, f->to_lane);
    if (from.isEmpty() || to.isEmpty()) continue;
    const QPointF a(kHeaderWidth + view_.time_to_x(f->from_ts_us), from.center().y());
    const QPointF b(kHeaderWidth + view_.time_to_x(f->to_ts_us), to.center().y());
    p.setPen(QPen(QColor(60, 60, 60, 170), 1));
    p.drawLine(a, b);
    const double angle = std::atan2(b.y() - a.y(), b.x() - a.x());
    const QPointF left_wing = b - QPointF(std::cos(angle - 0.4) * 7, std::sin(angle - 0.4) * 7);
    const QPointF right_wing = b - QPointF(std::cos(angle + 0.4) * 7, std::sin(angle + 0.4) * 7);
    QPolygonF head;
    head << b << left_wing << right_wing;
    p.setBrush(QColor(60, 60, 60, 200));
    p.drawPolygon(head);
  }
  p.setBrush(Qt::NoBrush);
  p.setRenderHint(QPainter::Antialiasing, false);
}

void TimelineWidget::paint_critical_path(QPainter& p) const {
  p.setPen(QPen(rgb(kCriticalPathRgb), 2.5));
  p.setBrush(Qt::NoBrush);
  const double t0 = view_.visible_start_us(), t1 = view_.visible_end_us();
  for (int s = 0; s < static_cast<int>(critical_path_.size()); ++s) {
    const auto& events = model_->trace(s).events;
    const auto& path = critical_path_[s];
    // The path is in time order: start one step before the first event that reaches the view.
    auto first = std::lower_bound(path.begin(), path.end(), t0, [&](std::size_t i, double t) { return events[i].end_us() < t; });
    if (first != path.begin()) --first;
    auto last = std::upper_bound(first, path.end(), t1, [&](double t, std::size_t i) { return t < events[i].ts_us; });
    // With several steps per pixel the hops between lanes are a solid smear: draw only the
    // boxes then, each folded into the last one drawn on its lane when within a pixel.
    const bool dense = (last - first) > time_area_width() / 2;
    std::unordered_map<int, double> last_right;
    QPointF previous;
    bool have_previous = false;
    for (auto it = first; it != last; ++it) {
      const auto& e = events[*it];
      const QRect lane = lane_rect(e.rank, s, e.lane);
      if (lane.isEmpty()) continue;
      const double x0 = kHeaderWidth + std::max(-10.0, view_.time_to_x(e.ts_us));
      const double x1 = kHeaderWidth + std::min(time_area_width() + 10.0, view_.time_to_x(e.end_us()));
      auto [right, fresh] = last_right.try_emplace(lane.top(), -1e9);
      if (fresh || x1 > right->second + 1) {
        p.drawRect(QRectF(x0, lane.top() + 1, std::max(2.0, x1 - x0), lane.height() - 2));
        right->second = std::max(x1, x0 + 2);
      }
      const QPointF start(x0, lane.center().y());
      if (!dense && have_previous && std::fabs(previous.y() - start.y()) > 1) p.drawLine(previous, start);
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
    p.drawText(QRect(6, y, kHeaderWidth - 8, kRankHeaderHeight), Qt::AlignVCenter | Qt::AlignLeft,
               QString::fromStdString(model_->rank_name(r.rank)));
    // The bubble share and peak memory of the rank, per series, across the time area.
    QString summary;
    for (int s = 0; s < series_count; ++s) {
      if (s) summary += "    ";
      summary += QString::fromStdString(model_->series_name(s)) + ": bubble " +
                 QString::number(model_->bubble_fraction(s, r.rank) * 100, 'f', 1) + "%";
      if (!model_->memory(s, r.rank).empty()) summary += ", peak memory " + mib(model_->peak_memory_bytes(s, r.rank));
    }
    p.setFont(small);
    p.setPen(rgb(0x303030));
    p.drawText(QRect(kHeaderWidth + 6, y, time_area_width() - 12, kRankHeaderHeight), Qt::AlignVCenter | Qt::AlignLeft, summary);
    if (r.memory_y >= 0) {
      const int my = top + r.memory_y;
      p.drawText(QRect(14, my, kHeaderWidth - 16, kMemoryHeight), Qt::AlignVCenter | Qt::AlignLeft,
                 "memory");
    }
  }
  p.setFont(small);
  for (const auto& l : lanes_) {
    const int y = top + l.y;
    QString text = QString::fromStdString(model_->lane_name(l.rank, l.lane));
    if (series_count == 2) text = QString::fromStdString(model_->series_name(l.series)) + " · " + text;
    if (l.lane == static_cast<int>(traces::Lane::Compute))
      text += "  " + QString::number(model_->bubble_fraction(l.series, l.rank) * 100, 'f', 1) + "% idle";
    p.setPen(l.series == 1 ? rgb(0x8a4b08) : rgb(0x1f3f6f));
    p.drawText(QRect(14, y, kHeaderWidth - 16, l.height), Qt::AlignVCenter | Qt::AlignLeft, text);
  }
  p.setFont(font());
}

void TimelineWidget::paint_legend(QPainter& p) const {
  const QRect area = legend_rect();
  p.fillRect(area, rgb(0xf4f4f4));
  QFont small = font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() - 1));
  p.setFont(small);
  QFontMetrics metrics(small);
  int x = 8;
  auto entry = [&](QColor color, const QString& text, bool hatched = false) {
    p.fillRect(QRect(x, area.top() + 5, 14, 12), color);
    if (hatched) p.fillRect(QRect(x, area.top() + 5, 14, 12), QBrush(rgb(0xc9bfae), Qt::BDiagPattern));
    p.setPen(Qt::black);
    p.drawText(QPoint(x + 18, area.top() + 15), text);
    x += 26 + metrics.horizontalAdvance(text);
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
      p.drawText(QPoint(x + 18, area.top() + 15), text);
      x += 26 + metrics.horizontalAdvance(text);
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
      text += "\npredicted duration " + QString::fromStdString(format_duration_us(pe.dur_us)) + ", measured " +
              QString::number(model_->measured_error(index) * 100, 'f', 1) + "% vs prediction";
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
  changed_view();
}

void TimelineWidget::mousePressEvent(QMouseEvent* event) {
  if (!model_) return;
  press_position_ = event->pos();
  moved_ = false;
  if (overview_rect().contains(event->pos())) {
    drag_ = Drag::Overview;
    view_.center_on((event->pos().x() - kHeaderWidth) / static_cast<double>(time_area_width()) * view_.extent_us());
    changed_view();
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
      changed_view();
      break;
    case Drag::Pan: {
      if (!moved_) break;
      view_.pan_by_pixels(-(event->pos().x() - press_position_.x()));
      scroll_->setValue(scroll_->value() - (event->pos().y() - press_position_.y()));
      press_position_ = event->pos();
      changed_view();
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
  changed_view();
}

}  // namespace pipescope::gui
