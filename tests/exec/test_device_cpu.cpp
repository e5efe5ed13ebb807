// The CPU compute device and the CUDA entry points of a build without the CUDA path.
// Scenario: with the counting allocator installed, a 1024-float tensor (4096 bytes) raises the
// device's current bytes by exactly 4096 and the peak to at least that; freeing it brings the
// current bytes back while the peak stays until reset_peak_memory() makes it equal the current
// bytes. The CPU device is at::kCPU and leaves timing to the steady clock (no DeviceTiming).
// In a CPU-only build, --device cuda fails with a DeviceError that names the option, no GPU is
// counted, and the NCCL transport refuses with a TransportError naming NCCL.
#include <catch2/catch.hpp>

#include "pipescope/exec/device.hpp"
#include "pipescope/exec/transport.hpp"

using namespace pipescope::exec;

TEST_CASE("the CPU device counts tensor storage and keeps the peak until reset") {
  install_counting_cpu_allocator();
  auto device = make_cpu_device();
  CHECK(device->device() == at::Device(at::kCPU));
  device->reset_peak_memory();
  const auto before = device->memory();
  CHECK(before.peak_bytes == before.current_bytes);
  {
    at::Tensor t = at::empty({1024}, at::TensorOptions().dtype(at::kFloat));
    const auto during = device->memory();
    CHECK(during.current_bytes == before.current_bytes + 4096);
    CHECK(during.peak_bytes >= before.current_bytes + 4096);
  }
  const auto after = device->memory();
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after.peak_bytes >= before.current_bytes + 4096);
  device->reset_peak_memory();
  CHECK(device->memory().peak_bytes == device->memory().current_bytes);
}

TEST_CASE("the CPU device times with the steady clock") {
  auto device = make_cpu_device();
  device->begin_step();
  CHECK(device->start_timing() == nullptr);
}

TEST_CASE("a build without the CUDA path refuses --device cuda by name") {
  if (cuda_support_built()) return;  // the CUDA build has its own path; nothing to refuse
  CHECK(cuda_device_count() == 0);
  CHECK_THROWS_WITH(make_cuda_device(0), Catch::Contains("--device cuda"));
  CHECK_THROWS_AS(make_cuda_device(0), DeviceError);
  WorldOptions options;
  CHECK_THROWS_WITH(make_world(at::Device(at::kCUDA, 0), options), Catch::Contains("NCCL"));
}
