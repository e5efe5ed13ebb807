// Run against run: two traces of one pipeline (two measured runs, or a prediction and a
// measurement) with their operations matched by rank, kind, stage and micro-batch, and what got
// slower from the first to the second, by kind, by rank and operation by operation.
// `ppsim compare A B` prints it when both are measured; the viewer labels them run A and run B.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipescope/traces/compare.hpp"
#include "pipescope/traces/trace.hpp"

namespace pipescope::traces {

// Both traces were measured: a run against a run rather than a prediction against a run.
bool both_measured(const Trace& a, const Trace& b);

// The time of one kind of operation (over all ranks), or of one rank's compute, in both runs.
struct TimeChange {
  std::string what;  // "F", "SEND_F", ... or "rank 2"
  double a_us = 0;
  double b_us = 0;
  double change_us() const { return b_us - a_us; }
  double change_fraction() const;  // (b - a) / a; NaN when a is 0
};

struct RunDifference {
  double a_step_us = 0;  // iteration_time_us
  double b_step_us = 0;
  std::vector<TimeChange> by_kind;            // summed durations per kind of operation, largest change first
  std::vector<TimeChange> by_rank;            // each rank's compute (busy) time, largest change first
  std::vector<MatchedOperation> top_changes;  // matched operations, largest b - a first (slower first)
};

// From a comparison of A (as `predicted`) with B (as `measured`): compare_traces matches the
// operations, and this sums them up.
RunDifference difference_of_runs(const Trace& a, const Trace& b, const Comparison& comparison, std::size_t top = 10);

// "run B took 12.3 ms longer than run A (+25.0%); slower: F +8.1 ms (+40.0%), B +3.0 ms (+9.0%);
// by rank: rank 1 +10.2 ms (+51.0%)" (or "faster" and "shorter" the other way).
std::string summarize_run_difference(const RunDifference& difference);

nlohmann::json run_difference_to_json(const RunDifference& difference, const Trace& a);

}  // namespace pipescope::traces
