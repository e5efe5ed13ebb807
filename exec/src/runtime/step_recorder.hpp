// The measured trace of one step: an event per instruction (compute, collective, send,
// receive), memory samples when the allocated bytes change, and, on devices that time their own
// work, the device's spans in place of the host's. Sends end on the watcher thread, so every
// write to the result is under one lock.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "pipescope/exec/runtime.hpp"
#include "runtime/clock.hpp"

namespace pipescope::exec::runtime {

class StepRecorder {
 public:
  explicit StepRecorder(int world_rank) : world_rank_(world_rank) {}

  // A fresh result whose clock starts now, the device's peak counter reset, a first sample.
  void begin_step(ComputeDevice& device);
  // Opens the event of `instr` on `lane` at the current time; returns its index.
  std::size_t begin_event(traces::Lane lane, const Instruction& instr, int peer_rank = -1, std::int64_t bytes = -1);
  void end_event(std::size_t index, double end_abs_us);
  // A receive's event starts when it began to wait, before the bytes were known.
  void move_event_start(std::size_t index, double start_abs_us);
  // Adds a sample when the device's allocated bytes changed since the last one.
  void sample_memory(ComputeDevice& device);

  // Runs `work` as the event of `instr`, timed by the host and, where it can, by the device.
  template <typename Work>
  void timed(traces::Lane lane, const Instruction& instr, ComputeDevice& device, Work&& work) {
    const auto index = begin_event(lane, instr);
    auto device_timing = device.start_timing();
    work();
    end_event(index, now_us());
    if (device_timing) {
      device_timing->stop();
      device_timings_.emplace_back(index, std::move(device_timing));
    }
  }

  // The result being recorded; only the compute thread writes its losses, outputs and norm.
  StepResult& result() { return result_; }
  // Closes the step (after every send completed): its time, the device spans, the peak memory.
  StepResult finish(ComputeDevice& device);

 private:
  // On a GPU the host returns from an instruction before its kernels ran: the device's own
  // timings replace the host's spans at the end of the step.
  void resolve_device_timings();

  int world_rank_;
  std::mutex mutex_;
  StepResult result_;
  std::vector<std::pair<std::size_t, std::unique_ptr<DeviceTiming>>> device_timings_;  // event index, its device span
  std::int64_t last_memory_bytes_ = -1;
};

}  // namespace pipescope::exec::runtime
