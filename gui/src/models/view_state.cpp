#include "pipescope/gui/view_state.hpp"

#include <algorithm>
#include <cmath>

namespace pipescope::gui {

void ViewState::set_extent(double extent_us) {
  extent_us_ = std::max(extent_us, kMinSpanUs);
  show_all();
}

void ViewState::set_width(double width_px) { width_px_ = std::max(width_px, 1.0); }

void ViewState::set_visible(double start_us, double end_us) {
  if (end_us < start_us) std::swap(start_us, end_us);
  start_us_ = start_us;
  end_us_ = std::max(end_us, start_us + kMinSpanUs);
  clamp();
}

void ViewState::show_all() {
  start_us_ = 0;
  end_us_ = extent_us_;
}

void ViewState::zoom_around(double x_px, double factor) {
  if (!(factor > 0) || !std::isfinite(factor)) return;
  const double anchor = x_to_time(x_px);
  const double span = std::clamp(span_us() / factor, kMinSpanUs, extent_us_);
  const double fraction = x_px / width_px_;
  start_us_ = anchor - fraction * span;
  end_us_ = start_us_ + span;
  clamp();
}

void ViewState::pan_by_pixels(double dx_px) {
  const double dt = dx_px * us_per_pixel();
  start_us_ += dt;
  end_us_ += dt;
  clamp();
}

void ViewState::center_on(double t_us) {
  const double span = span_us();
  start_us_ = t_us - span / 2;
  end_us_ = start_us_ + span;
  clamp();
}

void ViewState::clamp() {
  double span = std::min(span_us(), extent_us_);
  span = std::max(span, std::min(kMinSpanUs, extent_us_));
  start_us_ = std::clamp(start_us_, 0.0, extent_us_ - span);
  end_us_ = start_us_ + span;
}

}  // namespace pipescope::gui
