// Memory counters of a run. On CPU a counting allocator wraps LibTorch's CPU allocator for the
// life of the process (current and peak bytes of tensor storage); on GPU the numbers come from
// the CUDA caching allocator.
#pragma once

#include <cstdint>

namespace pipescope::exec {

struct MemoryCounters {
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;
};

// Installs the counting CPU allocator (idempotent). Tensors allocated before it are not counted.
void install_counting_cpu_allocator();
bool counting_cpu_allocator_installed();

MemoryCounters cpu_memory();
// Starts a new peak window: the peak becomes the current value.
void reset_cpu_peak_memory();

}  // namespace pipescope::exec
