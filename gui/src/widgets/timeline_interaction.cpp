// How the timeline answers the mouse and keys: the event under a position (hit testing, also
// of sub-rows and compact rows), tooltips, wheel zoom and scroll, drag to pan or select, a
// click on a rank's name, and the W/S/A/D, Z, 0, Esc and C keys.
#include <QHelpEvent>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QScrollBar>
#include <QToolTip>
#include <QWheelEvent>

#include <algorithm>
#include <cmath>

#include "pipescope/gui/all_to_all_detail.hpp"
#include "pipescope/gui/kinds.hpp"
#include "pipescope/gui/time_ticks.hpp"
#include "timeline_paint_support.hpp"
#include "timeline_widget.hpp"

namespace pipescope::gui {

using namespace timeline_paint;

std::optional<std::pair<int, std::size_t>> TimelineWidget::event_at(QPoint position) const {
  if (!model_ || position.x() < header_width() || position.y() < content_top() || position.y() >= content_bottom())
    return std::nullopt;
  const int y = position.y() - content_top() + scroll_offset();
  const double t = view_.x_to_time(position.x() - header_width());
  auto hit = [&](const Row& row, int series) -> std::optional<std::pair<int, std::size_t>> {
    if (auto b = row.block_at(t, view_.us_per_pixel() * 2))
      return std::pair<int, std::size_t>(series, row.blocks[*b].event);
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

QString TimelineWidget::tooltip_text(int series, std::size_t index) const {
  const auto& e = model_->trace(series).events[index];
  QString text =
      QString::fromStdString(e.name) + "  (" +
      QString::fromUtf8(kind_label(kind_of(e.kind)).data(), static_cast<int>(kind_label(kind_of(e.kind)).size())) + ")";
  text += "\n" + QString::fromStdString(model_->series_name(series)) + ", " +
          QString::fromStdString(model_->rank_name(e.rank)) + ", " +
          QString::fromStdString(model_->lane_name(e.rank, e.lane));
  if (e.stage >= 0) text += "\nstage " + QString::number(e.stage);
  if (const int chunk = chunk_of(series, e.rank, e.stage); chunk >= 0)
    text += " (chunk " + QString::number(chunk) + " of the rank)";
  if (e.micro_batch >= 0) text += (e.stage >= 0 ? ", micro-batch " : "\nmicro-batch ") + QString::number(e.micro_batch);
  text += "\nstart " + QString::fromStdString(format_duration_us(e.ts_us)) + ", duration " +
          QString::fromStdString(format_duration_us(e.dur_us));
  if (e.bytes >= 0)
    text += "\nbytes " + QString::number(e.bytes) + " (" + bytes_text(static_cast<double>(e.bytes)) + ")";
  if (e.peer_rank >= 0) text += "\npeer rank " + QString::number(e.peer_rank);
  if (const auto exchange = all_to_all_detail(model_->trace(series), index))
    text += "\n" + QString::fromStdString(all_to_all_text(*exchange));
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
    case Qt::Key_Z:
    case Qt::Key_Return:
    case Qt::Key_Enter: zoom_to_selection(); return;
    case Qt::Key_0:
    case Qt::Key_Home: view_.show_all(); break;
    case Qt::Key_Escape: clear_selection_range(); return;
    case Qt::Key_C: set_compact(!compact()); return;
    default: return QWidget::keyPressEvent(event);
  }
  update();
}

}  // namespace pipescope::gui
