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
// the measured run's), and the interval's half-width h is sqrt(2) standard deviations times
// Student's t (two-sided 95%) for the steps the spread was measured over (1.96 for many).
// 95%, not 90%: the interval is meant to hold the measured time in at least 9 runs of 10, and
// an interval of 90% does that only on average. A run's speed on a shared host moves as a whole
// (a run's mean varies about as much as its steps do), which is why the spread of single steps,
// not of their mean, sets the width.
double interval_deviations(int steps);

// The factor of the interval around a prediction p: [p (1 - h), p / (1 - h)], symmetric in the
// logarithm of the time (a run slowed by a factor is as likely as one sped up by it, and a
// slowdown has no bound where a speed-up has), with h held below 0.9 (a factor of 10).
double interval_factor(double half_width);

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
