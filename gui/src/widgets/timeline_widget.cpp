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
#include "timeline_paint_support.hpp"

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
  build_painted_lanes();
  // Many ranks open compact: one row each, so they fit on the screen.
  collapsed_.assign(model_ ? static_cast<std::size_t>(model_->rank_count()) : 0u, model_ && model_->rank_count() >= kCompactFromRanks);
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
      std::stable_sort(row.blocks.begin(), row.blocks.end(), [](const Block& a, const Block& b) { return a.start_us < b.start_us; });
      row.prefix_max_end.resize(row.blocks.size());
      double running = -std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < row.blocks.size(); ++i) row.prefix_max_end[i] = running = std::max(running, row.blocks[i].end_us);
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
         "Merged blocks (too narrow to draw one by one) are darker and take the colour of the kind that fills most of their time.\n"
         "Labels: operation, micro-batch and, on ranks holding several stages, chunk (F3.c1); chunk 1 is lighter, chunk 2 darker.";
}

int TimelineWidget::header_width() const { return width() >= 1200 ? 200 : 150; }

int TimelineWidget::time_area_left() const { return header_width(); }
int TimelineWidget::time_area_width() const { return std::max(1, width() - header_width() - kScrollWidth); }
QRect TimelineWidget::overview_rect() const { return QRect(header_width(), 0, time_area_width(), kOverviewHeight); }
QRect TimelineWidget::ruler_rect() const { return QRect(header_width(), kOverviewHeight, time_area_width(), kRulerHeight); }
QRect TimelineWidget::legend_rect() const { return QRect(0, height() - legend_height(), width(), legend_height()); }
int TimelineWidget::content_top() const { return kOverviewHeight + kRulerHeight; }
int TimelineWidget::content_bottom() const { return height() - legend_height(); }
int TimelineWidget::scroll_offset() const { return scroll_->value(); }

int TimelineWidget::lane_layout_index(int rank, int series, int lane) const {
  if (!model_ || rank < 0 || rank >= model_->rank_count() || series < 0 || series >= model_->series_count() || lane < 0)
    return -1;
  const std::size_t slot = static_cast<std::size_t>(rank) * static_cast<std::size_t>(model_->series_count()) + static_cast<std::size_t>(series);
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
    if (collapsed_.size() != static_cast<std::size_t>(model_->rank_count())) collapsed_.assign(static_cast<std::size_t>(model_->rank_count()), 0);
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
      for (int s = 0; s < model_->series_count(); ++s)
        has_counters |= !model_->rank_counter_tracks(s, r).empty();
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
    const std::size_t slot_count = static_cast<std::size_t>(model_->rank_count()) * static_cast<std::size_t>(model_->series_count());
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
  if (!model_ || position.x() < header_width() || position.y() < content_top() || position.y() >= content_bottom())
    return std::nullopt;
  const int y = position.y() - content_top() + scroll_offset();
  const double t = view_.x_to_time(position.x() - header_width());
  auto hit = [&](const Row& row, int series) -> std::optional<std::pair<int, std::size_t>> {
    if (auto b = row.block_at(t, view_.us_per_pixel() * 2)) return std::pair<int, std::size_t>(series, row.blocks[*b].event);
    return std::nullopt;
  };
  for (const auto& l : lanes_) {
    if (y < l.y || y >= l.y + l.height) continue;
    if (l.lane < 0) return hit(compact_row(l.rank, l.series).row, l.series);
    const Row* row = model_->row(l.rank, l.series, l.lane);
    if (!row) return std::nullopt;
    const auto& painted = painted_[static_cast<std::size_t>(row - model_->rows().data())];
    if (painted.sub_rows.empty()) return hit(*row, l.series);
    // The sub-row under the position, as paint_lanes divides the lane.
    const int count = static_cast<int>(painted.sub_rows.size());
    const double sub_height = (l.height - 2) / static_cast<double>(count);
    const int sub = std::clamp(static_cast<int>((y - l.y - 1) / sub_height), 0, count - 1);
    return hit(painted.sub_rows[static_cast<std::size_t>(sub)], l.series);
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
  for (const auto& r : ranks_) {
    if (r.memory_y >= 0) paint_memory(p, r);
    if (r.counter_y >= 0) paint_counters(p, r);
  }
  if (show_critical_path_) paint_critical_path(p);
  if (show_flows_) paint_flows(p);
  if (range_) {
    const double x0 = header_width() + view_.time_to_x(range_->first), x1 = header_width() + view_.time_to_x(range_->second);
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
  draw_text(p, QRect(6, 0, header_width() - 12, kOverviewHeight), Qt::AlignVCenter | Qt::AlignLeft, "overview (busy share)");
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
      outline(p, pixel_rect(header_width() + x0, y + 1, header_width() + std::max(x1, x0 + 2), y + l.height - 1), color, 2);
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
      const double x0 = header_width() + std::max(-10.0, view_.time_to_x(e.ts_us));
      const double x1 = header_width() + std::min(time_area_width() + 10.0, view_.time_to_x(e.end_us()));
      const QPointF start(x0, lane.center().y());
      if (have_previous && std::fabs(previous.y() - start.y()) > 1) p.drawLine(previous, start);
      previous = QPointF(x1, lane.center().y());
      have_previous = true;
    }
  }
}

QString TimelineWidget::tooltip_text(int series, std::size_t index) const {
  const auto& e = model_->trace(series).events[index];
  QString text = QString::fromStdString(e.name) + "  (" +
                 QString::fromUtf8(kind_label(kind_of(e.kind)).data(), static_cast<int>(kind_label(kind_of(e.kind)).size())) + ")";
  text += "\n" + QString::fromStdString(model_->series_name(series)) + ", " + QString::fromStdString(model_->rank_name(e.rank)) +
          ", " + QString::fromStdString(model_->lane_name(e.rank, e.lane));
  if (e.stage >= 0) text += "\nstage " + QString::number(e.stage);
  if (const int chunk = chunk_of(series, e.rank, e.stage); chunk >= 0) text += " (chunk " + QString::number(chunk) + " of the rank)";
  if (e.micro_batch >= 0) text += (e.stage >= 0 ? ", micro-batch " : "\nmicro-batch ") + QString::number(e.micro_batch);
  text += "\nstart " + QString::fromStdString(format_duration_us(e.ts_us)) + ", duration " +
          QString::fromStdString(format_duration_us(e.dur_us));
  if (e.bytes >= 0) text += "\nbytes " + QString::number(e.bytes) + " (" + bytes_text(static_cast<double>(e.bytes)) + ")";
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
    } else if (const QString readout = memory_readout(help->pos()); !readout.isEmpty()) {
      QToolTip::showText(help->globalPos(), readout, this);
    } else if (model_ && help->pos().x() < header_width() && help->pos().y() >= content_top()) {
      QToolTip::showText(help->globalPos(), help_text(), this);
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
  // Over the rank names the wheel scrolls (as in any list); over the time area it zooms,
  // and scrolls with Shift (or Alt).
  if (event->position().x() < header_width() || (event->modifiers() & (Qt::ShiftModifier | Qt::AltModifier))) {
    const int by = event->angleDelta().y() != 0 ? event->angleDelta().y() : event->angleDelta().x();
    scroll_->setValue(scroll_->value() - static_cast<int>(by / 120.0 * kLaneHeight * 3));
    return;
  }
  view_.zoom_around(event->position().x() - header_width(), std::pow(1.25, steps));
  update();
}

void TimelineWidget::mousePressEvent(QMouseEvent* event) {
  if (!model_) return;
  press_position_ = event->pos();
  moved_ = false;
  if (overview_rect().contains(event->pos())) {
    drag_ = Drag::Overview;
    view_.center_on((event->pos().x() - header_width()) / static_cast<double>(time_area_width()) * view_.extent_us());
    update();
    return;
  }
  press_time_us_ = view_.x_to_time(event->pos().x() - header_width());
  drag_ = (event->modifiers() & Qt::ShiftModifier) || event->button() == Qt::RightButton ? Drag::Select : Drag::Pan;
}

void TimelineWidget::mouseMoveEvent(QMouseEvent* event) {
  if (drag_ == Drag::None) return;
  const QPoint delta = event->pos() - press_position_;
  if (delta.manhattanLength() > 3) moved_ = true;
  switch (drag_) {
    case Drag::Overview:
      view_.center_on((event->pos().x() - header_width()) / static_cast<double>(time_area_width()) * view_.extent_us());
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
      if (moved_) set_selection_range(press_time_us_, view_.x_to_time(event->pos().x() - header_width()));
      break;
    case Drag::None: break;
  }
}

void TimelineWidget::mouseReleaseEvent(QMouseEvent* event) {
  if (drag_ == Drag::Pan && !moved_ && event->pos().x() < header_width()) {
    // A click on a rank's name collapses or expands it.
    for (const auto& r : ranks_)
      if (rank_label_rect(r.rank).contains(event->pos())) {
        set_rank_collapsed(r.rank, !r.collapsed);
        break;
      }
  } else if (drag_ == Drag::Pan && !moved_) {
    if (auto hit = event_at(event->pos())) select_event(hit->first, hit->second, false);
  }
  drag_ = Drag::None;
}

void TimelineWidget::mouseDoubleClickEvent(QMouseEvent* event) {
  if (range_) {
    const double t = view_.x_to_time(event->pos().x() - header_width());
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
    case Qt::Key_C: set_compact(!compact()); return;
    default: return QWidget::keyPressEvent(event);
  }
  update();
}

}  // namespace pipescope::gui
