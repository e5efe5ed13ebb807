#include "pipescope/exec/memory.hpp"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <mutex>

namespace pipescope::exec {
namespace {

std::atomic<std::int64_t> g_current_bytes{0};
std::atomic<std::int64_t> g_peak_bytes{0};

// What a counted allocation carries to its deleter: the wrapped allocation and its size.
struct CountedBlock {
  c10::DataPtr inner;
  std::int64_t bytes;
};

void delete_counted(void* context) {
  auto* block = static_cast<CountedBlock*>(context);
  g_current_bytes.fetch_sub(block->bytes, std::memory_order_relaxed);
  delete block;  // frees the wrapped allocation through its own deleter
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(std::size_t n) const override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const auto device = inner.device();
    const auto bytes = static_cast<std::int64_t>(n);
    const auto now = g_current_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    auto peak = g_peak_bytes.load(std::memory_order_relaxed);
    while (now > peak && !g_peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    return {data, new CountedBlock{std::move(inner), bytes}, &delete_counted, device};
  }

 private:
  c10::Allocator* inner_;
};

std::once_flag g_install_once;
std::atomic<bool> g_installed{false};

}  // namespace

void install_counting_cpu_allocator() {
  std::call_once(g_install_once, [] {
    static CountingAllocator allocator(c10::GetCPUAllocator());
    // Priority above the default registration, so nothing later replaces it silently.
    c10::SetAllocator(c10::DeviceType::CPU, &allocator, /*priority=*/100);
    g_installed = true;
  });
}

bool counting_cpu_allocator_installed() { return g_installed; }

MemoryCounters cpu_memory() { return {g_current_bytes.load(), g_peak_bytes.load()}; }

void reset_cpu_peak_memory() { g_peak_bytes.store(g_current_bytes.load()); }

}  // namespace pipescope::exec
