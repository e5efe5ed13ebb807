// Ruler ticks: steps are 1, 2 or 5 x 10^k and at least the minimum spacing apart. A 1000 px
// ruler over [0, 4000] us with 90 px spacing needs 360 us, so the step is 500 us and the
// ticks are 0, 500, ..., 4000 labelled "0 us" ... "4000 us"; over [0, 2.5e6] us the step is
// 500 ms ("500 ms"); over [0, 0.05] us it is 5 ns.
#include <catch2/catch.hpp>

#include "pipescope/gui/time_ticks.hpp"

using namespace pipescope::gui;

TEST_CASE("nice steps, table-driven", "[ticks]") {
  const std::pair<double, double> cases[] = {{0.9, 1}, {1, 1}, {1.1, 2}, {3, 5}, {7, 10}, {360, 500}, {0.0042, 0.005}, {2e5, 2e5}};
  for (const auto& [min_step, step] : cases) {
    INFO(min_step);
    REQUIRE(nice_step_us(min_step) == Approx(step));
  }
}

TEST_CASE("ticks are spaced and labelled in the step's unit", "[ticks]") {
  const auto ticks = time_ticks(0, 4000, 1000, 90);
  REQUIRE(ticks.size() == 9);
  REQUIRE(ticks[1].t_us == 500);
  REQUIRE(ticks[0].label == "0 us");
  REQUIRE(ticks[8].label == "4000 us");
  const auto ms = time_ticks(0, 2.5e6, 1000, 90);
  REQUIRE(ms[1].t_us == Approx(5e5));
  REQUIRE(ms[1].label == "500 ms");
  const auto ns = time_ticks(0, 0.05, 1000, 90);
  REQUIRE(ns[1].t_us == Approx(0.005));
  REQUIRE(ns[1].label == "5 ns");
  const auto offset = time_ticks(1234, 1236, 1000, 90);  // step 0.2 us: labels need one decimal
  REQUIRE(offset.front().t_us >= 1234);
  REQUIRE(offset.front().label == "1234.0 us");
  REQUIRE(offset[1].label == "1234.2 us");
  REQUIRE(time_ticks(5, 5, 1000, 90).empty());
}

TEST_CASE("durations read well", "[ticks]") {
  REQUIRE(format_duration_us(812.5) == "812.5 us");
  REQUIRE(format_duration_us(1234) == "1.234 ms");
  REQUIRE(format_duration_us(2.5e6) == "2.5 s");
  REQUIRE(format_duration_us(0.04) == "40 ns");
  REQUIRE(format_duration_us(0) == "0 us");
  // Never an exponent: hours of run time in seconds, a femtosecond as 0.
  REQUIRE(format_duration_us(1.19e10) == "11900 s");
  REQUIRE(format_duration_us(-2.5e9) == "-2500 s");
  REQUIRE(format_duration_us(1e-9) == "0 ns");
}
