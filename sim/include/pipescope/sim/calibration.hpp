// Calibration (`ppsim calibrate`): learns a profile (profile.hpp) from measured traces of pprun,
// so that the simulator predicts other schedules and micro-batch counts of the same model and
// world size. Every cost is a median over micro-batches (and traces); samples far from their
// median are reported as outliers, never silently averaged in.
//
// What is learnt, per stage: F, B, I, W, LOAD, optimizer and reduction times (B and W from the
// micro-batches after the first: micro-batch 0's weight gradient becomes the gradient sum
// instead of being added into it, and what that saves is the stage's grad_accumulate_s); the
// compute-lane time of posting a send and of a receive whose data is already there; the memory each
// micro-batch's forward allocates (LOAD + RECV_F + F) and its backward frees; the gradient
// buffer that appears with the first weight gradient; the memory held at the start of the
// iteration. Per run: the transfer latency and bandwidth, from the receives that were waiting
// when their send was posted; the program time between instructions (the gaps between a
// rank's consecutive events); whether the optimizer step and the tied-gradient reduction wait
// for every member rank (an all-reduce: global-norm clipping, tied embeddings), in which case
// their times are measured from the last arrival; whether sends end at their receive.
// A mixture-of-experts run (pprun --model tiny-moe, docs/MOE-EXEC.md): its ALL_TO_ALL_* events,
// read by their kind, each inside the forward or backward that ran it. Each pass is timed net of
// the exchanges it holds; the exchanges give a cost per group size (latency + bytes / bandwidth,
// least squares over the events' bytes sent to other ranks and durations), the bytes of each
// kind per layer and micro-batch, the MoE layers of each stage, the routing imbalance from the
// histograms, and whether any rank ran two passes at once (Profile::all_to_all). The simulator
// adds the exchanges back for the expert-parallel size it predicts (none at E = 1).
// Reported, not modelled yet: the CPU time of each rank's transport threads per message
// (the run description's transport_cpu_s), which delays the computation it shares a core with.
//
// The split of a full backward into its input-gradient and weight-gradient parts comes from
// I/W events (a split-backward schedule among the traces) or from the executor's split probe
// (the run description's backward_split_probe, below). Without either, the profile says so
// (backward_split "unmeasured"), unless the split is estimated (the default: CalibrationOptions'
// split_estimate): then each full backward is split by an input share and an overhead of the
// split (BackwardSplitEstimate in profile.hpp), the profile says "estimated", and every
// prediction that uses it says so and widens its interval by the estimate's uncertainty.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipescope/core/schedule.hpp"
#include "pipescope/sim/profile.hpp"
#include "pipescope/sim/simulator.hpp"
#include "pipescope/traces/compare.hpp"
#include "pipescope/traces/trace.hpp"

namespace pipescope::sim {

// A measured trace's backward split probe (traces::RunDescription::backward_split_probe): the
// executor's separate timings of the two halves of a backward, taken outside the timed
// iteration. The ratios input/full and weight/full split the stage's measured B. The optional
// inner times of the first stage's layers after its first, as an inner stage runs them (the
// first stage itself computes no input gradient), become the profile's
// "inner_backward_split": {"input": .., "weight": ..}, how a stage cut from the first one
// behind another splits its backward when no inner stage was measured (one rank, one GPU).
inline constexpr std::string_view kInnerBackwardSplitField = "inner_backward_split";

// The run-to-run spread assumed from traces of one run (CalibrationOptions::run_spread).
inline constexpr double kAssumedRunSpread = 0.05;

struct CalibrationOptions {
  // A sample is an outlier when it is further from its median than `outlier_mads` scaled
  // median absolute deviations (1.4826 MAD estimates a standard deviation) and than
  // `outlier_min_fraction` of the median.
  double outlier_mads = 5.0;
  double outlier_min_fraction = 0.25;
  // What a duration becomes in the profile. Median: the typical operation, which one stray
  // delay does not move. Mean: the expected operation, outliers included. A step adds up many
  // operations, and a sum of many operations is near the sum of their means: on a machine whose
  // operations have a long tail (shared cores, a scheduler tick now and then) the median
  // profile predicts the fast steps and the mean profile the typical one. Memory is always
  // the median (allocations do not jitter).
  enum class Statistic { Median, Mean };
  Statistic duration_statistic = Statistic::Median;
  // A trace whose step lost more than this share of a rank's time to the host (steal, on a
  // virtual machine: the run description's stolen_time_s) is left out: its operations are longer for
  // reasons outside the run. Traces that do not say are kept.
  double max_stolen_fraction = traces::kDisturbedStolenFraction;
  // The step time (s) of each profiled torch run without torch.profiler, in the order the runs
  // come; empty: not given. The profiler's cost per recorded operator is inside every traced
  // duration on a CPU; the program's costs are scaled by these times over the profiled steps'
  // (calibration/profiler_overhead.cpp).
  std::vector<double> unprofiled_step_s;
  // The run-to-run spread (RunSpeedSpread) to assume when the traces are of one run, which
  // cannot show it; traces of two runs or more measure it instead, unless this is set
  // (`ppsim calibrate --run-spread`). The default is what this project's own 2-vCPU host showed
  // (docs/ACCURACY.md, "Intervals"): a steadier host, measured from two runs, gets narrower intervals.
  std::optional<double> run_spread;
  // Traces of full backwards only: estimate the split of each into input and weight gradients
  // (false: leave it unmeasured, and split-backward schedules are refused). The share of the
  // input gradient: given, or equal FLOPs of the two (a linear layer's input and weight gradients
  // are one product of the same size each: Zero Bubble's Table 1, whose attention term adds to
  // the input side, up to 0.57 at a sequence as long as the hidden size), 0.5 +- 0.1. What I + W
  // cost beyond B: given, or for torch.profiler runs the 13% torch 2.15's split backward
  // measured on bench/torch-accuracy (docs/TORCH-TRACES.md), else 0; +- 0.13 either way.
  bool split_estimate = true;
  std::optional<double> split_input_share;
  std::optional<double> split_overhead;
};

// "median" or "mean"; throws UsageError naming the option for anything else.
CalibrationOptions::Statistic parse_duration_statistic(const std::string& text);
const char* to_string(CalibrationOptions::Statistic statistic);

struct MeasuredTrace {
  traces::Trace trace;
  std::string source;  // the file name, for messages
};

// One learnt quantity and the samples behind it.
struct CalibratedQuantity {
  std::string name;  // "stage 0 F", "transfer delay"
  std::string unit;  // "s" or "bytes"
  std::size_t samples = 0;
  double median = 0;
  double mean = 0;
  double mad = 0;  // median absolute deviation
  double min = 0;
  double max = 0;
};

struct CalibrationOutlier {
  std::string quantity;  // as in CalibratedQuantity::name
  std::string source;
  int rank = -1;
  int micro_batch = -1;
  double value = 0;
  double median = 0;
};

struct Calibration {
  Profile profile;
  std::vector<CalibratedQuantity> quantities;
  std::vector<CalibrationOutlier> outliers;
  std::vector<std::string> notes;  // what could not be measured and what was assumed instead
};

// Throws UsageError naming the file when a trace has no compute events, when traces disagree
// on the number of stages or ranks, or when a stage has no forward or backward samples; and
// when the host disturbed every trace (max_stolen_fraction). The traces left out are notes.
Calibration calibrate(const std::vector<MeasuredTrace>& traces, const CalibrationOptions& options = {});

// Median and median absolute deviation helpers (exposed for tests). Empty input: 0.
double median_of(std::vector<double> values);
double median_absolute_deviation(const std::vector<double>& values);

// The profile of S stages as costs of a schedule with `num_stages` stages (V chunks per rank
// give V*S stages). When the profile knows the model's layers (Profile::layers, stage_bounds,
// "partition_method", recorded by pprun), the new stages are split by the same method and each
// layer takes from its measured stage a share of time, static memory and gradient buffer in
// proportion to its parameters, and an equal share of activation memory. Otherwise, when
// num_stages is V*S, each measured stage is cut into V equal consecutive stages, and when S is
// a multiple of num_stages, consecutive stages merge (sums). Transfer sizes and per-transfer
// costs stay; micro-batch loading stays with the first and last stage. A new stage behind
// another one whose layers come from the measured first stage (which had no input gradient to
// compute) splits its backward into input and weight gradients as the measured later stages
// do. Throws UsageError when neither applies.
Profile profile_for_stages(const Profile& profile, int num_stages, const std::string& source);

// Throws UsageError naming `source` when `schedule` splits backwards (BackwardInput /
// BackwardWeight) but the profile did not measure the split.
void check_profile_fits(const Profile& profile, const CompiledSchedule& schedule, const std::string& source);

// A human-readable account: the learnt costs, the outliers and the notes.
std::string calibration_report(const Calibration& calibration);

}  // namespace pipescope::sim
