#include "pipescope/sim/prediction_interval.hpp"

#include <algorithm>
#include <cmath>

#include <boost/math/distributions/students_t.hpp>
#include <fmt/format.h>

namespace pipescope::sim {

namespace {
constexpr double kNormal975 = 1.959964;  // the two-sided 95% quantile of the normal distribution
}  // namespace

double interval_deviations(int steps) {
  const int freedom = std::max(1, steps - 1);
  const boost::math::students_t t(freedom);
  return boost::math::quantile(t, 0.975) * std::sqrt(2.0);
}

double interval_factor(double half_width) { return 1 / (1 - std::clamp(half_width, 0.0, 0.9)); }

bool splits_backward(const CompiledSchedule& schedule) {
  return std::any_of(schedule.instructions.begin(), schedule.instructions.end(), [](const CompiledInstruction& ci) {
    return ci.op == Op::BackwardInput || ci.op == Op::BackwardWeight;
  });
}

Profile with_backward_split(const Profile& profile, double input_share, double overhead) {
  Profile moved = profile;
  if (!moved.backward_split_estimate) return moved;
  for (const int s : moved.backward_split_estimate->stages) {
    if (s < 0 || s >= static_cast<int>(moved.stages.size())) continue;
    StageProfile& sp = moved.stages[static_cast<std::size_t>(s)];
    sp.b_s = sp.full_backward_s * input_share * (1 + overhead);
    sp.w_s = sp.full_backward_s * (1 - input_share) * (1 + overhead);
  }
  moved.backward_split_estimate->input_share = input_share;
  moved.backward_split_estimate->overhead = overhead;
  return moved;
}

std::optional<PredictionInterval> prediction_interval(const Profile& profile, bool uses_split, double point_s,
                                                      const std::function<double(const Profile&)>& simulate_profile) {
  const bool estimated_split = uses_split && profile.backward_split_estimate.has_value();
  if (!profile.step_speed_spread && !estimated_split) return std::nullopt;
  PredictionInterval interval{point_s, point_s, {}};
  if (estimated_split) {
    // The estimate's four corners: the input share moves I against W, the overhead both.
    const BackwardSplitEstimate& e = *profile.backward_split_estimate;
    for (const double share : {e.input_share - e.input_share_uncertainty, e.input_share + e.input_share_uncertainty})
      for (const double overhead :
           {std::max(0.0, e.overhead - e.overhead_uncertainty), e.overhead + e.overhead_uncertainty}) {
        const double t = simulate_profile(with_backward_split(profile, std::clamp(share, 0.01, 0.99), overhead));
        interval.low_s = std::min(interval.low_s, t);
        interval.high_s = std::max(interval.high_s, t);
      }
    interval.estimated.push_back(fmt::format(
        "backward split (I and W of stage(s) measured as full backwards): input {:.0f}% +- {:.0f} points, I + W "
        "{:.0f}% +- {:.0f} points over B ({})",
        100 * e.input_share, 100 * e.input_share_uncertainty, 100 * e.overhead, 100 * e.overhead_uncertainty, e.basis));
  }
  if (profile.step_speed_spread) {
    // The steps' own spread, and the runs' as a whole (the calibration run's and the measured
    // run's speeds each off by it): independent, so their half-widths add in quadrature.
    const double step_half =
        interval_deviations(profile.step_speed_spread->steps) * profile.step_speed_spread->relative_sd;
    const double run_half =
        profile.run_speed_spread ? kNormal975 * std::sqrt(2.0) * profile.run_speed_spread->relative_sd : 0.0;
    const double half = std::hypot(step_half, run_half);
    const double factor = interval_factor(half);
    interval.low_s /= factor;
    interval.high_s *= factor;
  }
  return interval;
}

}  // namespace pipescope::sim
