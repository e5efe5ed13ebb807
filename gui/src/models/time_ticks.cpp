#include "pipescope/gui/time_ticks.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace pipescope::gui {

double nice_step_us(double min_step_us) {
  if (!(min_step_us > 0)) return 1;
  const double power = std::pow(10.0, std::floor(std::log10(min_step_us)));
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= min_step_us * (1 - 1e-9)) return m * power;
  return 10 * power;
}

namespace {

// The label of t in the unit of the step, with as many decimals as the step needs.
// The unit is the step's, moved up while labels would need more than five digits before
// the point (1234.2 us rather than 1234200 ns).
std::string tick_label(double t_us, double step_us, double largest_us) {
  struct Unit { double us; const char* name; };
  static constexpr Unit kUnits[] = {{1e-3, "ns"}, {1, "us"}, {1e3, "ms"}, {1e6, "s"}};
  int u = step_us >= 1e6 ? 3 : step_us >= 1e3 ? 2 : step_us >= 1 ? 1 : 0;
  while (u < 3 && std::fabs(largest_us) / kUnits[u].us >= 1e5) ++u;
  const Unit unit = kUnits[u];
  const double step_in_unit = step_us / unit.us;
  const int decimals = step_in_unit >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step_in_unit) - 1e-9));
  double value = t_us / unit.us;
  if (std::fabs(value) < step_in_unit * 1e-6) value = 0;
  return fmt::format("{:.{}f} {}", value, decimals, unit.name);
}

}  // namespace

std::vector<Tick> time_ticks(double start_us, double end_us, double width_px, double min_spacing_px) {
  std::vector<Tick> ticks;
  if (!(end_us > start_us) || !(width_px > 0)) return ticks;
  const double step = nice_step_us((end_us - start_us) / width_px * min_spacing_px);
  const double first = std::ceil(start_us / step - 1e-9);
  for (double k = first;; ++k) {
    const double t = k * step;
    if (t > end_us + step * 1e-9) break;
    ticks.push_back({t, tick_label(t, step, std::max(std::fabs(start_us), std::fabs(end_us)))});
    if (ticks.size() > 10000) break;
  }
  return ticks;
}

std::string format_duration_us(double us) {
  const double a = std::fabs(us);
  // Four significant digits, never an exponent: 11,900 s is "11900 s", not "1.19e+04 s", and
  // what is below a thousandth of a nanosecond is 0.
  if (a >= 1e9) return fmt::format("{:.0f} s", us / 1e6);
  if (a >= 1e6) return fmt::format("{:.4g} s", us / 1e6);
  if (a > 0 && a < 1e-6) return "0 ns";
  if (a >= 1e3) return fmt::format("{:.4g} ms", us / 1e3);
  if (a >= 1 || a == 0) return fmt::format("{:.4g} us", us);
  return fmt::format("{:.4g} ns", us * 1e3);
}

}  // namespace pipescope::gui
