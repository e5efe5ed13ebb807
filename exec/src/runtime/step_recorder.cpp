// Recording the trace of a step (see step_recorder.hpp).
#include "runtime/step_recorder.hpp"

#include <algorithm>

namespace pipescope::exec::runtime {

void StepRecorder::begin_step(ComputeDevice& device) {
  result_ = StepResult{};
  device.reset_peak_memory();
  device.begin_step();
  result_.origin_us = now_us();
  last_memory_bytes_ = -1;
  sample_memory(device);
}

std::size_t StepRecorder::begin_event(traces::Lane lane, const Instruction& instr, int peer_rank, std::int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  traces::TraceEvent e;
  e.rank = world_rank_;
  e.lane = static_cast<int>(lane);
  e.name = std::string(op_action_type(instr.op));
  e.kind = traces::event_kind_of(instr.op);
  e.category = lane == traces::Lane::Compute ? "compute" : lane == traces::Lane::Collective ? "collective" : "p2p";
  e.ts_us = now_us() - result_.origin_us;
  e.stage = instr.stage;
  e.micro_batch = needs_micro_batch(instr.op) ? instr.micro_batch : -1;
  e.peer_rank = peer_rank;
  e.bytes = bytes;
  result_.events.push_back(e);
  return result_.events.size() - 1;
}

void StepRecorder::end_event(std::size_t index, double end_abs_us) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& e = result_.events[index];
  e.dur_us = std::max(0.0, end_abs_us - result_.origin_us - e.ts_us);
}

void StepRecorder::move_event_start(std::size_t index, double start_abs_us) {
  std::lock_guard<std::mutex> lock(mutex_);
  result_.events[index].ts_us = start_abs_us - result_.origin_us;
}

void StepRecorder::sample_memory(ComputeDevice& device) {
  const auto bytes = device.memory().current_bytes;
  if (bytes == last_memory_bytes_) return;
  last_memory_bytes_ = bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  result_.memory.push_back({world_rank_, now_us() - result_.origin_us, bytes});
}

void StepRecorder::resolve_device_timings() {
  for (auto& [index, timing] : device_timings_) {
    const auto [start_us, end_us] = timing->span_us();
    std::lock_guard<std::mutex> lock(mutex_);
    auto& e = result_.events[index];
    e.ts_us = start_us - result_.origin_us;
    e.dur_us = std::max(0.0, end_us - start_us);
  }
  device_timings_.clear();
}

StepResult StepRecorder::finish(ComputeDevice& device) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    result_.time_s = (now_us() - result_.origin_us) / 1e6;
  }
  resolve_device_timings();
  result_.peak_memory_bytes = device.memory().peak_bytes;
  StepResult out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out = std::move(result_);
    result_ = StepResult{};
  }
  return out;
}

}  // namespace pipescope::exec::runtime
