// How steady the calibration's steps ran: each traced step's computation (its F, B, I and W)
// against the same operations at the profile's means gives the step's speed; their spread over
// the steps is the profile's step_speed_spread, from which a prediction's interval is made
// (prediction_interval.hpp). A step is a trace here (calibrate reads every traced step as one).
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "estimation.hpp"

namespace pipescope::sim::calibration {

void estimate_step_speed_spread(Estimation& e) {
  struct StepTimes {
    double measured_s = 0;  // the step's operations
    double at_means_s = 0;  // the same operations at their means over every step
  };
  std::map<const std::string*, StepTimes> steps;
  for (const auto& [key, samples] : e.collected.times_s) {
    const Timed what = key.second;
    if ((what != Timed::F && what != Timed::B && what != Timed::I && what != Timed::W) || samples.empty()) continue;
    double sum = 0;
    for (const Sample& sample : samples) sum += sample.value;
    const double mean = sum / static_cast<double>(samples.size());
    for (const Sample& sample : samples) {
      StepTimes& step = steps[sample.source];
      step.measured_s += sample.value;
      step.at_means_s += mean;
    }
  }
  std::vector<double> speeds;
  for (const auto& [source, step] : steps)
    if (step.at_means_s > 0) speeds.push_back(step.measured_s / step.at_means_s);
  if (speeds.size() < 2) {
    e.note("one traced step: the spread of step speeds is unknown, so predictions carry no interval (trace several "
           "steps: pprun --trace does by default)");
    return;
  }
  double mean = 0;
  for (const double speed : speeds) mean += speed;
  mean /= static_cast<double>(speeds.size());
  double squares = 0;
  for (const double speed : speeds) squares += (speed - mean) * (speed - mean);
  const double relative_sd = std::sqrt(squares / static_cast<double>(speeds.size() - 1)) / mean;
  e.result.profile.step_speed_spread = StepSpeedSpread{relative_sd, static_cast<int>(speeds.size())};
  e.note(fmt::format("step speed: the {} traced steps' computation ran at {:.1f}% (relative standard deviation) around "
                     "the profile's means; predictions carry an interval from it",
                     speeds.size(), 100 * relative_sd));
}

}  // namespace pipescope::sim::calibration
