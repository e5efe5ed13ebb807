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

}  // namespace pipescope::exec
