#include "number_options.hpp"

#include <cmath>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"

namespace pipescope::cli {

void require_finite_at_least(double value, const char* option, double minimum) {
  if (!(std::isfinite(value) && value >= minimum))
    throw UsageError(fmt::format("{}: must be a finite number >= {:g}, not {:g}", option, minimum, value));
}

void require_finite_above(double value, const char* option, double minimum) {
  if (!(std::isfinite(value) && value > minimum))
    throw UsageError(fmt::format("{}: must be a finite number > {:g}, not {:g}", option, minimum, value));
}

void require_efficiency(double value, const char* option) {
  if (!(value >= 0 && value <= 1))
    throw UsageError(fmt::format("{}: must be in (0, 1] (0: the device's), not {:g}", option, value));
}

}  // namespace pipescope::cli
