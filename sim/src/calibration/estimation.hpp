// Calibration's inside (calibration.hpp says what is learnt): collectors read each measured
// trace into samples (collect.cpp), estimators each turn some samples into profile fields,
// report quantities and notes (estimate_*.cpp), and calibrate() runs them in order
// (calibration.cpp). Samples are keyed by enums, never by strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "pipescope/sim/calibration.hpp"

namespace pipescope::sim::calibration {

// Where one sample came from, so an outlier can be named.
struct Sample {
  double value = 0;
  const std::string* source = nullptr;
  int rank = -1;
  int micro_batch = -1;
};
using Samples = std::vector<Sample>;

// Timed operations of a stage. A collective that may wait for every member rank is kept in both
// readings of its first event (from the rank's arrival, from the last member's arrival) until
// the evidence of all traces decides (estimate_collective_waits); then it is Optimizer or
// ReduceTied.
enum class Timed {
  F,
  B,
  I,
  W,
  Load,
  ReduceGrad,
  OptimizerSynced,
  OptimizerUnsynced,
  ReduceTiedSynced,
  ReduceTiedUnsynced,
  Optimizer,
  ReduceTied,
  Send,  // a send's own program time (estimate_message_costs)
};
// Memory deltas of a stage: forward side (LOAD + RECV_F + F), backward side (RECV_B + B or
// I + W), input side (RECV_B + I), the gradient buffer, the memory at the iteration's start.
enum class Footprint { Forward, Backward, Input, GradBuffer, Static };
// Collectives whose first event may wait for every member rank.
enum class Collective { Optimizer, ReduceTied };
inline constexpr Collective kCollectives[] = {Collective::Optimizer, Collective::ReduceTied};

// The trace's action name of a timed operation or a collective ("F", "LOAD", "OPTIMIZER").
std::string action_name(Timed timed);
std::string action_name(Collective collective);

// One all-to-all event of a MoE run (pprun's ALL_TO_ALL_DISPATCH_F, ...): what the rank sent,
// how long it took, and the pass it ran inside.
struct AllToAllSample {
  traces::EventKind kind = traces::EventKind::AllToAllDispatchForward;
  double bytes = 0;
  int group_size = 1;                     // the ranks exchanging, this one included
  double duration_s = 0;                  // the exchange's own time (all_to_all_exchange_times)
  double wait_s = 0;                      // the rest of the event: waiting for the group's last member
  int stage = -1;                         // of the forward or backward it ran inside; -1: none
  std::string layer;                      // the model's layer that ran it ("" when the trace does not say)
  std::vector<double> tokens_per_expert;  // the routing histogram of the rank's tokens
  const std::string* source = nullptr;
  int rank = -1;
};

// One expert's forward or backward in a MoE run's pass (pprun's "expert_calls" args of the
// pass event, docs/MOE-EXEC.md): the rows it got and how long it took.
struct ExpertCallSample {
  bool backward = false;
  double rows = 0;
  double duration_s = 0;
  int stage = -1;
  std::string layer;
};

// Everything measured, over all traces.
struct Collected {
  std::map<std::pair<int, Timed>, Samples> times_s;           // per (stage, operation)
  std::map<std::pair<int, Footprint>, Samples> memory_b;      // per (stage, footprint)
  std::map<int, std::vector<std::int64_t>> activation_bytes;  // per sending stage
  struct TransferPair {
    double bytes = 0;
    double send_start_us = 0;
    double send_end_us = 0;
    const traces::TraceEvent* recv = nullptr;
    const std::string* source = nullptr;
    int from_rank = -1;  // the sender
    // Whether the receive's end is its data's arrival: not for a torch receive timed only to
    // its post (its data came before the compute that needed it; torch_profiler.hpp).
    bool arrival_known = true;
    // A torch receive's own work, its post (its span may run on to the data's arrival); -1
    // for pprun's receives, whose own work is their span when their data was there first.
    double post_us = -1;
  };
  std::vector<TransferPair> transfers;
  // Per stage, from every probe (one per traced run): the input and weight halves' medians
  // over its full backward's median. Runs differ in speed from one another, and the shares
  // are only comparable within one run.
  struct ProbeShares {
    std::vector<double> input, weight;
    std::size_t samples = 0;  // full backwards timed, over all probes
  };
  std::map<int, ProbeShares> probe;
  // The first stage's layers after its first, timed as an inner stage runs them.
  std::map<int, ProbeShares> inner_probe;
  std::set<std::string> schedules;
  std::set<int> micro_batch_counts;
  int data_parallel = 1;
  // Program time between instructions: from the end of one main-thread event to the start
  // of the next, neither a send.
  Samples instruction_gaps;
  // Per trace that recorded its step's wall time: that time less the span of its events.
  Samples step_overheads;
  // Per trace and rank that recorded its transport threads' CPU time (the run description's
  // transport_cpu_s): that time over the rank's messages (sends and receives).
  Samples transport_cpu_per_message;
  // Per sending stage: from the end of the instruction before a send to the start of the one
  // after it (one overhead of each, and the send's packing and posting).
  std::map<int, Samples> send_spans;
  // Per collective: traces whose first such events show (or rule out) a wait for every member.
  std::map<Collective, int> sync_evidence, no_sync_evidence;
  std::vector<AllToAllSample> all_to_all;
  std::vector<ExpertCallSample> expert_calls;
  // The executor's expert-call probe (run description's expert_call_probe): one sample per
  // probed row count, its median time.
  std::vector<ExpertCallSample> expert_call_probe;
  // Per forward and MoE layer: the rows the rank's experts got in it, together.
  std::vector<double> expert_rows_per_layer;
  // The run description's MoE layers: name -> the parameters of all its routed experts, and
  // the routed experts per layer (0: no trace said).
  std::map<std::string, std::int64_t> expert_parameters_of_layer;
  int experts_per_layer = 0;
  // Whether some rank of a MoE run ran two of its passes at once (an overlapped F&B step).
  bool passes_overlapped = false;
  // Per trace and rank whose transport threads shared its core and moved only its exchanges:
  // their CPU time in the step over the rank's exchanges (collect_all_to_all.cpp).
  Samples exchange_transport_cpu;
};

// The number of stages of a trace (its meta, or the highest stage of its events).
int stage_count(const traces::Trace& trace);

// Reads one measured trace of `stages` stages into `out`.
void collect_trace(const MeasuredTrace& mt, int stages, Collected& out);

// Per all-to-all event of a trace, the exchange's own time (us): the duration of the member of
// its group that arrived last (which waited for no one), when the trace holds every member;
// else the event's duration.
std::map<const traces::TraceEvent*, double> all_to_all_exchange_times(const traces::Trace& trace);

// The all-to-all events of one rank of a trace into `out`, each attributed to the forward or
// backward it ran inside; returns, per such compute event, the exchanges' own time (us) it holds.
std::map<const traces::TraceEvent*, double> collect_rank_all_to_all(
    const MeasuredTrace& mt, int rank, const std::map<const traces::TraceEvent*, double>& exchange_us, Collected& out);

// The expert calls in the forwards and backwards of one rank of a trace into `out`; returns,
// per such compute event, the calls' time (us) it holds.
std::map<const traces::TraceEvent*, double> collect_rank_expert_calls(const MeasuredTrace& mt, int rank,
                                                                      Collected& out);
// The run description's MoE layers (their experts and expert parameters) into `out`.
void collect_expert_layers(const traces::RunDescription& run, Collected& out);
// The run description's expert-call probe into `out`; a negative row count or time is refused
// naming the trace and the entry.
void collect_expert_call_probe(const MeasuredTrace& mt, Collected& out);

// Whether each transfer's receive began while a message the other way was posted and not yet
// received (traffic both ways on the pair).
std::vector<char> receives_against_traffic(const std::vector<Collected::TransferPair>& transfers);

// Records quantities and outliers of samples in the calibration, and gives the profile's value.
class Summariser {
 public:
  Summariser(Calibration& result, const CalibrationOptions& options) : result_(result), options_(options) {}
  // The median of `samples` (of durations: the chosen statistic), recorded as a quantity with
  // its median, mean, MAD and range; far samples become outliers.
  double estimate(const std::string& name, const std::string& unit, const Samples& samples);
  // The chosen statistic of some durations, not recorded (the points of a fit).
  double duration(const std::vector<double>& values_s) const;

 private:
  Calibration& result_;
  const CalibrationOptions& options_;
};

// What the estimators share: the samples, the summariser, and the calibration being filled
// (its profile, quantities and notes).
struct Estimation {
  Collected& collected;
  Summariser& summary;
  Calibration& result;
  int num_stages = 0;
  // The transport's work per message, the same for every stage (estimate_message_costs).
  StageRuntimeEffects per_message;
  // Whether every stage's backward split was measured (estimate_stage_compute).
  bool split_everywhere = true;
  // Stages whose I and W were measured but no full backward (B): theirs is taken as I + W.
  std::vector<int> full_backward_unmeasured;
  // Stages that timed full backwards only, with neither I/W nor a probe: their split is
  // estimated or left unmeasured (estimate_backward_split).
  std::vector<int> split_unmeasured;
  // Some of the traces are torch.profiler runs (torch's split backward costs more than its B).
  bool torch_traces = false;
  const CalibrationOptions* options = nullptr;  // set by calibrate()
  // The run each trace (by its source) is a step of: pprun's FILE and its FILE.stepN siblings are
  // one run, as are the steps found in one torch.profiler recording (calibration.cpp).
  std::map<const std::string*, std::string> run_of;
  void note(std::string text) { result.notes.push_back(std::move(text)); }
};

// The estimators, in the order calibrate() runs them (each reads what the earlier ones set).
void estimate_transfers(Estimation& e);                           // profile.transfer
void estimate_program_time(Estimation& e);                        // instruction_overhead_s, step_overhead_s
void estimate_send_completion(Estimation& e);                     // send_ends_at_receive
void estimate_collective_waits(Estimation& e);                    // optimizer_sync, reduce_tied_sync
void estimate_message_costs(Estimation& e);                       // per_message: send_s, recv_s, recv_contended_s
void estimate_stage_compute(Estimation& e, StageProfile& stage);  // times, split, per-message costs
void estimate_stage_memory(Estimation& e, StageProfile& stage);   // memory deltas, buffers, transfer size
void estimate_backward_split(Estimation& e);     // backward_split_measured or _estimate, inner_backward_split
void estimate_step_speed_spread(Estimation& e);  // step_speed_spread
void estimate_all_to_all(Estimation& e);         // all_to_all, stages' moe_layers
void estimate_expert_compute(Estimation& e);     // expert_compute (after record_run and estimate_all_to_all)
// After them, with CalibrationOptions::unprofiled_step_s (profiler_overhead.cpp).
void take_out_profiler_overhead(Estimation& e, const std::vector<std::reference_wrapper<const MeasuredTrace>>& traces,
                                const std::vector<double>& unprofiled_step_s);

const Samples& find_or_empty(const std::map<std::pair<int, Timed>, Samples>& map, int stage, Timed what);
const Samples& find_or_empty(const std::map<std::pair<int, Footprint>, Samples>& map, int stage, Footprint what);

}  // namespace pipescope::sim::calibration
