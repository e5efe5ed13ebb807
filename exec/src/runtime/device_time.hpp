// How long a piece of work keeps the compute device busy, for the probes that time work outside
// the steps (runtime/backward_split_probe.hpp, moe/expert_call_probe.hpp), and the device's span
// of the MoE records timed inside a step (moe/expert_calls.hpp, ExpertParallel): calibration sets
// their timings beside the steps', so they read the clock the steps' events do.
#pragma once

#include <algorithm>

#include "pipescope/exec/device.hpp"
#include "runtime/clock.hpp"

namespace pipescope::exec::runtime {

// `work`'s time: the device's own timing where the device times itself (a launch returns before
// its kernels have run), the steady clock around the call otherwise.
template <typename Work>
double device_time_us(ComputeDevice& device, Work&& work) {
  auto timing = device.start_timing();
  const double start = now_us();
  work();
  if (!timing) return now_us() - start;
  timing->stop();
  const auto [from_us, to_us] = timing->span_us();
  return to_us - from_us;
}

// Where `timing` (stopped) timed a piece of work on the device, its span replaces the host's
// [start_us, end_us], whose start stays where `keeps_start` (work that began on the host before
// its kernels were issued); no timing: the host's span stands.
inline void take_device_span(DeviceTiming* timing, double& start_us, double& end_us, bool keeps_start = false) {
  if (!timing) return;
  const auto [from_us, to_us] = timing->span_us();
  if (!keeps_start) start_us = from_us;
  end_us = std::max(to_us, start_us);
}

}  // namespace pipescope::exec::runtime
