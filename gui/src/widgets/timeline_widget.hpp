// The timeline: an overview strip, a time ruler, one row group per rank (for each series its
// lanes, predicted above measured), a memory row per rank and a legend. Paints only what is
// visible and folds blocks narrower than a few pixels (visit_visible); zoom and pan live in a
// ViewState. Wheel zooms around the cursor, drag pans, shift-drag selects a range, W/S/A/D.
#pragma once

#include <QHash>
#include <QImage>
#include <QStaticText>
#include <QWidget>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "pipescope/gui/timeline_model.hpp"
#include "pipescope/gui/view_state.hpp"

class QScrollBar;

namespace pipescope::gui {

class TimelineWidget : public QWidget {
  Q_OBJECT

 public:
  explicit TimelineWidget(QWidget* parent = nullptr);

  void set_model(std::shared_ptr<const TimelineModel> model);
  const TimelineModel* model() const { return model_.get(); }
  ViewState& view() { return view_; }
  const ViewState& view() const { return view_; }

  void set_show_difference(bool on);
  void set_show_flows(bool on);
  void set_show_critical_path(bool on);
  bool show_difference() const { return show_difference_; }

  void zoom_to(double start_us, double end_us);
  void show_all();
  // Selects an event (outlined, details shown) and, when asked, centres the view on it.
  void select_event(int series, std::size_t event, bool center);
  std::optional<std::pair<int, std::size_t>> selected_event() const { return selected_; }
  void set_selection_range(double start_us, double end_us);
  void clear_selection_range();
  void zoom_to_selection();

  // Layout, in widget coordinates (for tests and for the main window).
  int time_area_left() const;
  int time_area_width() const;
  QRect overview_rect() const;
  QRect ruler_rect() const;
  // The lane's rectangle over the time area, scrolled; empty when the lane is not shown.
  QRect lane_rect(int rank, int series, int lane) const;
  QRect memory_rect(int rank) const;
  QRect legend_rect() const;
  // The event under a widget position, as (series, event index).
  std::optional<std::pair<int, std::size_t>> event_at(QPoint position) const;

 signals:
  void event_clicked(int series, qulonglong event);
  void range_selected(double start_us, double end_us);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  bool event(QEvent* event) override;

 private:
  struct LaneLayout {
    int rank = 0;
    int series = 0;
    int lane = 0;
    int y = 0;  // in content coordinates (before scrolling)
    int height = 0;
  };
  struct RankLayout {
    int rank = 0;
    int header_y = 0;
    int memory_y = -1;  // -1: no memory row
  };

  void relayout();
  int content_top() const;     // first pixel below the ruler
  int content_bottom() const;  // first pixel of the legend
  int scroll_offset() const;

  void paint_overview(class QPainter& p) const;
  void paint_ruler(class QPainter& p) const;
  void paint_lanes(class QPainter& p, const QRect& dirty) const;
  void paint_memory(class QPainter& p, const RankLayout& rank) const;
  void paint_flows(class QPainter& p) const;
  void paint_critical_path(class QPainter& p) const;
  void paint_headers(class QPainter& p) const;
  void paint_legend(class QPainter& p) const;
  QString tooltip_text(int series, std::size_t event) const;

  std::shared_ptr<const TimelineModel> model_;
  ViewState view_;
  std::vector<LaneLayout> lanes_;
  std::vector<std::vector<std::vector<int>>> lane_index_;  // [rank][series][lane] -> lanes_ index or -1
  std::vector<RankLayout> ranks_;
  int content_height_ = 0;
  QScrollBar* scroll_ = nullptr;

  bool show_difference_ = true;
  bool show_flows_ = false;
  bool show_critical_path_ = false;
  std::vector<std::vector<std::size_t>> critical_path_;   // per series, event indices
  // The critical path's events as rows parallel to the model's rows, so a repaint folds
  // them per pixel like the blocks (visit_visible) instead of visiting every step.
  std::vector<Row> critical_rows_;
  std::vector<std::vector<float>> overview_density_;      // per series
  // The overview's bars, drawn once per size and model (2,000 rectangles otherwise).
  mutable QImage overview_image_;
  // Block labels ("F3", "12") and header texts laid out once: text layout is the dearest
  // part of a repaint.
  mutable QHash<QString, QStaticText> label_cache_;
  const QStaticText& static_text(const QString& text, const QFont& font) const;
  void draw_text(class QPainter& p, const QRect& box, Qt::Alignment align, const QString& text) const;

  std::optional<std::pair<int, std::size_t>> selected_;
  std::optional<std::pair<double, double>> range_;

  enum class Drag { None, Pan, Select, Overview };
  Drag drag_ = Drag::None;
  QPoint press_position_;
  double press_time_us_ = 0;
  bool moved_ = false;
};

}  // namespace pipescope::gui
