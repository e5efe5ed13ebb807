// calibrate(): reads the measured traces into samples, then runs the estimators in order
// (calibration/estimation.hpp); each fills its part of the profile and the report.
#include "pipescope/sim/calibration.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <regex>

#include <fmt/format.h>

#include "calibration/estimation.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/traces/compare.hpp"

namespace pipescope::sim {
namespace {

using calibration::Collected;
using calibration::Estimation;
using Traces = std::vector<std::reference_wrapper<const MeasuredTrace>>;

// The traces whose every rank lost at most `max_fraction` of the step to the host (steal), and
// a note for each one left out. Throws UsageError when none is left.
Traces undisturbed_traces(const std::vector<MeasuredTrace>& traces, double max_fraction,
                          std::vector<std::string>& notes) {
  Traces kept;
  std::string first_left_out;
  for (const MeasuredTrace& mt : traces) {
    int worst_rank = -1;
    double worst = 0;
    for (int rank = 0; rank < mt.trace.rank_count(); ++rank)
      if (const double f = traces::stolen_time_fraction(mt.trace, rank); f > worst) {
        worst = f;
        worst_rank = rank;
      }
    if (worst <= max_fraction) {
      kept.push_back(mt);
      continue;
    }
    const std::string why =
        fmt::format("the host took {:.1f}% of rank {}'s step from its cores (steal)", worst * 100, worst_rank);
    if (first_left_out.empty()) first_left_out = fmt::format("{}: {}", mt.source, why);
    notes.push_back(fmt::format("{}: left out: {}", mt.source, why));
  }
  if (kept.empty())
    throw UsageError(
        fmt::format("every measured trace lost more than {:.1f}% of a rank's step to the host ({}{}): measure "
                    "again when the machine is quiet, or raise --max-stolen",
                    max_fraction * 100, first_left_out, traces.size() > 1 ? ", ..." : ""));
  return kept;
}

// Every trace into `c`; the traces must agree on their stages and ranks. Returns the number of
// stages and of ranks.
std::pair<int, int> collect_all(const Traces& traces, Collected& c) {
  int num_stages = -1, num_ranks = -1;
  std::string first_source;
  for (const MeasuredTrace& mt : traces) {
    const int stages = calibration::stage_count(mt.trace);
    const int ranks = mt.trace.rank_count();
    if (stages <= 0) throw UsageError(mt.source + ": no events with a stage: not a pipeline trace");
    if (num_stages < 0) {
      num_stages = stages;
      num_ranks = ranks;
      first_source = mt.source;
    } else if (stages != num_stages || ranks != num_ranks) {
      throw UsageError(
          fmt::format("{}: {} stages on {} ranks, but {} has {} stages on {} ranks: calibrate traces of one "
                      "stage layout together",
                      mt.source, stages, ranks, first_source, num_stages, num_ranks));
    }
    calibration::collect_trace(mt, stages, c);
  }
  return {num_stages, num_ranks};
}

// What the executor said about the run: the model's layers and their split, when every trace
// has the same (they let a profile of S stages predict other stage counts layer by layer:
// profile_for_stages); the model's name; the micro-batch size (the profile's throughput).
void record_run(const Traces& traces, Profile& p) {
  const traces::RunDescription& first_run = traces.front().get().trace.meta.run;
  bool same_layout = first_run.layers && first_run.stage_bounds && first_run.partition_method;
  for (const MeasuredTrace& mt : traces)
    same_layout = same_layout && mt.trace.meta.run.layers == first_run.layers &&
                  mt.trace.meta.run.stage_bounds == first_run.stage_bounds;
  if (same_layout) {
    std::vector<ProfileLayer> layers;
    for (const auto& l : *first_run.layers) layers.push_back({l.name, l.type, l.parameters});
    p.layers = std::move(layers);
    p.stage_bounds = *first_run.stage_bounds;
    p.partition_method = *first_run.partition_method;
  }
  if (first_run.model) p.model = *first_run.model;
  if (first_run.micro_batch_size) p.micro_batch_size = std::max(1, *first_run.micro_batch_size);
}

// The profile's record of its inputs (Profile::calibration).
CalibrationRecord calibration_info(const Traces& traces, std::size_t left_out, const Collected& c, int num_ranks,
                                   const Calibration& result, const CalibrationOptions& options) {
  CalibrationRecord info;
  info.traces.emplace();
  for (const MeasuredTrace& mt : traces) info.traces->push_back(mt.source);
  if (left_out > 0) info.traces_left_out = static_cast<std::int64_t>(left_out);
  info.schedules = std::vector<std::string>(c.schedules.begin(), c.schedules.end());
  info.micro_batches = std::vector<int>(c.micro_batch_counts.begin(), c.micro_batch_counts.end());
  info.num_ranks = num_ranks;
  info.outliers = static_cast<std::int64_t>(result.outliers.size());
  info.duration_statistic = std::string(to_string(options.duration_statistic));
  return info;
}

// Which run each trace is a step of: a torch.profiler recording's steps share its files; pprun's
// `--trace FILE` writes the run's other steps beside FILE as FILE's name with .stepN before its
// extension (sim/cli/traced_steps.hpp), so the name without it names the run.
std::map<const std::string*, std::string> runs_of(const Traces& traces) {
  static const std::regex step_suffix(R"(\.step[0-9]+(\.[^./]+(\.gz)?)$)");
  std::map<const std::string*, std::string> runs;
  for (const MeasuredTrace& mt : traces) {
    const auto& torch = mt.trace.meta.run.torch_profiler;
    std::string run = std::regex_replace(mt.source, step_suffix, "$1");
    if (torch && !torch->files.empty()) {
      run.clear();
      for (const std::string& file : torch->files) run += file + "\n";
    }
    runs[&mt.source] = run;
  }
  return runs;
}

}  // namespace

Calibration calibrate(const std::vector<MeasuredTrace>& given, const CalibrationOptions& options) {
  if (given.empty()) throw UsageError("calibrate: give at least one measured trace");
  // A prediction fitted back into the simulator would only learn the simulator's own costs.
  for (const MeasuredTrace& mt : given)
    if (mt.trace.meta.source == "predicted")
      throw UsageError(mt.source +
                       ": a predicted trace (source \"predicted\", from ppsim simulate): calibrate learns "
                       "from measured traces (pprun --trace)");
  std::vector<std::string> left_out;
  const Traces traces = undisturbed_traces(given, options.max_stolen_fraction, left_out);
  Collected c;
  const auto [num_stages, num_ranks] = collect_all(traces, c);
  // pprun's expert-call probe runs after the traced step and is timed apart from it (medians of
  // five runs): a trace left out for the step's steal still gives its probe, which only the
  // last trace of a run holds.
  for (const MeasuredTrace& mt : given)
    if (std::none_of(traces.begin(), traces.end(), [&](const auto& kept) { return &kept.get() == &mt; }))
      calibration::collect_expert_call_probe(mt, c);

  Calibration result;
  calibration::Summariser summary(result, options);
  Profile& p = result.profile;
  p.data_parallel = c.data_parallel;
  // torch's split backward costs more than its full one (estimate_backward_split).
  const bool torch_traces = std::any_of(traces.begin(), traces.end(), [](const MeasuredTrace& mt) {
    return mt.trace.meta.run.torch_profiler.has_value();
  });
  Estimation e{c, summary, result, num_stages, {}, true, {}, {}, torch_traces, &options, runs_of(traces)};
  // The run's and the transport's estimators first: the stages' use what they learn.
  for (const auto estimator :
       {calibration::estimate_transfers, calibration::estimate_program_time, calibration::estimate_send_completion,
        calibration::estimate_collective_waits, calibration::estimate_message_costs})
    estimator(e);
  for (int s = 0; s < num_stages; ++s) {
    StageProfile sp;
    sp.stage = s;
    calibration::estimate_stage_compute(e, sp);
    calibration::estimate_stage_memory(e, sp);
    p.stages.push_back(sp);
  }
  calibration::estimate_backward_split(e);
  calibration::estimate_step_speed_spread(e);
  calibration::estimate_all_to_all(e);
  record_run(traces, p);
  calibration::estimate_expert_compute(e);  // after the run's layers and the all-to-all
  p.calibration =
      calibration_info(traces, left_out.empty() ? 0 : given.size() - traces.size(), c, num_ranks, result, options);
  result.notes.insert(result.notes.end(), left_out.begin(), left_out.end());
  if (!options.unprofiled_step_s.empty()) calibration::take_out_profiler_overhead(e, traces, options.unprofiled_step_s);
  return result;
}

}  // namespace pipescope::sim
