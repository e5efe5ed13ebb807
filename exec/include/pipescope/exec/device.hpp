// Where a rank computes (pprun --device cpu|cuda): the torch device its tensors live on, the
// memory counters its trace reports and how its instructions are timed. The CPU device counts
// tensor storage with the counting allocator and times with the steady clock; the CUDA device
// (builds with PIPESCOPE_WITH_CUDA) reads the CUDA caching allocator's counters and times the
// GPU work itself with CUDA events, since a kernel launch returns before the kernel has run.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace pipescope::exec {

// ---- memory counters ------------------------------------------------------------------------
// Memory counters of a run. On CPU a counting allocator wraps LibTorch's CPU allocator for the
// life of the process (current and peak bytes of tensor storage); on GPU the numbers come from
// the CUDA caching allocator.

struct MemoryCounters {
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;
};

// Installs the counting CPU allocator (idempotent). Tensors allocated before it are not counted.
void install_counting_cpu_allocator();

// Keeps memory that tensors free inside the process for the next allocation of that size,
// instead of handing it back to the system (glibc's malloc does that once a freed block at the
// top of the heap exceeds its trim threshold, or for blocks it mapped on their own). A training
// step frees and allocates the same multi-megabyte activations and gradients every
// micro-batch; returned memory comes back as fresh pages, each faulted in and zeroed by the
// kernel. On this machine that cost the mlp of bench/pipelining a quarter of its step time.
// LibTorch's CPU allocator has no cache of its own. Idempotent; no effect outside glibc.
void retain_freed_cpu_memory();

MemoryCounters cpu_memory();
// Starts a new peak window: the peak becomes the current value.
void reset_cpu_peak_memory();

// ---- devices ----------------------------------------------------------------------------------

// A CUDA or NCCL call that failed, or a device that cannot be used.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The time span of one instruction on the device, known once the device has got there.
class DeviceTiming {
 public:
  virtual ~DeviceTiming() = default;
  // Marks the end, after the instruction's work has been issued.
  virtual void stop() = 0;
  // Start and end on the steady clock (microseconds since its epoch); waits for the device.
  virtual std::pair<double, double> span_us() = 0;
};

class ComputeDevice {
 public:
  virtual ~ComputeDevice() = default;
  virtual at::Device device() const = 0;
  virtual MemoryCounters memory() const = 0;
  // Starts a new peak window: the peak becomes the current value.
  virtual void reset_peak_memory() = 0;
  // Called at the start of each step, before any instruction is timed.
  virtual void begin_step() = 0;
  // Starts timing an instruction; nullptr where the steady clock around the call is the truth.
  virtual std::unique_ptr<DeviceTiming> start_timing() = 0;
};

std::shared_ptr<ComputeDevice> make_cpu_device();

// True in a program linked with the CUDA path (pipescope::exec_cuda: exec-cuda/pprun of a
// PIPESCOPE_WITH_CUDA build); false in pipescope::exec's CPU-only programs.
bool cuda_support_built();
// The GPU `device_index` of this process. Throws DeviceError when the build has no CUDA path or
// the machine no such GPU.
std::shared_ptr<ComputeDevice> make_cuda_device(int device_index);
// GPUs visible to this process (0 without the CUDA path or without a driver).
int cuda_device_count();
// The device of the rank `local_rank` of a node: the CPU, or for kCUDA the node's GPU
// local_rank (modulo the GPUs there). Throws DeviceError as make_cuda_device does.
std::shared_ptr<ComputeDevice> make_local_device(at::DeviceType type, int local_rank);

}  // namespace pipescope::exec
