// retain_freed_cpu_memory: after it, memory that tensors free stays with the process. The test
// allocates 16 tensors of 4 MiB (64 MiB, pages touched), frees them all, and expects the
// resident set to stay at least 48 MiB above where it started; glibc's defaults would hand
// those blocks back (mmap for large blocks, trimming above 128 KiB of free heap top), and
// the resident set would fall back to within a MiB or so of where it started.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <unistd.h>

#include <fstream>
#include <vector>

#include "pipescope/exec/device.hpp"

namespace {

std::int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t size_pages = 0, resident_pages = 0;
  statm >> size_pages >> resident_pages;
  return resident_pages * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
}

void allocate_and_free(int tensors, std::int64_t floats_each) {
  std::vector<at::Tensor> held;
  for (int i = 0; i < tensors; ++i) held.push_back(at::ones({floats_each}));
}

}  // namespace

TEST_CASE("retain_freed_cpu_memory keeps freed tensor memory in the process", "[memory]") {
#if defined(__GLIBC__)
  pipescope::exec::retain_freed_cpu_memory();
  constexpr std::int64_t kMiB = 1 << 20;
  const std::int64_t before = resident_bytes();
  allocate_and_free(16, 4 * kMiB / 4);
  const std::int64_t after_free = resident_bytes();
  CHECK(after_free - before >= 48 * kMiB);
#else
  SUCCEED("not glibc: retain_freed_cpu_memory does nothing");
#endif
}
