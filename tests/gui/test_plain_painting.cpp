// A plain Chrome trace painted as what it is, offscreen. One thread: "step" 0..100 us holds
// "forward" 10..50 us, which holds "matmul" 10..30 us (X events), and "backward" 60..90 us
// (B/E) holds a second "matmul" 62..70 us; an instant "marker" at 95 us. The lane has three
// sub-rows, one per depth: at 11.5 us the top one is step's colour, the next forward's, the
// lowest matmul's (each its name's colour, name_rgb, not a pipeline kind's). The instant is a
// dark mark across the lane at 95 us, over step's block.
#include <catch2/catch.hpp>

#include <memory>

#include "plain_trace_fixture.hpp"
#include "pipescope/gui/kinds.hpp"
#include "pipescope/gui/name_colours.hpp"
#include "pipescope/gui/timeline_model.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "test_application.hpp"
#include "timeline_widget.hpp"

using namespace pipescope::gui;
using namespace pipescope::traces;

namespace {

using plain_trace_fixture::kNested;

// Whether `c` is `expected`, or it under a grid line of the time ruler (black at alpha 22).
bool is_colour(QRgb c, QRgb expected) {
  auto near = [](int got, int want) { return std::abs(got - want) <= 2 || std::abs(got - want * (255 - 22) / 255) <= 2; };
  return near(qRed(c), qRed(expected)) && near(qGreen(c), qGreen(expected)) && near(qBlue(c), qBlue(expected));
}

}  // namespace

TEST_CASE("a plain trace's nested slices sit one sub-row per depth, each in its name's colour", "[painting][plain]") {
  testing::app();
  auto model = std::make_shared<TimelineModel>();
  model->set_traces(parse_trace(kNested, "nested.json"));
  REQUIRE_FALSE(model->has_pipeline(0));
  TimelineWidget t;
  t.resize(1000, 400);
  t.set_model(model);
  const int lane = model->rows().front().lane;
  REQUIRE(t.lane_sub_rows(0, 0, lane) == 3);
  const QRect area = t.lane_rect(0, 0, lane);
  const QImage image = t.grab().toImage();
  const int x = area.left() + static_cast<int>(t.view().time_to_x(11.5));
  const double sub_height = (area.height() - 2) / 3.0;
  auto colour_in_sub_row = [&](int sub) {
    return image.pixel(x, area.top() + 1 + static_cast<int>((sub + 0.5) * sub_height)) & 0xffffff;
  };
  INFO("sub-rows " << std::hex << colour_in_sub_row(0) << " " << colour_in_sub_row(1) << " " << colour_in_sub_row(2));
  REQUIRE(is_colour(colour_in_sub_row(0), name_rgb("step")));
  REQUIRE(is_colour(colour_in_sub_row(1), name_rgb("forward")));
  REQUIRE(is_colour(colour_in_sub_row(2), name_rgb("matmul")));
  // Not a pipeline kind's colour: "other" would paint every slice alike.
  REQUIRE_FALSE(is_colour(colour_in_sub_row(1), kind_rgb(Kind::Other)));
  // The child is below its parent: a click in the lowest sub-row finds matmul, not forward.
  const auto hit = t.event_at(QPoint(x, area.top() + 1 + static_cast<int>(2.5 * sub_height)));
  REQUIRE(hit.has_value());
  REQUIRE(model->trace(0).events[hit->second].name == "matmul");
}

TEST_CASE("a plain trace's instant is a mark across its lane", "[painting][plain]") {
  testing::app();
  auto model = std::make_shared<TimelineModel>();
  model->set_traces(parse_trace(kNested, "nested.json"));
  REQUIRE(model->instants(0).size() == 1);
  TimelineWidget t;
  t.resize(1000, 400);
  t.set_model(model);
  const QRect area = t.lane_rect(0, 0, model->rows().front().lane);
  const QImage image = t.grab().toImage();
  const int mark_x = area.left() + static_cast<int>(std::lround(t.view().time_to_x(95)));
  const int beside_x = area.left() + static_cast<int>(std::lround(t.view().time_to_x(97)));
  const int y = area.top() + 1 + static_cast<int>(0.5 * (area.height() - 2) / 3.0);  // in step's sub-row
  REQUIRE(is_colour(image.pixel(mark_x, y) & 0xffffff, 0x202020));
  REQUIRE(is_colour(image.pixel(beside_x, y) & 0xffffff, name_rgb("step")));
}

TEST_CASE("a plain trace's counter has a row of its own, drawn in its name's colour", "[painting][plain]") {
  testing::app();
  auto model = std::make_shared<TimelineModel>();
  model->set_traces(parse_trace(kNested, "nested.json"));
  REQUIRE(model->counter_tracks(0).size() == 1);
  TimelineWidget t;
  t.resize(1000, 400);
  t.set_model(model);
  const QRect row = t.counter_rect(0);
  REQUIRE_FALSE(row.isEmpty());
  REQUIRE(row.top() >= t.lane_rect(0, 0, model->rows().front().lane).bottom());
  // Somewhere in the row (right of its label) the step line is painted in queue's colour.
  const QImage image = t.grab().toImage();
  bool drawn = false;
  const int x = row.left() + static_cast<int>(t.view().time_to_x(90));
  for (int y = row.top(); y <= row.bottom() && !drawn; ++y) drawn = is_colour(image.pixel(x, y) & 0xffffff, name_rgb("queue"));
  REQUIRE(drawn);
}

TEST_CASE("far out, a merged run of a plain trace takes the colour of the name that fills its time", "[painting][plain]") {
  // 2,000 pairs: "short" 0.1 us then "long" 0.9 us, all in view at once (about 2.5 us a pixel).
  std::string json = "[";
  for (int i = 0; i < 2000; ++i) {
    if (i) json += ",";
    json += R"({"ph": "X", "name": "short", "pid": 1, "tid": 1, "ts": )" + std::to_string(i) + R"(, "dur": 0.1},)";
    json += R"({"ph": "X", "name": "long", "pid": 1, "tid": 1, "ts": )" + std::to_string(i) + R"(.1, "dur": 0.9})";
  }
  json += "]";
  testing::app();
  auto model = std::make_shared<TimelineModel>();
  model->set_traces(parse_trace(json, "runs.json"));
  REQUIRE_FALSE(model->has_pipeline(0));
  TimelineWidget t;
  t.resize(1000, 400);
  t.set_model(model);
  const QRect area = t.lane_rect(0, 0, model->rows().front().lane);
  const QImage image = t.grab().toImage();
  int long_pixels = 0, short_pixels = 0;
  for (int x = area.left() + 20; x < area.right() - 20; ++x) {
    const QRgb c = image.pixel(x, area.center().y()) & 0xffffff;
    long_pixels += is_colour(c, merged_rgb(name_rgb("long"))) || is_colour(c, name_rgb("long"));
    short_pixels += is_colour(c, merged_rgb(name_rgb("short"))) || is_colour(c, name_rgb("short"));
  }
  INFO("long " << long_pixels << ", short " << short_pixels);
  REQUIRE(long_pixels > (area.width() - 40) * 9 / 10);
  REQUIRE(short_pixels < (area.width() - 40) / 20);
}
