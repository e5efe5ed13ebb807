// How long a piece of work keeps the compute device busy, for the probes that time work outside
// the steps (runtime/backward_split_probe.hpp, moe/expert_call_probe.hpp): calibration sets their
// timings beside the steps', so they read the clock the steps' events do.
#pragma once

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

}  // namespace pipescope::exec::runtime
