// The sums a least-squares line y = a + b x needs, over samples that each give an x and a y:
// the all-to-all's latency + bytes / bandwidth and the experts' call + rows x row cost are fitted
// from them, each with its own fallback where x does not explain y. Private to calibration.
#pragma once

#include <vector>

namespace pipescope::sim::calibration {

struct LineSums {
  double n = 0, mean_x = 0, mean_y = 0;
  double sxx = 0, sxy = 0;                // about the means
  double sxx_origin = 0, sxy_origin = 0;  // about 0: a line through the origin

  // x varies by at least 1% (relative standard deviation): enough to tell a slope from an offset.
  bool x_varies() const { return mean_x > 0 && sxx / n > 1e-4 * mean_x * mean_x; }
};

// `x(s)` and `y(s)` of each sample.
template <typename Sample, typename X, typename Y>
LineSums line_sums(const std::vector<const Sample*>& samples, X x, Y y) {
  LineSums l;
  l.n = static_cast<double>(samples.size());
  if (samples.empty()) return l;
  for (const Sample* s : samples) {
    l.mean_x += x(*s) / l.n;
    l.mean_y += y(*s) / l.n;
  }
  for (const Sample* s : samples) {
    const double dx = x(*s) - l.mean_x;
    l.sxx += dx * dx;
    l.sxy += dx * (y(*s) - l.mean_y);
    l.sxx_origin += x(*s) * x(*s);
    l.sxy_origin += x(*s) * y(*s);
  }
  return l;
}

}  // namespace pipescope::sim::calibration
