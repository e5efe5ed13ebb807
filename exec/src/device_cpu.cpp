// The CPU compute device: the counting allocator's counters; the steady clock times instructions.
#include "pipescope/exec/device.hpp"

namespace pipescope::exec {
namespace {

class CpuDevice final : public ComputeDevice {
 public:
  at::Device device() const override { return at::kCPU; }
  MemoryCounters memory() const override { return cpu_memory(); }
  void reset_peak_memory() override { reset_cpu_peak_memory(); }
  void begin_step() override {}
  std::unique_ptr<DeviceTiming> start_timing() override { return nullptr; }
};

}  // namespace

std::shared_ptr<ComputeDevice> make_cpu_device() { return std::make_shared<CpuDevice>(); }

std::shared_ptr<ComputeDevice> make_local_device(at::DeviceType type, int local_rank) {
  if (type != at::kCUDA) return make_cpu_device();
  const int gpus = cuda_device_count();
  return make_cuda_device(local_rank % (gpus > 0 ? gpus : 1));
}

}  // namespace pipescope::exec
