// Statistics of samples: medians, deviations, and the quantities and outliers a calibration
// reports.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "estimation.hpp"
#include "pipescope/core/errors.hpp"

namespace pipescope::sim {

CalibrationOptions::Statistic parse_duration_statistic(const std::string& text) {
  if (text == "median") return CalibrationOptions::Statistic::Median;
  if (text == "mean") return CalibrationOptions::Statistic::Mean;
  throw UsageError(fmt::format("--statistic: unknown statistic '{}' (known: median, mean)", text));
}

const char* to_string(CalibrationOptions::Statistic statistic) {
  return statistic == CalibrationOptions::Statistic::Mean ? "mean" : "median";
}

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  const std::size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

double median_absolute_deviation(const std::vector<double>& values) {
  const double m = median_of(values);
  std::vector<double> deviations;
  deviations.reserve(values.size());
  for (double v : values) deviations.push_back(std::fabs(v - m));
  return median_of(deviations);
}

namespace calibration {
namespace {

std::vector<double> values_of(const Samples& samples) {
  std::vector<double> v;
  v.reserve(samples.size());
  for (const Sample& s : samples) v.push_back(s.value);
  return v;
}

}  // namespace

double Summariser::estimate(const std::string& name, const std::string& unit, const Samples& samples) {
  const std::vector<double> values = values_of(samples);
  CalibratedQuantity q;
  q.name = name;
  q.unit = unit;
  q.samples = values.size();
  if (!values.empty()) {
    q.median = median_of(values);
    double sum = 0;
    for (double v : values) sum += v;
    q.mean = sum / static_cast<double>(values.size());
    q.mad = median_absolute_deviation(values);
    q.min = *std::min_element(values.begin(), values.end());
    q.max = *std::max_element(values.begin(), values.end());
    const double limit = std::max(options_.outlier_mads * 1.4826 * q.mad, options_.outlier_min_fraction * std::fabs(q.median));
    for (const Sample& s : samples)
      if (std::fabs(s.value - q.median) > limit)
        result_.outliers.push_back({name, s.source ? *s.source : std::string(), s.rank, s.micro_batch, s.value, q.median});
  }
  result_.quantities.push_back(q);
  return unit == "s" && options_.duration_statistic == CalibrationOptions::Statistic::Mean ? q.mean : q.median;
}

double Summariser::duration(const std::vector<double>& values_s) const {
  if (options_.duration_statistic == CalibrationOptions::Statistic::Median || values_s.empty()) return median_of(values_s);
  double sum = 0;
  for (double v : values_s) sum += v;
  return sum / static_cast<double>(values_s.size());
}

template <class Key>
const Samples& find_in(const std::map<std::pair<int, Key>, Samples>& map, int stage, Key what) {
  static const Samples none;
  auto it = map.find({stage, what});
  return it == map.end() ? none : it->second;
}

const Samples& find_or_empty(const std::map<std::pair<int, Timed>, Samples>& map, int stage, Timed what) {
  return find_in(map, stage, what);
}
const Samples& find_or_empty(const std::map<std::pair<int, Footprint>, Samples>& map, int stage, Footprint what) {
  return find_in(map, stage, what);
}

}  // namespace calibration
}  // namespace pipescope::sim
