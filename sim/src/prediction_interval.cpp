#include "pipescope/sim/prediction_interval.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace pipescope::sim {

double interval_deviations(int steps) {
  // One-sided 95% quantiles of Student's t for 1 .. 10 degrees of freedom.
  static constexpr double kT95[] = {6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812};
  const int freedom = std::max(1, steps - 1);
  const double t = freedom <= 10 ? kT95[freedom - 1] : (freedom <= 30 ? 1.70 : 1.645);
  return t * std::sqrt(2.0);
}

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
      for (const double overhead : {std::max(0.0, e.overhead - e.overhead_uncertainty), e.overhead + e.overhead_uncertainty}) {
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
    const double half = interval_deviations(profile.step_speed_spread->steps) * profile.step_speed_spread->relative_sd;
    interval.low_s *= std::max(0.0, 1 - half);
    interval.high_s *= 1 + half;
  }
  return interval;
}

}  // namespace pipescope::sim
