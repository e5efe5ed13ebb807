#include "pipescope/exec/device.hpp"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// c10::Allocator::allocate lost its const and gained a pure copy_data() in LibTorch 2.x (both
// are compiled here against 1.13 and 2.15; 2.3 as the first such release is assumed).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define PIPESCOPE_ALLOCATE_CONST
#define PIPESCOPE_ALLOCATOR_HAS_COPY_DATA 1
#else
#define PIPESCOPE_ALLOCATE_CONST const
#define PIPESCOPE_ALLOCATOR_HAS_COPY_DATA 0
#endif

namespace pipescope::exec {
namespace {

std::atomic<std::int64_t> g_current_bytes{0};
std::atomic<std::int64_t> g_peak_bytes{0};

// The wrapped allocations by data pointer. LibTorch's raw_allocate path requires the context of
// a DataPtr to be its data pointer, so the bookkeeping lives in this table instead.
struct CountedBlock {
  c10::DataPtr inner;
  std::int64_t bytes;
};
std::mutex g_blocks_mutex;
std::unordered_map<void*, CountedBlock>* g_blocks =
    new std::unordered_map<void*, CountedBlock>();  // never freed: outlives static tensors

void delete_counted(void* data) {
  CountedBlock block;
  {
    std::lock_guard<std::mutex> lock(g_blocks_mutex);
    auto it = g_blocks->find(data);
    if (it == g_blocks->end()) return;
    block = std::move(it->second);
    g_blocks->erase(it);
  }
  g_current_bytes.fetch_sub(block.bytes, std::memory_order_relaxed);
  // `block.inner` frees the wrapped allocation through its own deleter when it goes.
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(std::size_t n) PIPESCOPE_ALLOCATE_CONST override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const auto device = inner.device();
    if (data == nullptr) return inner;  // zero-byte allocations
    const auto bytes = static_cast<std::int64_t>(n);
    {
      std::lock_guard<std::mutex> lock(g_blocks_mutex);
      g_blocks->emplace(data, CountedBlock{std::move(inner), bytes});
    }
    const auto now = g_current_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    auto peak = g_peak_bytes.load(std::memory_order_relaxed);
    while (now > peak && !g_peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    return {data, data, &delete_counted, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_counted; }
#if PIPESCOPE_ALLOCATOR_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override { inner_->copy_data(dest, src, count); }
#endif

 private:
  c10::Allocator* inner_;
};

std::once_flag g_install_once;

}  // namespace

void install_counting_cpu_allocator() {
  std::call_once(g_install_once, [] {
    static CountingAllocator allocator(c10::GetCPUAllocator());
    // Priority above the default registration, so nothing later replaces it silently.
    c10::SetAllocator(c10::DeviceType::CPU, &allocator, /*priority=*/100);
  });
}

MemoryCounters cpu_memory() { return {g_current_bytes.load(), g_peak_bytes.load()}; }

void reset_cpu_peak_memory() { g_peak_bytes.store(g_current_bytes.load()); }

void retain_freed_cpu_memory() {
#if defined(__GLIBC__)
  // A fixed mmap threshold at glibc's maximum (32 MiB on 64-bit) stops the dynamic threshold
  // from sending blocks back to mmap; the trim threshold keeps freed heap memory mapped.
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)done;
#endif
}

}  // namespace pipescope::exec
