// The time ruler's ticks: steps of 1, 2 or 5 times a power of ten, at least a given number of
// pixels apart, labelled in the unit that suits the step (ns, us, ms, s).
#pragma once

#include <string>
#include <vector>

namespace pipescope::gui {

struct Tick {
  double t_us = 0;
  std::string label;
};

// Ticks at multiples of the step inside [start_us, end_us].
std::vector<Tick> time_ticks(double start_us, double end_us, double width_px, double min_spacing_px);

// The step time_ticks uses: the smallest 1/2/5 x 10^k that is at least min_step_us.
double nice_step_us(double min_step_us);

// "812.5 us", "1.23 ms", "2 s", "40 ns": for tooltips and the summary.
std::string format_duration_us(double us);

}  // namespace pipescope::gui
