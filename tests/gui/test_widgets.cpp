// The viewer's widgets, offscreen. A predicted and a measured synthetic 1F1B trace (4 ranks,
// 8 micro-batches; measured rank 2 runs 1.5x slower) are written with write_trace and opened
// like a user would. The screenshot of the timeline is checked where things must be: the
// forward blue (0x4e79a7) and backward green (0x59a14f) in rank 0's predicted compute lane,
// the saturated "longer" red (0xd62728) in rank 2's measured compute lane under the
// difference view and not in rank 0's, kind colours in the measured lane without it, the
// bubble colour in the compute lanes, and the memory curves. Zoom (wheel, W/S keys, ranges)
// and search (next/previous) are driven through events; broken files are refused. The summary
// has a row for the receives' mean cost, predicted and measured. A measured
// trace that says the host took 10% of rank 0's step (stolen_time_s) gets a row per rank,
// rank 0's marked "disturbed".
#include <catch2/catch.hpp>

#include <QApplication>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QTableWidget>
#include <QWheelEvent>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "main_window.hpp"
#include "test_application.hpp"
#include "pipescope/gui/kinds.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "timeline_widget.hpp"

using namespace pipescope::gui;
using namespace pipescope::traces;
namespace fs = std::filesystem;

namespace {

using testing::app;

struct Files {
  std::string predicted, measured, dir;
};

const Files& trace_files() {
  static const Files files = [] {
    Files f;
    f.dir = (fs::temp_directory_path() / ("pipescope_test_gui_" + std::to_string(::getpid()))).string();
    fs::create_directories(f.dir);
    SyntheticPipeline pp;
    f.predicted = f.dir + "/predicted.json";
    write_trace(make_1f1b_trace(pp), f.predicted);
    pp.slow_rank = 2;
    pp.slow_factor = 1.5;
    pp.jitter = 0.02;
    pp.source = "measured";
    f.measured = f.dir + "/measured.json.gz";
    write_trace(make_1f1b_trace(pp), f.measured);
    return f;
  }();
  return files;
}

// The colours found inside a rectangle of an image.
std::set<QRgb> colours_in(const QImage& image, const QRect& area) {
  std::set<QRgb> found;
  const QRect clipped = area.intersected(image.rect());
  for (int y = clipped.top(); y <= clipped.bottom(); ++y)
    for (int x = clipped.left(); x <= clipped.right(); ++x) found.insert(image.pixel(x, y) & 0xffffff);
  return found;
}

bool has(const std::set<QRgb>& colours, std::uint32_t rgb) { return colours.count(rgb) > 0; }

struct Window {
  struct ApplicationFirst {
    ApplicationFirst() { app(); }
  } application_first;
  MainWindow window;
  Window() {
    window.resize(1400, 1200);
    REQUIRE_FALSE(window.open_files(
        {QString::fromStdString(trace_files().predicted), QString::fromStdString(trace_files().measured)}));
    window.show();
    QApplication::processEvents();
  }
  TimelineWidget& timeline() { return *window.timeline(); }
  QImage widget_shot() { return timeline().grab().toImage(); }
};

}  // namespace

TEST_CASE("a predicted/measured pair is drawn in the expected lanes", "[widgets]") {
  Window w;
  TimelineWidget& t = w.timeline();
  const QImage image = w.widget_shot();
  REQUIRE(image.width() == t.width());
  REQUIRE(image.height() == t.height());
  REQUIRE(t.width() > 1000);

  const QRect predicted0 = t.lane_rect(0, 0, 0), measured0 = t.lane_rect(0, 1, 0), measured2 = t.lane_rect(2, 1, 0);
  REQUIRE(predicted0.height() > 0);
  REQUIRE(measured0.top() > predicted0.top());  // measured lanes below predicted ones
  const auto p0 = colours_in(image, predicted0);
  REQUIRE(has(p0, kind_rgb(Kind::Forward)));
  REQUIRE(has(p0, kind_rgb(Kind::Backward)));
  REQUIRE(has(p0, kBubbleRgb));
  REQUIRE_FALSE(has(p0, difference_rgb(0.5)));
  // Difference view (on by default): rank 2 ran 50% longer than predicted, rank 0 about the same.
  const auto m2 = colours_in(image, measured2);
  REQUIRE(has(m2, difference_rgb(0.5)));
  REQUIRE_FALSE(has(colours_in(image, measured0), difference_rgb(0.5)));
  // Send/receive lanes hold the communication colour.
  REQUIRE(has(colours_in(image, t.lane_rect(0, 0, 1)), kind_rgb(Kind::Communication)));
  // Memory curves: the measured one is solid orange.
  const QRect memory = t.memory_rect(0);
  REQUIRE(memory.height() > 0);
  bool orange = false;
  for (QRgb c : colours_in(image, memory))
    orange = orange || (qRed(c) > 200 && qGreen(c) > 100 && qGreen(c) < 180 && qBlue(c) < 100);
  REQUIRE(orange);

  w.window.set_difference(false);
  QApplication::processEvents();
  const auto plain = colours_in(w.widget_shot(), measured2);
  REQUIRE(has(plain, kind_rgb(Kind::Forward)));
  REQUIRE_FALSE(has(plain, difference_rgb(0.5)));

  // The summary table holds iteration time, per-rank bubbles and peak memory.
  QTableWidget* table = w.window.summary_table();
  REQUIRE(table->columnCount() == 4);
  REQUIRE(table->rowCount() == 5 + 4 + 4 + 1);
  REQUIRE(table->item(0, 0)->text() == "iteration time");
  REQUIRE(table->item(0, 3)->text().startsWith("-"));  // the prediction is shorter than the measurement
  REQUIRE(table->item(2, 0)->text() == "op duration MAPE");
  REQUIRE(table->item(3, 0)->text() == "op duration error, weighted");
  REQUIRE(table->item(3, 3)->text().endsWith("%"));
  // The synthetic receives start as their sends are posted: every one had its data sent before
  // it; rank 2's slower sends make the measured mean longer. None waited: no row for those.
  REQUIRE(table->item(13, 0)->text() == "receive, data sent before (mean)");
  REQUIRE(table->item(13, 3)->text().startsWith("-"));
}

TEST_CASE("the summary says how much of the measured step the host took (steal)", "[widgets]") {
  app();
  SyntheticPipeline pp;
  const Trace predicted = make_1f1b_trace(pp);
  pp.source = "measured";
  Trace measured = make_1f1b_trace(pp);
  const double step_s = iteration_time_us(measured) * 1e-6;
  measured.meta.run.stolen_time_s = {0.1 * step_s, 0.0, 0.0, 0.0};  // rank 0 lost 10%
  const std::string dir = trace_files().dir;
  write_trace(predicted, dir + "/steal-predicted.json");
  write_trace(measured, dir + "/steal-measured.json");
  MainWindow window;
  REQUIRE_FALSE(window.open_files(
      {QString::fromStdString(dir + "/steal-predicted.json"), QString::fromStdString(dir + "/steal-measured.json")}));
  QTableWidget* table = window.summary_table();
  REQUIRE(table->rowCount() == 5 + 4 + 4 + 4 + 1);
  REQUIRE(table->item(13, 0)->text() == "rank 0 stolen by the host");
  REQUIRE(table->item(13, 2)->text() == "10.0%");
  REQUIRE(table->item(13, 3)->text() == "disturbed");
  REQUIRE(table->item(14, 2)->text() == "0.0%");
  REQUIRE(table->item(14, 3)->text().isEmpty());
  REQUIRE(table->item(17, 0)->text() == "receive, data sent before (mean)");
  REQUIRE(table->item(17, 1)->text() == table->item(17, 2)->text());  // the same receives on both sides
}

TEST_CASE("wheel and keys zoom around the cursor and pan", "[widgets]") {
  Window w;
  TimelineWidget& t = w.timeline();
  const double full = t.view().span_us();
  const QPointF at(t.time_area_left() + t.time_area_width() / 4.0, t.lane_rect(0, 0, 0).center().y());
  const double time_under = t.view().x_to_time(at.x() - t.time_area_left());
  QWheelEvent wheel(at, t.mapToGlobal(at), QPoint(), QPoint(0, 120 * 3), Qt::NoButton, Qt::NoModifier,
                    Qt::NoScrollPhase, false);
  QApplication::sendEvent(&t, &wheel);
  REQUIRE(t.view().span_us() == Approx(full / std::pow(1.25, 3)));
  REQUIRE(t.view().x_to_time(at.x() - t.time_area_left()) == Approx(time_under));

  const double before = t.view().span_us();
  QKeyEvent w_key(QEvent::KeyPress, Qt::Key_W, Qt::NoModifier, "w");
  QApplication::sendEvent(&t, &w_key);
  REQUIRE(t.view().span_us() == Approx(before / 1.5));
  const double start = t.view().visible_start_us();
  QKeyEvent d_key(QEvent::KeyPress, Qt::Key_D, Qt::NoModifier, "d");
  QApplication::sendEvent(&t, &d_key);
  REQUIRE(t.view().visible_start_us() > start);
  QKeyEvent s_key(QEvent::KeyPress, Qt::Key_S, Qt::NoModifier, "s");
  for (int i = 0; i < 20; ++i) QApplication::sendEvent(&t, &s_key);
  REQUIRE(t.view().span_us() == Approx(full));

  // A selected range reports its length and zooms to it.
  t.set_selection_range(1000, 1500);
  REQUIRE(w.window.details()->text().contains("500 us"));
  t.zoom_to_selection();
  REQUIRE(t.view().visible_start_us() == Approx(1000));
  REQUIRE(t.view().visible_end_us() == Approx(1500));
  // Zoomed in, the blocks are wide and labelled; the picture still has the kind colours.
  const auto zoomed = colours_in(w.widget_shot(), t.lane_rect(0, 0, 0));
  REQUIRE((has(zoomed, kind_rgb(Kind::Forward)) || has(zoomed, kind_rgb(Kind::Backward))));
}

TEST_CASE("search steps through matches and selects them", "[widgets]") {
  Window w;
  w.window.search_box()->setText("B mb 3");
  w.window.find_next();
  REQUIRE(w.window.search_hits().size() == 20);
  REQUIRE(w.window.current_hit() == 0);
  const auto first = w.timeline().selected_event();
  REQUIRE(first.has_value());
  const auto& model = *w.timeline().model();
  const auto& e = model.trace(first->first).events[first->second];
  REQUIRE(e.micro_batch == 3);
  REQUIRE(w.window.details()->text().contains("micro-batch 3"));
  // The view is centred on it.
  REQUIRE(w.timeline().view().visible_start_us() <= e.ts_us);
  REQUIRE(w.timeline().view().visible_end_us() >= e.end_us());
  w.window.find_next();
  REQUIRE(w.window.current_hit() == 1);
  w.window.find_previous();
  w.window.find_previous();
  REQUIRE(w.window.current_hit() == 19);  // wraps around
}

TEST_CASE("hover and click find the event under the mouse", "[widgets]") {
  Window w;
  TimelineWidget& t = w.timeline();
  const QRect lane = t.lane_rect(0, 0, 0);
  // Rank 0's first forward is at [0, 100] us: the pixel at 50 us is inside it.
  const int x = t.time_area_left() + static_cast<int>(t.view().time_to_x(50));
  const auto hit = t.event_at(QPoint(x, lane.center().y()));
  REQUIRE(hit.has_value());
  const auto& e = t.model()->trace(hit->first).events[hit->second];
  REQUIRE(e.name == "F");
  REQUIRE(e.micro_batch == 0);
  REQUIRE_FALSE(t.event_at(QPoint(5, lane.center().y())).has_value());  // the header column
}

TEST_CASE("critical path and arrows draw on demand", "[widgets]") {
  Window w;
  const auto before = colours_in(w.widget_shot(), w.timeline().rect());
  REQUIRE_FALSE(has(before, kCriticalPathRgb));
  w.window.set_critical_path(true);
  w.window.set_flows(true);
  QApplication::processEvents();
  const auto after = colours_in(w.widget_shot(), w.timeline().lane_rect(0, 0, 0));
  REQUIRE(has(after, kCriticalPathRgb));
}

TEST_CASE("broken traces are refused with a readable message", "[widgets]") {
  app();
  MainWindow window;
  const std::string broken = trace_files().dir + "/broken.json";
  std::ofstream(broken) << "{\"traceEvents\": [{\"ph\": \"X\", \"ts\": ";
  const auto error = window.open_files({QString::fromStdString(broken)});
  REQUIRE(error.has_value());
  REQUIRE(error->contains("broken.json"));
  REQUIRE(error->contains("truncated"));
  REQUIRE(window.timeline()->model() == nullptr);
  REQUIRE(window.open_files({"a", "b", "c"})->contains("one trace"));
  // A good file after a broken one opens and joins the recent files.
  REQUIRE_FALSE(window.open_files({QString::fromStdString(trace_files().predicted)}));
  REQUIRE(window.recent_files().front().endsWith("predicted.json"));
}
