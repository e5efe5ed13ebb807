// How the main window's panes write figures: signed errors as the CLI states them, shares,
// MiB and durations (one place, so the summary and the details pane say them alike).
#pragma once

#include <QString>

#include <cmath>
#include <cstdint>

#include "pipescope/gui/time_ticks.hpp"

namespace pipescope::gui {

// Errors as the CLI states them: (predicted - measured) / measured, signed.
inline QString percent_text(double fraction) {
  if (!std::isfinite(fraction)) return "n/a";
  return QString("%1%2%").arg(fraction >= 0 ? "+" : "").arg(fraction * 100, 0, 'f', 1);
}

inline QString share_text(double fraction) { return QString::number(fraction * 100, 'f', 1) + "%"; }

inline QString mib_text(std::int64_t bytes) {
  return QString::number(static_cast<double>(bytes) / (1024.0 * 1024.0), 'f', 1) + " MiB";
}

inline QString duration_text(double us) { return QString::fromStdString(format_duration_us(us)); }

}  // namespace pipescope::gui
