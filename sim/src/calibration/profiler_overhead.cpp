// torch.profiler's own cost: it records every CPU operator, and on a CPU, where the operators
// are the computation, what it spends per operator (a few microseconds) is inside every traced
// duration: the profiled steps run 5-10% slower than the same steps without it
// (docs/ACCURACY.md). Given the run's step time without the profiler, the costs the program
// spends are scaled by its ratio to the profiled steps' time; the transfer's latency and
// bandwidth (time on the wire, not the program's) are not.
#include <fmt/format.h>

#include "estimation.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/traces/torch_profiler.hpp"

namespace pipescope::sim::calibration {

void take_out_profiler_overhead(Estimation& e, const std::vector<std::reference_wrapper<const MeasuredTrace>>& traces,
                                double unprofiled_step_s) {
  double profiled_us = 0;
  int steps = 0;
  for (const MeasuredTrace& mt : traces) {
    const auto torch = mt.trace.meta.extra.find("torch_profiler");
    if (torch == mt.trace.meta.extra.end() || !torch->contains(traces::kStepDurationKey)) continue;
    profiled_us += (*torch)[traces::kStepDurationKey].get<double>();
    ++steps;
  }
  if (steps == 0)
    throw UsageError("--unprofiled-step-time: none of the traces is a step of torch.profiler (ProfilerStep#N spans): "
                     "there is no profiled step to compare it with");
  profiled_us /= steps;
  const double factor = unprofiled_step_s * 1e6 / profiled_us;
  Profile& p = e.result.profile;
  for (StageProfile& s : p.stages)
    for (double* cost : {&s.f_s, &s.b_s, &s.w_s, &s.full_backward_s, &s.optimizer_s, &s.reduce_grads_s, &s.load_s,
                         &s.reduce_tied_s, &s.send_s, &s.recv_s, &s.recv_contended_s, &s.grad_accumulate_s})
      *cost *= factor;
  p.instruction_overhead_s *= factor;
  p.step_overhead_s *= factor;
  p.extra["calibration"]["profiler_overhead_factor"] = factor;
  e.note(fmt::format("torch.profiler's own cost taken out: the {} profiled step(s) took {:.2f} ms on average, the "
                     "step without the profiler {:.2f} ms: the program's costs are scaled by {:.4f}",
                     steps, profiled_us * 1e-3, unprofiled_step_s * 1e3, factor));
  if (factor > 1)
    e.note("the step without the profiler was the slower one: the two measurements were disturbed (a busy machine?); "
           "the costs are scaled up as given");
}

}  // namespace pipescope::sim::calibration
