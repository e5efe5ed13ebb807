// The experts' own compute in a MoE layer, timed call by call for the measured trace: each
// expert's forward on the rows it got, and its backward. Calibration fits a cost per call and
// per row from these, so that a profile learnt at one expert parallelism E can put back the
// X / E calls a rank makes at another (docs/MOE-EXEC.md, "The measured trace").
//
// A model's MoE blocks and pprun's worker share one log: the log of the model's ExpertParallel
// (expert_call_log), which both already hold. Timing costs two clock reads per call and adds no
// synchronisation: on the CPU an expert's call is done when it returns. On a device that times
// its own work (a GPU, where a call returns once its kernels are queued) the log is told so
// (time_on) and each call is also timed by the device, in the same clock as the passes' events
// (runtime/step_recorder.hpp): the device's spans replace the host's when the records are taken.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "pipescope/exec/device.hpp"
#include "pipescope/exec/expert_parallel.hpp"

namespace pipescope::exec::moe {

// One expert's forward or backward on `rows` rows.
struct ExpertCallRecord {
  std::string layer;  // the MoE layer ("blocks.2")
  int expert = 0;     // the expert's id in its layer
  bool backward = false;
  std::int64_t rows = 0;
  double start_us = 0;  // the steady clock, as the runtime's events (runtime/clock.hpp)
  double end_us = 0;
};

class ExpertCallLog {
 public:
  // The device the experts compute on; set once, before the first call. A device that leaves
  // timing to the steady clock (the CPU: start_timing gives none) changes nothing.
  void time_on(std::shared_ptr<ComputeDevice> device) { device_ = std::move(device); }
  // The device's timing of a call about to be issued; none where the host's clock is the truth.
  std::unique_ptr<DeviceTiming> start_device_timing() const;

  // `timing` (stopped after the call's work was issued): its span replaces the record's.
  void record(ExpertCallRecord record, std::unique_ptr<DeviceTiming> timing = nullptr);
  // The records since the last call, oldest first; waits for the device where it timed them.
  std::vector<ExpertCallRecord> take_records();

  // An expert's backward is seen from its two ends: its output's gradient arriving (begin),
  // then its input's gradient leaving (end); the pair is matched by layer, expert and thread.
  void begin_backward(const std::string& layer, int expert, double now_us);
  void end_backward(const std::string& layer, int expert, std::int64_t rows, double now_us);

 private:
  struct BackwardStart {
    double host_us = 0;
    std::unique_ptr<DeviceTiming> timing;
  };
  std::shared_ptr<ComputeDevice> device_;
  std::mutex mutex_;
  std::vector<ExpertCallRecord> records_;
  std::vector<std::unique_ptr<DeviceTiming>> timings_;  // one per record; null: the host's span stands
  std::map<std::tuple<std::string, int, std::thread::id>, BackwardStart> backward_started_;
};

// The log of the model whose MoE layers share `expert_parallel` (made on first use).
ExpertCallLog& expert_call_log(const ExpertParallel& expert_parallel);

// `expert(rows)`, its forward and (through autograd) its backward timed into `log`.
at::Tensor timed_expert_call(const std::function<at::Tensor(const at::Tensor&)>& expert, const at::Tensor& rows,
                             ExpertCallLog& log, const std::string& layer, int expert_id);

}  // namespace pipescope::exec::moe
