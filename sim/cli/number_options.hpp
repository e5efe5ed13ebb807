// The checks of ppsim's floating-point options. NaN fails every comparison, so a check written
// as "refuse when below the minimum" lets it through as if it were fine: each option is checked
// here for a finite value in its range, and the message names the option.
#pragma once

namespace pipescope::cli {

// Throws UsageError "OPTION: must be a finite number >= MINIMUM, not VALUE".
void require_finite_at_least(double value, const char* option, double minimum);

// Throws UsageError "OPTION: must be a finite number > MINIMUM, not VALUE".
void require_finite_above(double value, const char* option, double minimum);

// A fraction of peak FLOP/s: in (0, 1], or 0 for the device preset's.
void require_efficiency(double value, const char* option);

}  // namespace pipescope::cli
