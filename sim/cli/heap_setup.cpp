#include "heap_setup.hpp"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

namespace pipescope::cli {
namespace {

constexpr std::uintptr_t kHugePageBytes = 2u << 20;
// The heap reserved at start-up: address space only, memory is faulted in as it is used. It
// covers what `ppsim simulate` of 1.5 M instructions touches (~115 MB) with room to spare;
// larger runs grow the heap past it in ordinary pages.
constexpr std::size_t kReservedHeapBytes = 256u << 20;
constexpr std::size_t kGlibcDefaultTopPad = 128u << 10;

// What glibc.malloc.hugetlb=1 (GLIBC_TUNABLES) does, which a program cannot set for itself:
// grow the heap once by kReservedHeapBytes and mark that range for transparent huge pages
// (with THP in "madvise" mode, the usual default, nothing else gets them).
void reserve_heap_in_huge_pages() {
  const auto before = reinterpret_cast<std::uintptr_t>(sbrk(0));
  mallopt(M_TOP_PAD, static_cast<int>(kReservedHeapBytes));
  // More than the heap's free top holds at start-up; volatile, or the compiler drops the pair.
  void* volatile forces_growth = std::malloc(1u << 20);
  std::free(forces_growth);
  mallopt(M_TOP_PAD, static_cast<int>(kGlibcDefaultTopPad));
  const auto after = reinterpret_cast<std::uintptr_t>(sbrk(0));
  const std::uintptr_t first = (before + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  const std::uintptr_t last = after & ~(kHugePageBytes - 1);
  // A kernel without THP refuses the advice: the heap then works as before.
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

}  // namespace

void prepare_heap_for_large_schedules() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest: blocks below it come from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);   // and stay there when freed
  reserve_heap_in_huge_pages();
}

}  // namespace pipescope::cli
