// How steady the calibration's steps ran: each traced step's computation (its F, B, I and W)
// against the same operations at the profile's means gives the step's speed; their spread over
// the steps is the profile's step_speed_spread, from which a prediction's interval is made
// (prediction_interval.hpp). A step is a trace here (calibrate reads every traced step as one).
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "estimation.hpp"

namespace pipescope::sim::calibration {

namespace {

struct SpreadStepTimes {
  double measured_s = 0;  // the step's operations
  double at_means_s = 0;  // the same operations at their means over every step
};

double spread_relative_sd(const std::vector<double>& values) {
  double mean = 0;
  for (const double v : values) mean += v;
  mean /= static_cast<double>(values.size());
  double squares = 0;
  for (const double v : values) squares += (v - mean) * (v - mean);
  return std::sqrt(squares / static_cast<double>(values.size() - 1)) / mean;
}

// The run-to-run spread: measured from the runs' mean speeds where there are two runs or more
// (and --run-spread does not say otherwise), else assumed, and said so.
void estimate_run_speed_spread(Estimation& e, const std::map<std::string, SpreadStepTimes>& runs) {
  const std::optional<double> given = e.options ? e.options->run_spread : std::nullopt;
  if (runs.size() >= 2 && !given) {
    std::vector<double> speeds;
    speeds.reserve(runs.size());
    for (const auto& run : runs) speeds.push_back(run.second.measured_s / run.second.at_means_s);
    const double relative_sd = spread_relative_sd(speeds);
    e.result.profile.run_speed_spread = RunSpeedSpread{relative_sd, static_cast<int>(runs.size())};
    e.note(
        fmt::format("run speed: the {} runs' mean steps ran at {:.1f}% (relative standard deviation) of each "
                    "other; predictions' intervals hold it",
                    runs.size(), 100 * relative_sd));
    return;
  }
  const double assumed = given.value_or(kAssumedRunSpread);
  e.result.profile.run_speed_spread = RunSpeedSpread{assumed, 1};
  if (!given)
    e.note(
        fmt::format("run speed: one run cannot show how much the next will differ as a whole; assumed {:.1f}% "
                    "(--run-spread), or calibrate from the traces of two runs to measure it",
                    100 * assumed));
}

}  // namespace

void estimate_step_speed_spread(Estimation& e) {
  std::map<const std::string*, SpreadStepTimes> steps;
  for (const auto& [key, samples] : e.collected.times_s) {
    const Timed what = key.second;
    if ((what != Timed::F && what != Timed::B && what != Timed::I && what != Timed::W) || samples.empty()) continue;
    double sum = 0;
    for (const Sample& sample : samples) sum += sample.value;
    const double mean = sum / static_cast<double>(samples.size());
    for (const Sample& sample : samples) {
      SpreadStepTimes& step = steps[sample.source];
      step.measured_s += sample.value;
      step.at_means_s += mean;
    }
  }
  std::vector<double> speeds;
  std::map<std::string, SpreadStepTimes> runs;  // each run's steps together
  for (const auto& [source, step] : steps) {
    if (step.at_means_s <= 0) continue;
    speeds.push_back(step.measured_s / step.at_means_s);
    const auto run = e.run_of.find(source);
    SpreadStepTimes& whole = runs[run == e.run_of.end() ? *source : run->second];
    whole.measured_s += step.measured_s;
    whole.at_means_s += step.at_means_s;
  }
  if (speeds.size() < 2) {
    e.note(
        "one traced step: the spread of step speeds is unknown, so predictions carry no interval (trace several "
        "steps: pprun --trace does by default)");
    return;
  }
  const double relative_sd = spread_relative_sd(speeds);
  e.result.profile.step_speed_spread = StepSpeedSpread{relative_sd, static_cast<int>(speeds.size())};
  e.note(
      fmt::format("step speed: the {} traced steps' computation ran at {:.1f}% (relative standard deviation) around "
                  "the profile's means; predictions carry an interval from it",
                  speeds.size(), 100 * relative_sd));
  estimate_run_speed_spread(e, runs);
}

}  // namespace pipescope::sim::calibration
