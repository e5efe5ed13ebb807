#include "pipescope/core/size_limits.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"

namespace pipescope {
namespace {

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();


std::int64_t saturating_add(std::int64_t a, std::int64_t b) { return a > kInt64Max - b ? kInt64Max : a + b; }

std::int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 8LL << 30;  // unknown: assume a small machine
  return saturating_product(pages, page_size);
}

// cgroup v2's memory.max ("max" when unlimited); nothing when there is none.
std::int64_t cgroup_limit_bytes() {
  std::ifstream in("/sys/fs/cgroup/memory.max");
  std::string text;
  if (!(in >> text) || text == "max") return kInt64Max;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  return end && *end == '\0' && value > 0 ? value : kInt64Max;
}

std::string gigabytes(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  return b >= 1e9 ? fmt::format("{:.1f} GB", b / 1e9) : fmt::format("{:.1f} MB", b / 1e6);
}

std::optional<std::int64_t> budget_from_environment() {
  const char* text = std::getenv("PIPESCOPE_MEMORY_BUDGET");
  if (!text) return std::nullopt;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (!end || *end != '\0' || value <= 0) return std::nullopt;
  return value;
}

}  // namespace

std::int64_t saturating_product(std::int64_t a, std::int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  return a > kInt64Max / b ? kInt64Max : a * b;
}

std::int64_t memory_budget_bytes() {
  if (auto budget = budget_from_environment()) return *budget;
  return std::min(physical_memory_bytes(), cgroup_limit_bytes()) / 2;
}

ScheduleSize estimated_size(std::int64_t num_ranks, std::int64_t num_stages, std::int64_t num_micro_batches) {
  ScheduleSize size;
  size.pairs = saturating_product(num_stages, num_micro_batches);
  // The end-of-batch collectives: a few per rank.
  size.instructions = saturating_add(saturating_product(size.pairs, kInstructionsPerStageMicroBatch),
                                     saturating_product(num_ranks, 4));
  const std::int64_t stages_per_rank = num_ranks > 0 ? (num_stages + num_ranks - 1) / num_ranks : 0;
  const std::int64_t steps = saturating_product(2, saturating_add(saturating_product(stages_per_rank, num_micro_batches), num_stages));
  size.step_slots = saturating_product(num_ranks, steps);
  return size;
}

std::optional<std::string> size_problem(const ScheduleSize& size, std::int64_t bytes_per_instruction) {
  const std::int64_t bytes = saturating_add(saturating_add(saturating_product(size.instructions, bytes_per_instruction),
                                                           saturating_product(size.pairs, kBytesPerStageMicroBatch)),
                                            saturating_product(size.step_slots, kBytesPerStepSlot));
  const std::int64_t budget = memory_budget_bytes();
  const std::string text = fmt::format("about {} instructions and {} step slots (~{})", size.instructions,
                                       size.step_slots, gigabytes(bytes));
  if (size.instructions > kMaxInstructions)
    return fmt::format("{}, more than the {} instructions a schedule may hold", text, kMaxInstructions);
  if (bytes > budget)
    return fmt::format("{}, more than this machine's limit of {} ({})", text, gigabytes(budget),
                       budget_from_environment() ? "PIPESCOPE_MEMORY_BUDGET" : "half of its memory");
  return std::nullopt;
}

void check_schedule_size(std::string_view what, const ScheduleSize& size, std::int64_t bytes_per_instruction) {
  if (auto problem = size_problem(size, bytes_per_instruction)) throw ScheduleError(std::string(what) + ": " + *problem);
}

}  // namespace pipescope
