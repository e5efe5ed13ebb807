// A compute device for tests: memory counters the test sets, and, while `timed_span` is set,
// a timing of its own for every piece of work started (both ends on the steady clock), as a GPU
// times its kernels; unset, the host's clock is the truth, as on the CPU.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "pipescope/exec/device.hpp"

namespace pipescope::exec::testing {

class ScriptedTiming : public DeviceTiming {
 public:
  ScriptedTiming(double start_us, double end_us, int* stopped)
      : start_us_(start_us), end_us_(end_us), stopped_(stopped) {}
  void stop() override { ++*stopped_; }
  std::pair<double, double> span_us() override { return {start_us_, end_us_}; }

 private:
  double start_us_, end_us_;
  int* stopped_;
};

class ScriptedDevice : public ComputeDevice {
 public:
  at::Device device() const override { return at::kCPU; }
  MemoryCounters memory() const override {
    MemoryCounters counters;
    counters.current_bytes = current_bytes;
    counters.peak_bytes = 4096;
    return counters;
  }
  void reset_peak_memory() override {}
  void begin_step() override { ++steps; }
  std::unique_ptr<DeviceTiming> start_timing() override {
    if (!timed_span) return nullptr;
    ++timings_started;
    return std::make_unique<ScriptedTiming>(timed_span->first, timed_span->second, &timings_stopped);
  }
  std::int64_t current_bytes = 0;
  int steps = 0;
  int timings_started = 0;
  int timings_stopped = 0;
  std::optional<std::pair<double, double>> timed_span;
};

}  // namespace pipescope::exec::testing
