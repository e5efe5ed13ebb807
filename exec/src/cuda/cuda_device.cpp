// The CUDA compute device: tensors on GPU `index`, memory from the CUDA caching allocator's
// device statistics (allocated bytes, current and peak), instructions timed with CUDA events
// on the current stream and mapped onto the steady clock through one anchor event per step.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/version.h>

#include <chrono>

#include "checked_call.hpp"
#include "pipescope/exec/device.hpp"

namespace pipescope::exec {
namespace {

// The allocator's statistics live in the device-generic c10::CachingAllocator in 2.15 and in
// c10::cuda::CUDACachingAllocator in 1.13; 2.4 as the first release of the new place is taken
// from the release notes, not compiled here.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
constexpr auto kAggregateStat = c10::CachingAllocator::StatType::AGGREGATE;
#else
constexpr auto kAggregateStat = c10::cuda::CUDACachingAllocator::StatType::AGGREGATE;
#endif

double steady_now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// An event that can be timed against others (no cudaEventDisableTiming).
class TimedEvent {
 public:
  TimedEvent() { PIPESCOPE_CHECKED_CALL(cudaEventCreate(&event_)); }
  ~TimedEvent() { cudaEventDestroy(event_); }
  TimedEvent(const TimedEvent&) = delete;
  TimedEvent& operator=(const TimedEvent&) = delete;
  void record(cudaStream_t stream) { PIPESCOPE_CHECKED_CALL(cudaEventRecord(event_, stream)); }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Where the device clock meets the steady clock in this step.
struct StepAnchor {
  TimedEvent event;
  double host_us = 0;
};

double elapsed_us(const TimedEvent& from, const TimedEvent& to) {
  float ms = 0;
  PIPESCOPE_CHECKED_CALL(cudaEventElapsedTime(&ms, from.get(), to.get()));
  return static_cast<double>(ms) * 1000.0;
}

class CudaTiming final : public DeviceTiming {
 public:
  CudaTiming(std::shared_ptr<StepAnchor> anchor, cudaStream_t stream) : anchor_(std::move(anchor)), stream_(stream) {
    start_.record(stream_);
  }
  void stop() override { end_.record(stream_); }
  std::pair<double, double> span_us() override {
    PIPESCOPE_CHECKED_CALL(cudaEventSynchronize(end_.get()));
    return {anchor_->host_us + elapsed_us(anchor_->event, start_), anchor_->host_us + elapsed_us(anchor_->event, end_)};
  }

 private:
  std::shared_ptr<StepAnchor> anchor_;
  cudaStream_t stream_;
  TimedEvent start_;
  TimedEvent end_;
};

class CudaDevice final : public ComputeDevice {
 public:
  explicit CudaDevice(int index) : index_(static_cast<c10::DeviceIndex>(index)) {
    int count = 0;
    PIPESCOPE_CHECKED_CALL(cudaGetDeviceCount(&count));
    if (index < 0 || index >= count)
      throw DeviceError(fmt::format("--device cuda: GPU {} does not exist (this machine has {})", index, count));
    c10::cuda::set_device(index_);
  }

  at::Device device() const override { return {at::kCUDA, index_}; }

  MemoryCounters memory() const override {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index_);
    const auto& allocated = stats.allocated_bytes[static_cast<std::size_t>(kAggregateStat)];
    return {allocated.current, allocated.peak};
  }
  void reset_peak_memory() override { c10::cuda::CUDACachingAllocator::resetPeakStats(index_); }

  void begin_step() override {
    // A fresh anchor per step: timings of the last step keep theirs until they are read.
    auto anchor = std::make_shared<StepAnchor>();
    anchor->event.record(stream());
    PIPESCOPE_CHECKED_CALL(cudaEventSynchronize(anchor->event.get()));
    anchor->host_us = steady_now_us();
    anchor_ = std::move(anchor);
  }

  std::unique_ptr<DeviceTiming> start_timing() override {
    if (!anchor_) begin_step();
    return std::make_unique<CudaTiming>(anchor_, stream());
  }

 private:
  cudaStream_t stream() const { return c10::cuda::getCurrentCUDAStream(index_).stream(); }

  c10::DeviceIndex index_;
  std::shared_ptr<StepAnchor> anchor_;
};

}  // namespace

bool cuda_support_built() { return true; }

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::shared_ptr<ComputeDevice> make_cuda_device(int device_index) { return std::make_shared<CudaDevice>(device_index); }

}  // namespace pipescope::exec
