// The per-rank summary under the timeline: where each rank's time went (busy, idle,
// communication), the prediction against the measurement with the CLI's error, which rank is
// the bottleneck, and whom each rank waited on (traces/step_attribution.hpp, as
// `ppsim compare --explain` says it). Widget-free, so the table, its CSV export and the tests
// share it.
#pragma once

#include <string>
#include <vector>

#include "pipescope/gui/timeline_model.hpp"

namespace pipescope::gui {

struct RankSummary {
  int rank = 0;
  std::string name;  // the rank's name (process_name of a plain trace)
  // Of the shown series: the measured one of a pair, else the only one.
  double busy_us = 0;           // a pipeline's compute lane, or any lane of a plain trace (union)
  double idle_us = 0;           // the iteration (or the trace's span) less busy
  double communication_us = 0;  // sends, receives, collectives and all-to-all (union)
  // With a predicted and a measured trace; NaN otherwise.
  double predicted_busy_us = 0;
  double measured_busy_us = 0;
  double error = 0;         // (predicted - measured) / measured busy time, as ppsim compare
  bool bottleneck = false;  // the busiest rank (of two or more): the one the others wait for
  // Of the shown series, when it is a pipeline: the rank its waits led back to most (-1: it
  // did not wait) and for how long; whether it is the rank that held the step back.
  int waited_most_on = -1;
  double waited_most_us = 0;
  bool held_step_back = false;
  double held_back_us = 0;
};

// One entry per rank, in rank order.
std::vector<RankSummary> rank_summaries(const TimelineModel& model);

// The table as CSV: a header, then one line per rank (times in microseconds, the error as a
// fraction, bottleneck 0 or 1). Columns of a pair only when `with_prediction`.
std::string rank_summary_csv(const std::vector<RankSummary>& ranks, bool with_prediction);

}  // namespace pipescope::gui
