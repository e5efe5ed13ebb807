// The timeline: an overview strip, a time ruler, one row group per rank (for each series its
// lanes, predicted above measured, overlapping blocks stacked in sub-rows), a memory row per
// rank and a legend. A rank can be collapsed to one compact row (its compute and collective
// lanes merged); many ranks start collapsed. Paints only what is visible and merges blocks
// narrower than a few pixels by what fills their time (lane_detail.hpp); zoom and pan live in
// a ViewState. Wheel zooms around the cursor (scrolls over the rank names or with Shift), drag
// pans, shift-drag selects a range, W/S/A/D, C toggles the compact view; help_text() says it.
#pragma once

#include <QHash>
#include <QImage>
#include <QStaticText>
#include <QWidget>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "pipescope/gui/lane_detail.hpp"
#include "pipescope/gui/memory_scale.hpp"
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

  // Compact view: every rank one row (its compute and collective lanes merged), or every
  // rank expanded. Traces of many ranks open compact.
  void set_compact(bool on);
  bool compact() const;
  // One rank collapsed to its compact row or expanded (clicking its name does the same).
  void set_rank_collapsed(int rank, bool collapsed);
  bool rank_collapsed(int rank) const;
  static constexpr int kCompactFromRanks = 16;
  // How to drive the view, for tooltips and the help menu.
  static QString help_text();

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
  // The rank's name row in the header column (its compact row when collapsed).
  QRect rank_label_rect(int rank) const;
  // How many sub-rows a lane stacks its overlapping blocks in (1 when none overlap).
  int lane_sub_rows(int rank, int series, int lane) const;
  // The memory readout under a position in a memory row ("rank 0 at 1.20 ms: ..."), or empty.
  QString memory_readout(QPoint position) const;
  QRect legend_rect() const;
  // Where each legend entry (swatch and text) lies, in widget coordinates, in legend order.
  std::vector<QRect> legend_entry_rects() const;
  // The rank's counter row in widget coordinates (empty when it has no counters or is collapsed).
  QRect counter_rect(int rank) const;
  int header_width() const;
  // A block's label at a level of detail: 0 "F3.c1" (operation, micro-batch, chunk of a rank
  // holding several stages), 1 "F3", 2 "3"; the widest that fits is drawn, for every kind alike.
  QString block_label(int series, std::size_t event, int level) const;
  // The event under a widget position, as (series, event index).
  std::optional<std::pair<int, std::size_t>> event_at(QPoint position) const;
  // What the tooltip over an event says (its kind, place, times, bytes and peers, prediction).
  QString tooltip_text(int series, std::size_t event) const;

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
    int lane = 0;  // -1: the rank's compact row (its lanes merged)
    int y = 0;     // in content coordinates (before scrolling)
    int height = 0;
  };
  struct RankLayout {
    int rank = 0;
    int header_y = 0;
    int header_height = 0;
    int memory_y = -1;  // -1: no memory row
    bool collapsed = false;
    int counter_y = -1;  // -1: no counter row (plain traces' "C" events other than memory)
  };
  // What a lane paints: the model's row, or its overlapping blocks dealt to sub-rows, each
  // with the running sums that let merged spans say what fills them.
  struct PaintedLane {
    std::vector<Row> sub_rows;      // empty: the model's row is painted as it is
    std::vector<RowTally> tallies;  // one per painted row
  };
  struct CompactRow {
    Row row;
    RowTally tally;
  };

  void relayout();
  int content_top() const;     // first pixel below the ruler
  int content_bottom() const;  // first pixel of the legend
  int scroll_offset() const;

  void paint_overview(class QPainter& p) const;
  void paint_ruler(class QPainter& p) const;
  void paint_lanes(class QPainter& p, const QRect& dirty) const;
  // One row of blocks into `area`: merged spans first (one strip), then whole blocks with
  // their labels on top.
  void paint_row(class QPainter& p, const Row& row, const RowTally& tally, const QRect& area, bool difference) const;
  void paint_instants(class QPainter& p, int rank, int series, int lane, const QRect& area) const;
  void paint_counters(class QPainter& p, const RankLayout& rank) const;
  int chunk_of(int series, int rank, int stage) const;
  void paint_memory(class QPainter& p, const RankLayout& rank) const;
  void paint_memory_axis(class QPainter& p, const RankLayout& rank) const;
  int memory_height() const;
  void paint_flows(class QPainter& p) const;
  void paint_critical_path(class QPainter& p) const;
  void paint_headers(class QPainter& p) const;
  void paint_legend(class QPainter& p) const;
  struct LegendEntry {
    QColor color;
    QString text;
    enum class Swatch { Box, Hatched, Line } swatch = Swatch::Box;
    int series = 0;  // for Swatch::Line: whose memory pen
  };
  std::vector<LegendEntry> legend_entries() const;
  // Whether a series has all-to-all events (on their lane, or on the collectives lane of an
  // older trace): the legend names their four colours only then.
  bool has_all_to_all_ = false;
  // The legend's entries wrap onto as many lines as the width needs; measured in relayout()
  // (content_bottom() asks for it many times per repaint).
  int legend_height() const { return legend_height_; }
  int measure_legend_height() const;
  std::vector<QRect> legend_entry_rects(int top) const;
  int legend_height_ = 22;
  const CompactRow& compact_row(int rank, int series) const;
  void build_painted_lanes();

  std::shared_ptr<const TimelineModel> model_;
  ViewState view_;
  std::vector<LaneLayout> lanes_;
  // lanes_ of (rank, series) are lanes_[first_lane_[rank * series_count + series] ..] up to the
  // next entry, in lane order (one entry of lane -1 for a collapsed rank): flat, no allocation per rank.
  std::vector<int> first_lane_;
  int lane_layout_index(int rank, int series, int lane) const;  // lanes_ index, or -1
  std::vector<RankLayout> ranks_;
  std::vector<char> collapsed_;       // per rank
  std::vector<PaintedLane> painted_;  // parallel to the model's rows
  // [rank][series], merged when first needed (the compact view or a collapsed rank).
  mutable std::vector<std::vector<std::unique_ptr<CompactRow>>> compact_rows_;
  std::vector<std::vector<std::vector<int>>> stage_chunks_;  // [series][rank]: sorted stages the rank holds
  std::vector<MemoryRange> memory_ranges_;                   // per rank
  int content_height_ = 0;
  QScrollBar* scroll_ = nullptr;

  bool show_difference_ = true;
  bool show_flows_ = false;
  bool show_critical_path_ = false;
  std::vector<std::vector<std::size_t>> critical_path_;  // per series, event indices
  // The critical path's events as rows parallel to the model's rows, so a repaint folds
  // them per pixel like the blocks (visit_visible) instead of visiting every step.
  std::vector<Row> critical_rows_;
  std::vector<std::vector<float>> overview_density_;  // per series
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
