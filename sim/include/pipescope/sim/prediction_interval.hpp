// The interval around a prediction from a measured profile: where the measured iteration time
// is expected, from how steady the calibration's steps ran (Profile::step_speed_spread) and
// from what the profile estimated instead of measuring (Profile::backward_split_estimate,
// simulated at the ends of its ranges). Predictions from explicit or derived costs have none.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pipescope/sim/profile.hpp"
#include "pipescope/sim/simulator.hpp"

namespace pipescope::sim {

// A step runs at the profile's speed times a factor whose relative standard deviation is the
// spread; a prediction is off by the difference of two such factors (the calibration run's and
// the measured run's), and the interval holds 90% of that: sqrt(2) standard deviations times
// Student's t (one-sided 95%) for the steps the spread was measured over (1.645 for many).
double interval_deviations(int steps);

struct PredictionInterval {
  double low_s = 0;
  double high_s = 0;
  // What the prediction took from estimates instead of measurements, one line each.
  std::vector<std::string> estimated;
};

// Whether the schedule runs BackwardInput/BackwardWeight (the split of a backward).
bool splits_backward(const CompiledSchedule& schedule);

// The profile with its estimated stages' backwards split by another input share and overhead.
Profile with_backward_split(const Profile& profile, double input_share, double overhead);

// The interval of `point_s`, predicted from `profile` for a schedule that splits backwards or
// not; `simulate_profile` predicts the same schedule from another profile (the estimate's
// corners). Nothing when the profile knows neither its steps' spread nor an estimate used here.
std::optional<PredictionInterval> prediction_interval(const Profile& profile, bool uses_split, double point_s,
                                                      const std::function<double(const Profile&)>& simulate_profile);

}  // namespace pipescope::sim
