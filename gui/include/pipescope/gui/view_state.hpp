// Zoom and pan of the time axis: which time span is visible and how it maps to pixels.
// Widgets ask it `time_to_x` / `x_to_time` and tell it about wheel, drag and keys.
#pragma once

namespace pipescope::gui {

class ViewState {
 public:
  // The whole trace is [0, extent_us]; the view never leaves it and never shows more of it.
  void set_extent(double extent_us);
  // Width in pixels of the time area.
  void set_width(double width_px);
  void set_visible(double start_us, double end_us);
  void show_all();

  double time_to_x(double t_us) const { return (t_us - start_us_) * width_px_ / span_us(); }
  double x_to_time(double x_px) const { return start_us_ + x_px * span_us() / width_px_; }

  // factor > 1 zooms in, keeping the time under x_px where it is.
  void zoom_around(double x_px, double factor);
  // Positive dx_px shows later times (content moves left).
  void pan_by_pixels(double dx_px);
  void center_on(double t_us);

  double visible_start_us() const { return start_us_; }
  double visible_end_us() const { return end_us_; }
  double span_us() const { return end_us_ - start_us_; }
  double us_per_pixel() const { return span_us() / width_px_; }
  double extent_us() const { return extent_us_; }
  double width_px() const { return width_px_; }

  // The narrowest span the view zooms to (a nanosecond-ish fraction of a microsecond).
  static constexpr double kMinSpanUs = 1e-3;

 private:
  void clamp();
  double extent_us_ = 1;
  double width_px_ = 1;
  double start_us_ = 0;
  double end_us_ = 1;
};

}  // namespace pipescope::gui
