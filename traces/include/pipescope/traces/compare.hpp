// Prediction against measurement: matches the events of a predicted and a measured trace and
// reports how far apart they are (iteration time, operation durations, bubbles, peak memory),
// and where each rank's time went on both sides (time_accounting.hpp).
// `ppsim compare` prints this, and the viewer's summary table shows it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipescope/traces/time_accounting.hpp"
#include "pipescope/traces/trace.hpp"

namespace pipescope::traces {

struct RankComparison {
  int rank = 0;
  double bubble_fraction_predicted = 0;  // idle share of the compute lane in the iteration
  double bubble_fraction_measured = 0;
  std::int64_t peak_memory_predicted_bytes = 0;  // max of the memory counters, 0 without any
  std::int64_t peak_memory_measured_bytes = 0;
  double peak_memory_error = 0;  // (predicted - measured) / measured; NaN when measured is 0 and predicted is not
  double stolen_fraction_measured = 0;  // stolen_time_fraction of the measured trace; NaN when it does not say
};

// One predicted event and the measured event it corresponds to.
struct MatchedOperation {
  std::size_t predicted_index = 0;  // into predicted.events
  std::size_t measured_index = 0;   // into measured.events
  double predicted_dur_us = 0;
  double measured_dur_us = 0;
  // predicted - measured, the sign of duration_error(): negative where the run took longer.
  double difference_us() const { return predicted_dur_us - measured_dur_us; }
  // (predicted - measured) / measured; NaN when the measured duration is 0.
  double duration_error() const;
};

// One rank's time in one kind of operation, in both traces (a count of 0 where a trace has none).
struct OperationTimeComparison {
  int rank = 0;
  std::string name;
  std::size_t predicted_count = 0;
  std::size_t measured_count = 0;
  double predicted_total_us = 0;
  double measured_total_us = 0;
  double difference_us() const { return predicted_total_us - measured_total_us; }
};

struct Comparison {
  double iteration_time_predicted_s = 0;  // iteration_time_us
  double iteration_time_measured_s = 0;
  double iteration_time_error = 0;  // (predicted - measured) / measured
  double op_duration_mape = 0;      // mean |predicted - measured| / measured over matched operations
  std::size_t mape_operations = 0;  // matched operations with a measured duration above 0
  // sum |predicted - measured| / sum measured over the same operations: each weighs as long as
  // it lasted, so that many short operations (a MoE run's small exchanges) do not swamp the MAPE.
  double op_duration_weighted_error = 0;
  double bubble_fraction_predicted = 0;  // mean over ranks
  double bubble_fraction_measured = 0;
  double stolen_fraction_measured = 0;  // the largest of the ranks'; NaN when the trace does not say
  std::vector<RankComparison> ranks;
  std::vector<MatchedOperation> matched;  // in predicted start order
  std::size_t unmatched_predicted = 0;    // predicted events with no measured counterpart
  std::size_t unmatched_measured = 0;
  std::vector<MatchedOperation> top_differences;         // largest |difference_us| first
  std::vector<OperationTimeComparison> operation_times;  // by rank, then name
  ReceiveCosts receives_predicted;
  ReceiveCosts receives_measured;
};

// Refuses (TraceError "PRED has 2 ranks, MEAS has 100000: ...") a pair whose rank counts
// differ: they are not one pipeline predicted and measured. ppsim compare and the viewer ask
// before pairing; compare_traces itself takes any pair.
void check_same_rank_count(const Trace& predicted, const Trace& measured, std::string_view predicted_name,
                           std::string_view measured_name);

// Events are the same when rank, name, stage and micro-batch agree (SPEC.md section 5): the
// name as its typed kind (event_kind.hpp), and the name itself only for events of no kind
// (plain traces); the k-th occurrence in one trace (in start order) matches the k-th in the
// other. `top` bounds top_differences.
Comparison compare_traces(const Trace& predicted, const Trace& measured, std::size_t top = 10);

// The idle share of `rank`'s compute lane in [0, iteration_us): 1 - busy / iteration, where
// busy is the union of the lane's events (overlaps count once).
double bubble_fraction(const Trace& trace, int rank, double iteration_us);

// The span of a trace's events: latest event end minus earliest event start (0 for no events).
double event_span_us(const Trace& trace);

// The iteration of a trace: the step's wall time its writer recorded (meta.run.step_time_s:
// pprun's, which includes gathering the step's figures after the last instruction, and the
// simulator's with a step overhead), else event_span_us.
double iteration_time_us(const Trace& trace);

// The share of the step the hypervisor took from `rank`'s cores while it ran (pprun records
// meta.run.stolen_time_s on a virtual machine's /proc/stat): a measurement with more than
// kDisturbedStolenFraction of it was slowed down by the host, not by the run. NaN when the
// trace does not say.
double stolen_time_fraction(const Trace& trace, int rank);
inline constexpr double kDisturbedStolenFraction = 0.02;

// The highest memory counter of `rank`; 0 when it has none.
std::int64_t peak_memory_bytes(const Trace& trace, int rank);

// SPEC.md section 7 (`ppsim compare --json`), plus ranks, matching counts and the top
// differences (with the events' rank, name, stage and micro-batch).
nlohmann::json comparison_to_json(const Comparison& comparison, const Trace& predicted, const Trace& measured);

}  // namespace pipescope::traces
