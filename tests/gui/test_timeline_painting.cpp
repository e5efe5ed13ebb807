// The timeline's painting checked by pixels, offscreen, at fixed sizes. Rank 0 runs 400
// operations of one kind, each right after a tiny one of another kind (a zero-length LOAD, or
// a 0.14 us op): at every zoom from the whole iteration down to one operation, the middle of
// each big operation is painted in the big kind's colour (plain, chunk shade or merged), and
// the tiny kind covers almost nothing. A measured W 100 us long on time after an I 0.14 us 10x
// late is not shaded "longer". Two overlapping sends are stacked in two sub-rows, each
// clickable. A memory curve of 1,000..1,500 bytes fills its row (not zero-based) and reads in
// bytes. 64 ranks open compact and fit a 900x600 widget; the wheel over the rank names scrolls,
// a click on a name expands the rank. Labels carry micro-batch and chunk. Far out, a merged
// F/B run gives the backward (two thirds of the time) the upper rows and the forward the rest.
#include <catch2/catch.hpp>

#include <QApplication>
#include <QMouseEvent>
#include <QScrollBar>
#include <QWheelEvent>

#include <map>
#include <memory>
#include <set>

#include "pipescope/gui/kinds.hpp"
#include "pipescope/gui/timeline_model.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "test_application.hpp"
#include "timeline_widget.hpp"

using namespace pipescope::gui;
using namespace pipescope::traces;

namespace {

TraceEvent op(const std::string& name, double ts_us, double dur_us, int micro_batch, int lane = 0, int rank = 0, int stage = 0) {
  TraceEvent e;
  e.rank = rank;
  e.lane = lane;
  e.name = name;
  e.kind = event_kind_from_name(e.name);  // as a reader would parse it
  e.category = "compute";
  e.ts_us = ts_us;
  e.dur_us = dur_us;
  e.stage = stage;
  e.micro_batch = micro_batch;
  return e;
}

struct Shown {
  std::shared_ptr<TimelineModel> model = std::make_shared<TimelineModel>();
  std::unique_ptr<TimelineWidget> widget;
  Shown(Trace first, std::optional<Trace> second = std::nullopt, QSize size = QSize(1000, 400)) {
    testing::app();
    model->set_traces(std::move(first), std::move(second));
    widget = std::make_unique<TimelineWidget>();
    widget->resize(size);
    widget->set_model(model);
  }
  QImage shot() const { return widget->grab().toImage(); }
};

// The colours a block of `kind` may be painted in (chunk 0).
std::set<QRgb> shades_of(Kind kind) { return {kind_rgb(kind), merged_rgb(kind_rgb(kind))}; }

QRgb at(const QImage& image, int x, int y) { return image.pixel(x, y) & 0xffffff; }

// Whether `c` is one of `shades`, or one of them under a grid line of the time ruler (black at
// alpha 22 across the lanes at round times).
bool is_shade(QRgb c, const std::set<QRgb>& shades) {
  for (const QRgb s : shades) {
    if (c == s) return true;
    auto under_grid = [&](int channel) { return channel * (255 - 22) / 255; };
    if (std::abs(qRed(c) - under_grid(qRed(s))) <= 2 && std::abs(qGreen(c) - under_grid(qGreen(s))) <= 2 &&
        std::abs(qBlue(c) - under_grid(qBlue(s))) <= 2)
      return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a big operation keeps its colour next to a tiny one at every zoom", "[painting]") {
  struct Pair {
    const char* tiny;
    double tiny_us;
    const char* big;
  };
  for (const Pair pair : {Pair{"LOAD", 0, "F"}, Pair{"I", 0.14, "W"}, Pair{"LOAD", 0, "B"}, Pair{"W", 0.14, "I"},
                          Pair{"LOAD", 0, "OPTIMIZER"}, Pair{"I", 0.14, "SEND_F"}, Pair{"I", 0.14, "LOAD"}}) {
    const Kind big = kind_of(event_kind_from_name(pair.big)), tiny = kind_of(event_kind_from_name(pair.tiny));
    Trace trace;
    constexpr int kPairs = 400;
    constexpr double kBigUs = 20, kGapUs = 5;
    for (int i = 0; i < kPairs; ++i) {
      const double start = i * (pair.tiny_us + kBigUs + kGapUs);
      trace.events.push_back(op(pair.tiny, start, pair.tiny_us, i));
      trace.events.push_back(op(pair.big, start + pair.tiny_us, kBigUs, i));
    }
    Shown shown(trace);
    TimelineWidget& t = *shown.widget;
    const QRect lane = t.lane_rect(0, 0, 0);
    REQUIRE(lane.height() > 0);
    const double period = pair.tiny_us + kBigUs + kGapUs;
    // The whole iteration (a pair is 2 px), then closer until one pair fills the view.
    for (const double span_us : {kPairs * period, 100 * period, 20 * period, 4 * period, period}) {
      t.zoom_to(0, span_us);
      const QImage image = shown.shot();
      INFO(pair.tiny << " then " << pair.big << ", view of " << span_us << " us");
      std::map<QRgb, int> counts;
      for (int x = lane.left(); x < lane.left() + t.time_area_width(); ++x) ++counts[at(image, x, lane.center().y())];
      int big_pixels = 0, tiny_pixels = 0;
      for (const QRgb c : shades_of(big)) big_pixels += counts[c];
      for (const QRgb c : shades_of(tiny)) tiny_pixels += counts[c];
      REQUIRE(big_pixels > 0);
      // The tiny kind is at most a sliver: never a colour a user would read as its own.
      REQUIRE(tiny_pixels * 20 <= big_pixels);
      // The middle of each big operation in view is the big kind (a quarter in, where it
      // is wide enough for a label in the middle).
      const bool labelled = t.view().time_to_x(kBigUs) - t.view().time_to_x(0) >= 20;
      for (int i = 0; i < kPairs; ++i) {
        const double middle = i * period + pair.tiny_us + kBigUs * (labelled ? 0.25 : 0.5);
        if (middle > span_us) break;
        const int x = lane.left() + static_cast<int>(t.view().time_to_x(middle));
        INFO("operation " << i);
        // Labelled blocks are read on their top row, above the text.
        REQUIRE(is_shade(at(image, x, labelled ? lane.top() + 2 : lane.center().y()), shades_of(big)));
      }
    }
  }
}

TEST_CASE("difference shading follows time, not a tiny late operation", "[painting]") {
  Trace predicted, measured;
  constexpr int kPairs = 300;
  for (int i = 0; i < kPairs; ++i) {
    const double start = i * 120.0;
    predicted.events.push_back(op("I", start, 0.014, i));
    predicted.events.push_back(op("W", start + 0.14, 100, i));
    measured.events.push_back(op("I", start, 0.14, i));  // ten times the prediction
    measured.events.push_back(op("W", start + 0.14, 100, i));
  }
  measured.meta.source = "measured";
  Shown shown(predicted, measured);
  TimelineWidget& t = *shown.widget;
  REQUIRE(t.show_difference());
  const QRect lane = t.lane_rect(0, 1, 0);
  for (const double span_us : {kPairs * 120.0, 30 * 120.0, 3 * 120.0}) {
    t.zoom_to(0, span_us);
    const QImage image = shown.shot();
    INFO("view of " << span_us << " us");
    int reddish = 0, painted = 0;
    for (int x = lane.left(); x < lane.left() + t.time_area_width(); ++x) {
      const QRgb c = at(image, x, lane.center().y());
      if (qRed(c) - qBlue(c) > 60) ++reddish;
      ++painted;
    }
    REQUIRE(reddish * 50 <= painted);  // at most a sliver per I, never a red W
    const int x = lane.left() + static_cast<int>(t.view().time_to_x(60));
    const QRgb middle = at(image, x, lane.center().y());
    REQUIRE(std::abs(qRed(middle) - qBlue(middle)) < 30);  // the W on time: grey-white
  }
}

TEST_CASE("overlapping sends of one lane are stacked, not painted over each other", "[painting]") {
  Trace trace;
  trace.events.push_back(op("F", 0, 100, 0));
  trace.events.push_back(op("SEND_F", 100, 300, 0, 1));
  trace.events.push_back(op("SEND_F", 200, 300, 1, 1));
  Shown shown(trace);
  TimelineWidget& t = *shown.widget;
  REQUIRE(t.lane_sub_rows(0, 0, 1) == 2);
  REQUIRE(t.lane_sub_rows(0, 0, 0) == 1);
  const QRect lane = t.lane_rect(0, 0, 1);
  REQUIRE(lane.height() > t.lane_rect(0, 0, 0).height());
  const QImage image = shown.shot();
  const int x = lane.left() + static_cast<int>(t.view().time_to_x(300));  // both run here
  const int upper = lane.top() + lane.height() / 4, lower = lane.top() + lane.height() * 3 / 4;
  REQUIRE(is_shade(at(image, x, upper), {kind_rgb(Kind::Communication)}));
  REQUIRE(is_shade(at(image, x, lower), {kind_rgb(Kind::Communication)}));
  const auto first = t.event_at(QPoint(x, upper)), second = t.event_at(QPoint(x, lower));
  REQUIRE(first.has_value());
  REQUIRE(second.has_value());
  REQUIRE(t.model()->trace(0).events[first->second].micro_batch == 0);
  REQUIRE(t.model()->trace(0).events[second->second].micro_batch == 1);
}

TEST_CASE("the memory row is scaled to its range, with an axis and a readout in bytes", "[painting][memory]") {
  Trace trace;
  trace.events.push_back(op("F", 0, 1000, 0));
  for (int i = 0; i <= 10; ++i) trace.memory.push_back({0, i * 100.0, 1000 + 50 * i});
  Shown shown(trace);
  TimelineWidget& t = *shown.widget;
  const QRect memory = t.memory_rect(0);
  REQUIRE(memory.height() >= 60);
  const QImage image = shown.shot();
  // The orange curve runs from near the bottom to near the top: 1,000..1,500 fills the row.
  int top = memory.bottom(), bottom = memory.top();
  for (int y = memory.top(); y <= memory.bottom(); ++y)
    for (int x = memory.left(); x < memory.right(); ++x) {
      const QRgb c = at(image, x, y);
      if (qRed(c) > 200 && qGreen(c) > 100 && qGreen(c) < 180 && qBlue(c) < 100) {
        top = std::min(top, y);
        bottom = std::max(bottom, y);
      }
    }
  REQUIRE(bottom - top >= memory.height() * 3 / 4);
  const int x = memory.left() + static_cast<int>(t.view().time_to_x(550));
  const QString readout = t.memory_readout(QPoint(x, memory.center().y()));
  INFO(readout.toStdString());
  REQUIRE(readout.contains("1.22 KiB"));  // 1,250 bytes held from 500 us
  REQUIRE_FALSE(readout.contains("MiB"));
  REQUIRE(t.memory_readout(QPoint(x, memory.top() - 30)).isEmpty());
}

TEST_CASE("64 ranks open compact and fit a 900x600 view; the wheel over names scrolls", "[painting][ranks]") {
  SyntheticPipeline pp;
  pp.num_ranks = 64;
  pp.num_micro_batches = 64;
  Shown shown(make_1f1b_trace(pp), std::nullopt, QSize(900, 600));
  TimelineWidget& t = *shown.widget;
  REQUIRE(t.compact());
  const QRect first = t.lane_rect(0, 0, 0), last = t.lane_rect(63, 0, 0);
  REQUIRE(first.height() > 0);
  REQUIRE(last.bottom() < t.legend_rect().top());  // every rank on screen
  REQUIRE(t.legend_rect().top() > t.height() / 2);
  REQUIRE(t.legend_rect().height() >= 44);  // 900 px wide: the legend wraps instead of being cut
  REQUIRE(t.header_width() < 200);
  // Each compact row shows its rank's work in the kind colours.
  const QImage image = shown.shot();
  std::set<QRgb> seen;
  for (int x = first.left(); x < first.right(); ++x) seen.insert(at(image, x, t.lane_rect(10, 0, 0).center().y()));
  bool compute = false;
  for (const Kind kind : {Kind::Forward, Kind::Backward})
    for (const QRgb c : shades_of(kind)) compute = compute || seen.count(c);
  REQUIRE(compute);
  // A click on a rank's name expands it (lanes, memory row); another collapses it again.
  const QRect name = t.rank_label_rect(5);
  QMouseEvent press(QEvent::MouseButtonPress, QPointF(name.center()), QPointF(t.mapToGlobal(name.center())), Qt::LeftButton,
                    Qt::LeftButton, Qt::NoModifier);
  QMouseEvent release(QEvent::MouseButtonRelease, QPointF(name.center()), QPointF(t.mapToGlobal(name.center())), Qt::LeftButton,
                      Qt::NoButton, Qt::NoModifier);
  QApplication::sendEvent(&t, &press);
  QApplication::sendEvent(&t, &release);
  REQUIRE_FALSE(t.rank_collapsed(5));
  REQUIRE(t.lane_rect(5, 0, 1).top() > t.lane_rect(5, 0, 0).top());  // lanes of its own again
  REQUIRE(t.memory_rect(5).height() > 0);
  // The wheel over the names scrolls (the view's time span stays); over the blocks it zooms.
  t.set_compact(false);
  QScrollBar* bar = t.findChild<QScrollBar*>();
  REQUIRE(bar->maximum() > 0);
  const double span = t.view().span_us();
  const QPointF over_names(20, 300);
  QWheelEvent wheel(over_names, t.mapToGlobal(over_names), QPoint(), QPoint(0, -120), Qt::NoButton, Qt::NoModifier,
                    Qt::NoScrollPhase, false);
  QApplication::sendEvent(&t, &wheel);
  REQUIRE(bar->value() > 0);
  REQUIRE(t.view().span_us() == Approx(span));
  REQUIRE(TimelineWidget::help_text().contains("Shift+wheel"));
}

TEST_CASE("labels carry micro-batch and chunk alike for every kind", "[painting][labels]") {
  Trace trace;
  // Rank 0 holds stages 0 and 7 (a ZBV-like pair of chunks); rank 1 holds stage 1 only.
  trace.events.push_back(op("F", 0, 100, 3, 0, 0, 0));
  trace.events.push_back(op("F", 100, 100, 3, 0, 0, 7));
  trace.events.push_back(op("I", 200, 100, 3, 0, 0, 7));
  trace.events.push_back(op("W", 300, 100, 3, 0, 0, 7));
  trace.events.push_back(op("B", 100, 100, 2, 0, 1, 1));
  Shown shown(trace);
  TimelineWidget& t = *shown.widget;
  REQUIRE(t.block_label(0, 0, 0) == "F3.c0");
  REQUIRE(t.block_label(0, 1, 0) == "F3.c1");
  REQUIRE(t.block_label(0, 2, 0) == "I3.c1");
  REQUIRE(t.block_label(0, 3, 0) == "W3.c1");
  REQUIRE(t.block_label(0, 3, 1) == "W3");
  REQUIRE(t.block_label(0, 3, 2) == "3");
  REQUIRE(t.block_label(0, 4, 0) == "B2");  // one stage: no chunk
  // Chunk 1 is painted in its own shade.
  const QImage image = shown.shot();
  const QRect lane = t.lane_rect(0, 0, 0);
  const int chunk0 = lane.left() + static_cast<int>(t.view().time_to_x(10)), chunk1 = lane.left() + static_cast<int>(t.view().time_to_x(110));
  REQUIRE(is_shade(at(image, chunk0, lane.top() + 2), {kind_rgb(Kind::Forward)}));
  REQUIRE(is_shade(at(image, chunk1, lane.top() + 2), {chunk_rgb(kind_rgb(Kind::Forward), 1)}));
}

TEST_CASE("far out, a merged span shows its second kind in proportion", "[painting]") {
  // 1F1B's steady state: F 1 us, B 2 us, repeated. Far out every span merges both; the
  // backward fills two thirds of the time (the upper rows), the forward the lower third.
  Trace trace;
  for (int i = 0; i < 3000; ++i) {
    trace.events.push_back(op("F", i * 3.0, 1, i));
    trace.events.push_back(op("B", i * 3.0 + 1, 2, i));
  }
  Shown shown(trace);
  TimelineWidget& t = *shown.widget;
  const QImage image = shown.shot();
  const QRect lane = t.lane_rect(0, 0, 0);
  const int x = lane.left() + static_cast<int>(t.view().time_to_x(4500)) + 1;
  std::map<QRgb, int> column;
  for (int y = lane.top() + 2; y < lane.bottom() - 1; ++y) ++column[at(image, x, y)];
  const int backward = column[merged_rgb(kind_rgb(Kind::Backward))], forward = column[merged_rgb(kind_rgb(Kind::Forward))];
  REQUIRE(forward > 0);
  REQUIRE(backward > forward);
  REQUIRE(at(image, x, lane.top() + 2) == merged_rgb(kind_rgb(Kind::Backward)));
}
