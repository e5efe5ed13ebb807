// The window at the smallest size it supports, its rank table and its exports, offscreen.
// 900x600 with the layout_example pair (predicted.json, measured.json: 2 ranks): the timeline, its
// legend and the docks lie inside the window; the timeline keeps most of the height (two
// ranks need little table); the rank table's error column and the summary's error column are
// in view. The synthetic 1F1B pair (4 ranks, rank 2 1.5x slower): the table has a row per
// rank, rank 2 flagged as the bottleneck; sorted by busy time (descending) rank 2 comes first,
// by error (ascending) too (-33.3%, the others 0). Exports: the view as PNG (loads, the
// timeline's size) and SVG (an XML document whose root is <svg>), the table as CSV (a header
// and 4 lines); a write into a missing folder fails naming the path and leaves no file.
// Clicking a measured receive that waited shows whom it waited for and how long.
#include <catch2/catch.hpp>

#include <QApplication>
#include <QDockWidget>
#include <QFile>
#include <QHeaderView>
#include <QImage>
#include <QLabel>
#include <QMouseEvent>
#include <QXmlStreamReader>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "main_window.hpp"
#include "rank_summary_table.hpp"
#include "pipescope/gui/time_ticks.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "test_application.hpp"
#include "timeline_widget.hpp"

using namespace pipescope::gui;
using namespace pipescope::traces;
namespace fs = std::filesystem;

namespace {

QString layout_example(const char* name) {
  return QString::fromStdString((fs::path(PIPESCOPE_SOURCE_DIR) / "traces/examples" / name).string());
}

fs::path scratch_dir() {
  fs::path dir = fs::temp_directory_path() / ("pipescope_test_window_layout_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

void settle(QWidget& window) {
  for (int i = 0; i < 5; ++i) QApplication::processEvents();
  window.updateGeometry();
  QApplication::processEvents();
}

// `widget`'s rectangle in `window` coordinates.
QRect in_window(const QWidget* widget, const QWidget& window) {
  return QRect(widget->mapTo(&window, QPoint(0, 0)), widget->size());
}

// Whether column `column` of `table` is wholly inside its viewport.
bool column_in_view(const QTableView& table, int column) {
  const QHeaderView* header = table.horizontalHeader();
  const int left = header->sectionViewportPosition(column);
  return left >= 0 && left + header->sectionSize(column) <= table.viewport()->width();
}

void show_synthetic_pair(MainWindow& window) {
  SyntheticPipeline pp;
  Trace predicted = make_1f1b_trace(pp);
  pp.slow_rank = 2;
  pp.slow_factor = 1.5;
  pp.source = "measured";
  window.show_traces(std::move(predicted), make_1f1b_trace(pp), "synthetic");
}

// Clicks the middle of event `index` of `series`, zoomed so that it is wide enough to hit.
void click_event(MainWindow& window, int series, std::size_t index) {
  TimelineWidget* timeline = window.timeline();
  const auto& e = timeline->model()->trace(series).events[index];
  timeline->zoom_to(e.ts_us - e.dur_us, e.end_us() + e.dur_us);
  const QRect lane = timeline->lane_rect(e.rank, series, e.lane);
  REQUIRE_FALSE(lane.isEmpty());
  const QPoint at(timeline->time_area_left() + static_cast<int>(timeline->view().time_to_x(e.ts_us + e.dur_us / 2)),
                  lane.center().y());
  REQUIRE(timeline->event_at(at) == std::make_pair(series, index));
  QMouseEvent press(QEvent::MouseButtonPress, QPointF(at), QPointF(timeline->mapToGlobal(at)), Qt::LeftButton,
                    Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(timeline, &press);
  QMouseEvent release(QEvent::MouseButtonRelease, QPointF(at), QPointF(timeline->mapToGlobal(at)), Qt::LeftButton,
                      Qt::NoButton, Qt::NoModifier);
  QApplication::sendEvent(timeline, &release);
}

}  // namespace

TEST_CASE("at 900x600 the timeline, legend and error columns are in view", "[window]") {
  testing::app();
  MainWindow window;
  window.resize(900, 600);
  window.show();
  REQUIRE_FALSE(window.open_files({layout_example("predicted.json"), layout_example("measured.json")}));
  settle(window);
  REQUIRE(window.size() == QSize(900, 600));
  const QRect inside = window.rect();
  const QRect timeline = in_window(window.timeline(), window);
  REQUIRE(inside.contains(timeline));
  REQUIRE(timeline.height() >= 300);  // two ranks: the tables take little
  const QRect legend = window.timeline()->legend_rect().translated(timeline.topLeft());
  REQUIRE_FALSE(legend.isEmpty());
  REQUIRE(inside.contains(legend));
  // The legend wraps: its last entry is on screen, not cut off at the right edge.
  const std::vector<QRect> entries = window.timeline()->legend_entry_rects();
  REQUIRE_FALSE(entries.empty());
  REQUIRE(inside.contains(entries.back().translated(timeline.topLeft())));
  // The ranks and the summary share one place (tabs): each is checked when it is in front.
  auto require_dock_inside = [&](QDockWidget* dock) {
    const QRect r = in_window(dock, window);
    INFO(dock->objectName().toStdString()
         << " at " << r.x() << "," << r.y() << " size " << r.width() << "x" << r.height());
    REQUIRE(dock->isVisible());
    REQUIRE(inside.contains(r));
  };
  require_dock_inside(window.details_dock());

  window.ranks_dock()->raise();
  settle(window);
  require_dock_inside(window.ranks_dock());
  RankSummaryTable* ranks = window.rank_table();
  REQUIRE(ranks->isVisible());
  REQUIRE(ranks->rowCount() == 2);
  REQUIRE(ranks->error_column() == 6);
  REQUIRE(column_in_view(*ranks, ranks->error_column()));

  window.summary_dock()->raise();
  settle(window);
  require_dock_inside(window.summary_dock());
  REQUIRE(window.summary_table()->isVisible());
  REQUIRE(window.summary_table()->columnCount() == 4);
  REQUIRE(column_in_view(*window.summary_table(), 3));
}

TEST_CASE("the rank table flags the bottleneck and sorts by value", "[window]") {
  testing::app();
  MainWindow window;
  window.show();
  show_synthetic_pair(window);
  settle(window);
  RankSummaryTable* table = window.rank_table();
  REQUIRE(table->rowCount() == 4);
  REQUIRE(table->columnCount() == 7);
  REQUIRE(table->horizontalHeaderItem(6)->text() == "error");

  table->sortByColumn(1, Qt::DescendingOrder);
  REQUIRE(table->item(0, 0)->text() == "rank 2  (bottleneck)");
  REQUIRE(table->item(0, 1)->text() == QString::fromStdString(format_duration_us(3600)));
  table->sortByColumn(6, Qt::AscendingOrder);
  REQUIRE(table->item(0, 0)->text().startsWith("rank 2"));
  REQUIRE(table->item(0, 6)->text() == "-33.3%");
  REQUIRE(table->item(1, 6)->text() == "+0.0%");
  table->sortByColumn(0, Qt::AscendingOrder);
  for (int row = 0; row < 4; ++row) REQUIRE(table->item(row, 0)->text().startsWith(QString("rank %1").arg(row)));
}

TEST_CASE("the view exports as PNG and SVG, the table as CSV", "[window]") {
  testing::app();
  MainWindow window;
  window.resize(1000, 700);
  window.show();
  show_synthetic_pair(window);
  settle(window);
  const fs::path dir = scratch_dir();

  const QString png = QString::fromStdString((dir / "view.png").string());
  REQUIRE_FALSE(window.export_view(png));
  QImage image;
  REQUIRE(image.load(png));
  REQUIRE(image.size() == window.timeline()->size() * window.timeline()->devicePixelRatio());

  if (MainWindow::can_export_svg()) {
    const QString svg = QString::fromStdString((dir / "view.svg").string());
    REQUIRE_FALSE(window.export_view(svg));
    QFile file(svg);
    REQUIRE(file.open(QIODevice::ReadOnly));
    QXmlStreamReader xml(&file);
    QString root;
    int elements = 0;
    while (!xml.atEnd()) {
      if (xml.readNext() == QXmlStreamReader::StartElement) {
        if (root.isEmpty()) root = xml.name().toString();
        ++elements;
      }
    }
    REQUIRE_FALSE(xml.hasError());
    REQUIRE(root == "svg");
    REQUIRE(elements > 10);  // the blocks, not an empty page
  }

  const QString csv = QString::fromStdString((dir / "ranks.csv").string());
  REQUIRE_FALSE(window.export_rank_table(csv));
  std::ifstream in(csv.toStdString());
  std::string line;
  REQUIRE(std::getline(in, line));
  REQUIRE(line == "rank,name,busy_us,idle_us,communication_us,predicted_busy_us,measured_busy_us,error,bottleneck");
  int rows = 0;
  while (std::getline(in, line)) ++rows;
  REQUIRE(rows == 4);

  const QString nowhere = QString::fromStdString((dir / "missing" / "ranks.csv").string());
  const auto error = window.export_rank_table(nowhere);
  REQUIRE(error);
  REQUIRE(error->contains(nowhere));
  REQUIRE_FALSE(fs::exists(nowhere.toStdString()));
  fs::remove_all(dir);
}

TEST_CASE("the details of a receive that waited name the sender and the wait", "[window]") {
  testing::app();
  MainWindow window;
  window.resize(1400, 900);
  window.show();
  REQUIRE_FALSE(window.open_files({layout_example("measured.json")}));
  settle(window);
  const TimelineModel* model = window.timeline()->model();
  const auto& events = model->trace(0).events;
  std::size_t receive = events.size();
  for (std::size_t i = 0; i < events.size(); ++i)
    if (events[i].name == "RECV_F" && events[i].rank == 1 && events[i].micro_batch == 0) receive = i;
  REQUIRE(receive < events.size());
  click_event(window, 0, receive);
  const QString text = window.details()->text();
  INFO(text.toStdString());
  REQUIRE(text.contains("RECV_F"));
  REQUIRE(text.contains(
      "waited <b>" + QString::fromStdString(format_duration_us(model->receive_wait(0, receive)->waited_for_send_us)) +
      "</b> for rank 0"));
  REQUIRE(text.contains("SEND_F"));
}

TEST_CASE("the details of a wait name its root: the slowed rank the chain of waits leads back to", "[window]") {
  testing::app();
  MainWindow window;
  window.resize(1400, 900);
  window.show();
  // A real pprun run whose rank 0 shared its core with CPU hogs (README, ppsim compare --explain).
  REQUIRE_FALSE(window.open_files({layout_example("slowed-rank0.json")}));
  settle(window);
  const TimelineModel* model = window.timeline()->model();
  const StepAttribution* attribution = model->step_attribution(0);
  REQUIRE(attribution);
  // The longest wait of another rank whose chain leads back to rank 0.
  const IdleGap* longest = nullptr;
  for (const IdleGap& gap : attribution->gaps)
    if (gap.waited && gap.rank != 0 && gap.cause.root_rank == 0 &&
        (!longest || gap.end_us - gap.start_us > longest->end_us - longest->start_us))
      longest = &gap;
  REQUIRE(longest);
  click_event(window, 0, longest->cause.receive);
  const QString text = window.details()->text();
  INFO(text.toStdString());
  REQUIRE(text.contains("leads back to <b>" + QString::fromStdString(model->rank_name(0)) + "</b>"));
  REQUIRE(text.contains(
      QString::fromStdString(describe_action(model->trace(0), longest->cause.root_event)).toHtmlEscaped()));
  // A send has no wait of its own to follow.
  std::size_t send = model->trace(0).events.size();
  for (std::size_t i = 0; i < model->trace(0).events.size(); ++i)
    if (model->trace(0).events[i].name == "SEND_F" && model->trace(0).events[i].rank == 0) send = i;
  REQUIRE(send < model->trace(0).events.size());
  click_event(window, 0, send);
  REQUIRE_FALSE(window.details()->text().contains("leads back to"));
}
