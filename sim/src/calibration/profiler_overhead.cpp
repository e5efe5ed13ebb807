// torch.profiler's own cost: it records every CPU operator, and on a CPU, where the operators
// are the computation, what it spends per operator (a few microseconds) is inside every traced
// duration: the profiled steps run 5-10% slower than the same steps without it
// (docs/ACCURACY.md). Given each run's step time without the profiler, the costs the program
// spends are scaled by its ratio to the run's profiled steps' time (the runs' ratios averaged
// over their steps); the transfer's latency and bandwidth (time on the wire, not the program's)
// are not.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "estimation.hpp"
#include "pipescope/core/errors.hpp"

namespace pipescope::sim::calibration {

void take_out_profiler_overhead(Estimation& e, const std::vector<std::reference_wrapper<const MeasuredTrace>>& traces,
                                const std::vector<double>& unprofiled_step_s) {
  // The torch runs in the order their traces come (a run's steps are traces of the same files),
  // with the sum of their steps' lengths and their count.
  struct Run {
    std::vector<std::string> files;
    double profiled_us = 0;
    int steps = 0;
  };
  std::vector<Run> runs;
  for (const MeasuredTrace& mt : traces) {
    const auto& torch = mt.trace.meta.run.torch_profiler;
    if (!torch || !torch->step_duration_us) continue;
    auto run = std::find_if(runs.begin(), runs.end(), [&](const Run& r) { return r.files == torch->files; });
    if (run == runs.end()) run = runs.insert(runs.end(), Run{torch->files});
    run->profiled_us += *torch->step_duration_us;
    ++run->steps;
  }
  if (runs.empty())
    throw UsageError(
        "--unprofiled-step-time: none of the traces is a step of torch.profiler (ProfilerStep#N spans): "
        "there is no profiled step to compare it with");
  if (runs.size() != unprofiled_step_s.size())
    throw UsageError(
        fmt::format("--unprofiled-step-time: {} time(s) given for {} profiled torch run(s): give one per run, "
                    "in the order of the runs, separated by commas",
                    unprofiled_step_s.size(), runs.size()));
  double weighted = 0;
  int steps = 0;
  std::string each;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const double profiled_us = runs[i].profiled_us / runs[i].steps;
    const double factor = unprofiled_step_s[i] * 1e6 / profiled_us;
    weighted += factor * runs[i].steps;
    steps += runs[i].steps;
    each +=
        fmt::format("{}{}: {} profiled step(s) of {:.2f} ms on average, {:.2f} ms without the profiler", i ? "; " : "",
                    runs[i].files.at(0), runs[i].steps, profiled_us * 1e-3, unprofiled_step_s[i] * 1e3);
    if (factor > 1)
      e.note(
          fmt::format("{}: the step without the profiler was the slower one: the two measurements were disturbed "
                      "(a busy machine?); its costs are scaled up as given",
                      runs[i].files.at(0)));
  }
  const double factor = weighted / steps;
  Profile& p = e.result.profile;
  for (StageProfile& s : p.stages)
    for (double* cost : {&s.f_s, &s.b_s, &s.w_s, &s.full_backward_s, &s.optimizer_s, &s.reduce_grads_s, &s.load_s,
                         &s.reduce_tied_s, &s.send_s, &s.recv_s, &s.recv_contended_s, &s.grad_accumulate_s})
      *cost *= factor;
  p.instruction_overhead_s *= factor;
  p.step_overhead_s *= factor;
  if (!p.calibration) p.calibration.emplace();
  p.calibration->profiler_overhead_factor = factor;
  e.note(
      fmt::format("torch.profiler's own cost taken out ({}): the program's costs are scaled by {:.4f}", each, factor));
}

}  // namespace pipescope::sim::calibration
