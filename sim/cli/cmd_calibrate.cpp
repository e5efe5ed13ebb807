// `ppsim calibrate MEASURED... -o PROFILE [--statistic median|mean] [--report FILE] [--quiet]`: learns per-stage costs
// from measured traces of pprun or of torch.profiler (one run's per-rank files or their folder
// are one trace; --step picks its step) (calibration.hpp) and writes the profile that `ppsim simulate
// --profile` reads. Prints what it learnt, the outliers and what it could not measure.
#include <algorithm>
#include <boost/program_options.hpp>
#include <iostream>

#include <fmt/format.h>

#include "command.hpp"
#include "number_options.hpp"
#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/terminal_text.hpp"
#include "pipescope/sim/calibration.hpp"
#include "pipescope/traces/trace_arguments.hpp"
#include "pipescope/traces/torch_profiler.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "traced_steps.hpp"

namespace po = boost::program_options;

namespace pipescope::cli {
namespace {

// What makes a profile less accurate than docs/ACCURACY.md reports, said rather than guessed
// around: one traced step (one sample of each operation's step-to-step variation), and ranks
// that shared every core of the machine (they preempt each other's computation).
void say_what_the_traces_lack(const std::vector<sim::MeasuredTrace>& traces, bool profiler_overhead_taken_out) {
  if (traces.size() == 1) {
    if (traces[0].trace.meta.run.torch_profiler)
      std::cerr << "calibrate: note: one profiled step (" << printable(traces[0].source)
                << "): costs are one sample each (calibrate reads every ProfilerStep#N of a torch.profiler run, "
                   "or the one --step names)\n";
    else
      std::cerr << "calibrate: note: one traced step (" << printable(traces[0].source)
                << "): costs are one sample each; pprun --trace traces every step after the first by default "
                   "(--trace-steps K), and calibrate reads them all\n";
  }
  for (const sim::MeasuredTrace& t : traces) {
    const traces::RunDescription& run = t.trace.meta.run;
    if (run.bind_cores == false && run.device.value_or("cpu") == "cpu" && run.pipeline_ranks.value_or(1) > 1) {
      std::cerr << "calibrate: note: " << printable(t.source)
                << ": the ranks shared every core (pprun --no-bind-cores, or fewer cores than ranks): their "
                   "costs include time lost to each other\n";
      break;
    }
  }
  if (profiler_overhead_taken_out) return;
  for (const sim::MeasuredTrace& t : traces) {
    const auto& torch = t.trace.meta.run.torch_profiler;
    if (!torch || !torch->operators_per_rank) continue;
    std::cerr << "calibrate: note: torch.profiler recorded " << *torch->operators_per_rank
              << " CPU operators per rank in a step; its own cost per operator (a few microseconds) is inside these "
                 "costs where the CPU runs the operators: --unprofiled-step-time (the step's time without the "
                 "profiler) takes it out\n";
    break;
  }
}

// "0.41,0.385": positive seconds, one per torch run.
std::vector<double> parse_step_times(const std::string& text) {
  std::vector<double> times;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    std::size_t used = 0;
    double value = 0;
    try {
      value = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size())
      throw UsageError("--unprofiled-step-time: '" + item +
                       "' is not a number of seconds (give one per run: 0.41,0.385)");
    require_finite_above(value, "--unprofiled-step-time", 0);
    times.push_back(value);
    begin = end + 1;
  }
  return times;
}

// What --help says after the options.
constexpr const char* kCalibrateHelpTail =
    "\nMEASURED are trace files of pprun (--trace; .json or .json.gz), of one model on one stage\n"
    "layout, any schedules and micro-batch counts. The steps the same run traced beside a FILE\n"
    "(FILE's name with .stepN before its extension) are read with it. Costs are means (or medians,\n"
    "--statistic) over micro-batches and traces; memory is always the median.\n"
    "The split of a backward into input and weight gradients comes from I/W events (a zb-* run\n"
    "among the traces) or from the executor's split probe; without either it is estimated\n"
    "(--split-input-share, --split-overhead), and predictions that use it say so and widen their\n"
    "interval (--no-split-estimate: split-backward schedules are refused).\n"
    "The per-rank torch.profiler traces of one torch.distributed.pipelining run (several files or\n"
    "their folder) are one measured trace; docs/TORCH-TRACES.md says how their receives are timed.\n";

// --split-input-share, --split-overhead and --no-split-estimate: how a split backward is
// estimated from traces of full backwards only.
void take_split_options(const po::variables_map& vm, sim::CalibrationOptions& calibration_options) {
  calibration_options.split_estimate = !vm["no-split-estimate"].as<bool>();
  if (vm.count("split-input-share")) {
    const double share = vm["split-input-share"].as<double>();
    if (!(share > 0 && share < 1))
      throw UsageError(fmt::format("--split-input-share: must be between 0 and 1, not {:g}", share));
    calibration_options.split_input_share = share;
  }
  if (vm.count("split-overhead")) {
    calibration_options.split_overhead = vm["split-overhead"].as<double>();
    require_finite_at_least(*calibration_options.split_overhead, "--split-overhead", 0);
  }
  if (!calibration_options.split_estimate && (vm.count("split-input-share") || vm.count("split-overhead")))
    throw UsageError("--no-split-estimate with --split-input-share or --split-overhead: give one or the other");
}

int run_calibrate(const std::vector<std::string>& args) {
  std::vector<std::string> inputs;
  std::string output, report_path;
  bool quiet = false;
  // The mean by default: a profile of mean durations predicts the mean step, which is what a
  // measured iteration time is (docs/ACCURACY.md); the median leaves out the long tail.
  std::string statistic = "mean";
  int step = -1;
  std::string unprofiled;
  sim::CalibrationOptions calibration_options;
  po::options_description options("ppsim calibrate MEASURED... -o PROFILE [options]");
  options.add_options()("help,h", "this text")("output,o", po::value(&output),
                                               "the profile to write (pipescope.profile/1 JSON; required)")(
      "report", po::value(&report_path),
      "also write the calibration report (costs, samples, outliers) to FILE (default: none)")(
      "outlier-mads", po::value(&calibration_options.outlier_mads)->default_value(calibration_options.outlier_mads),
      "report samples further than this many scaled median absolute deviations from their median")(
      "outlier-fraction",
      po::value(&calibration_options.outlier_min_fraction)->default_value(calibration_options.outlier_min_fraction),
      "... and further than this fraction of the median")(
      "statistic", po::value(&statistic)->default_value(statistic),
      "what a duration becomes: mean (the expected one, outliers included: predicts the mean step where "
      "operations have a long tail) or median (the typical operation)")(
      "max-stolen",
      po::value(&calibration_options.max_stolen_fraction)->default_value(calibration_options.max_stolen_fraction),
      "leave out a trace whose step lost more than this share of a rank's time to the host (steal on a virtual "
      "machine, recorded by pprun); 1 keeps every trace")(
      "step", po::value(&step), "torch.profiler traces: the ProfilerStep#N to learn from (default: every one)")(
      "unprofiled-step-time", po::value(&unprofiled),
      "torch.profiler traces: each run's mean step time without the profiler, in seconds (one per run, in the "
      "order of the runs, separated by commas); the program's costs are scaled by it over the profiled steps' "
      "time, taking out the profiler's own cost")(
      "split-input-share", po::value<double>(),
      "traces of full backwards only: the input gradient's share of a backward, for the estimated split (default 0.5: "
      "equal FLOPs of the input and weight gradients, Zero Bubble's Table 1)")(
      "split-overhead", po::value<double>(),
      "traces of full backwards only: what I + W cost beyond B, as a fraction of B, for the estimated split (default "
      "0.13 for torch.profiler runs, torch's split backward on bench/torch-accuracy; else 0)")(
      "run-spread", po::value<double>(),
      "how much one run's speed differs from the next's as a whole (relative standard deviation), for the "
      "predictions' intervals (default: measured from the traces of two runs or more, else assumed 0.05)")(
      "no-split-estimate", po::bool_switch(),
      "traces of full backwards only: leave the split unmeasured (split-backward "
      "schedules are then refused) instead of estimating it")("quiet,q", po::bool_switch(&quiet),
                                                              "print nothing on success");
  po::options_description hidden;
  hidden.add_options()("measured", po::value(&inputs));
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("measured", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  if (vm.count("help")) {
    std::cout << options << kCalibrateHelpTail;
    return 0;
  }
  po::notify(vm);
  if (inputs.empty()) throw UsageError("calibrate needs at least one measured trace (see ppsim calibrate --help)");
  if (output.empty()) throw UsageError("calibrate: -o PROFILE is required");
  require_finite_above(calibration_options.outlier_mads, "--outlier-mads", 0);
  require_finite_at_least(calibration_options.outlier_min_fraction, "--outlier-fraction", 0);
  require_finite_at_least(calibration_options.max_stolen_fraction, "--max-stolen", 0);
  calibration_options.duration_statistic = sim::parse_duration_statistic(statistic);

  take_split_options(vm, calibration_options);
  if (vm.count("run-spread")) {
    calibration_options.run_spread = vm["run-spread"].as<double>();
    require_finite_at_least(*calibration_options.run_spread, "--run-spread", 0);
  }
  if (vm.count("step") && step < 0) throw UsageError("--step: must be 0 or more, not " + std::to_string(step));
  traces::TorchReadOptions torch_options;
  torch_options.keep_operators = false;  // calibration learns from the pipeline's actions
  if (vm.count("step")) torch_options.step = step;
  torch_options.every_step = true;  // more samples of each operation; --step picks one
  if (vm.count("unprofiled-step-time")) calibration_options.unprofiled_step_s = parse_step_times(unprofiled);
  std::vector<std::string> notes;
  std::vector<sim::MeasuredTrace> traces;
  for (auto& input : traces::read_trace_arguments(with_traced_steps(inputs), torch_options, notes))
    traces.push_back({std::move(input.trace), std::move(input.name)});
  for (const auto& note : notes) std::cerr << "note: " << printable(note) << "\n";
  const sim::Calibration calibration = sim::calibrate(traces, calibration_options);
  if (!quiet) say_what_the_traces_lack(traces, !calibration_options.unprofiled_step_s.empty());
  const std::string report = sim::calibration_report(calibration);
  sim::write_profile(calibration.profile, output);
  if (!report_path.empty()) write_file_atomic(report_path, report);
  if (!quiet) std::cout << printable_lines(report) << "wrote " << printable(output) << "\n";
  return 0;
}

const CommandRegistrar calibrate_registrar{
    {"calibrate", "learn per-stage costs from measured traces (pprun --trace) into a profile", run_calibrate}};

}  // namespace
}  // namespace pipescope::cli
