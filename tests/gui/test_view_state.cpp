// ViewState maps time to pixels and back. Table: a 1000 px wide view of [0, 2000] us puts
// t = 0, 500, 2000 at x = 0, 250, 1000; of [100, 300] us puts t = 200 at x = 500.
// Zooming by 2 around x = 250 in [0, 2000] keeps t = 500 under x = 250 and gives [250, 1250].
// Panning by 100 px in [0, 1000] of a 2000 us trace moves it to [100, 1100]; panning past the
// end stops at [1000, 2000]; zooming out never shows more than the whole trace.
#include <catch2/catch.hpp>

#include "pipescope/gui/view_state.hpp"

using pipescope::gui::ViewState;

TEST_CASE("time_to_x and x_to_time, table-driven", "[view_state]") {
  struct Case {
    double start_us, end_us, width_px, t_us, x_px;
  };
  const Case cases[] = {
      {0, 2000, 1000, 0, 0},       {0, 2000, 1000, 500, 250},  {0, 2000, 1000, 2000, 1000},
      {100, 300, 1000, 200, 500},  {100, 300, 1000, 100, 0},   {100, 300, 1000, 50, -250},
      {0, 1e6, 800, 250000, 200},  {10, 10.5, 100, 10.25, 50},
  };
  for (const auto& c : cases) {
    INFO("view [" << c.start_us << ", " << c.end_us << "] width " << c.width_px << " t " << c.t_us);
    ViewState view;
    view.set_extent(1e6);
    view.set_width(c.width_px);
    view.set_visible(c.start_us, c.end_us);
    REQUIRE(view.time_to_x(c.t_us) == Approx(c.x_px));
    REQUIRE(view.x_to_time(c.x_px) == Approx(c.t_us));
    REQUIRE(view.x_to_time(view.time_to_x(c.t_us)) == Approx(c.t_us));
  }
}

TEST_CASE("zoom keeps the time under the cursor", "[view_state]") {
  ViewState view;
  view.set_extent(2000);
  view.set_width(1000);
  view.zoom_around(250, 2);
  REQUIRE(view.visible_start_us() == Approx(250));
  REQUIRE(view.visible_end_us() == Approx(1250));
  REQUIRE(view.x_to_time(250) == Approx(500));
  view.zoom_around(250, 0.5);
  REQUIRE(view.visible_start_us() == Approx(0));
  REQUIRE(view.visible_end_us() == Approx(2000));
  view.zoom_around(500, 0.1);  // zooming out stops at the whole trace
  REQUIRE(view.visible_start_us() == 0);
  REQUIRE(view.visible_end_us() == 2000);
  for (int i = 0; i < 100; ++i) view.zoom_around(500, 10);  // zooming in stops at the minimum span
  REQUIRE(view.span_us() == Approx(ViewState::kMinSpanUs));
  REQUIRE(view.x_to_time(500) == Approx(1000).epsilon(1e-6));
}

TEST_CASE("pan moves by pixels and stays inside the trace", "[view_state]") {
  ViewState view;
  view.set_extent(2000);
  view.set_width(1000);
  view.set_visible(0, 1000);
  REQUIRE(view.us_per_pixel() == 1);
  view.pan_by_pixels(100);
  REQUIRE(view.visible_start_us() == 100);
  REQUIRE(view.visible_end_us() == 1100);
  view.pan_by_pixels(5000);
  REQUIRE(view.visible_start_us() == 1000);
  REQUIRE(view.visible_end_us() == 2000);
  view.pan_by_pixels(-5000);
  REQUIRE(view.visible_start_us() == 0);
  view.center_on(1500);
  REQUIRE(view.visible_start_us() == 1000);
  view.set_visible(1800, 1700);  // reversed bounds are put in order
  REQUIRE(view.visible_start_us() == 1700);
  REQUIRE(view.visible_end_us() == 1800);
}
