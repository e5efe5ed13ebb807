// How large a schedule this machine can hold. Sizes that cannot fit are refused before
// anything is allocated, with the options that asked for them and the estimate, instead of
// growing until std::bad_alloc (SPEC.md section 1, limits).
#pragma once

#include <cstdint>
#include <climits>
#include <optional>
#include <string>
#include <string_view>

namespace pipescope {

// Memory one instruction costs from generation through validation, lowering, compilation and
// a simulation without a trace, or written out as a schedule file. Measured peak RSS of
// `ppsim schedule 1f1b --stages 8 --micro-batches 100000 --format json -o F` (4.6M
// instructions): 847 MB, 184 B an instruction; `ppsim simulate` of the same: 76 B.
inline constexpr std::int64_t kBytesPerInstruction = 200;
// A predicted trace on top (events with their names, then the JSON text): `ppsim simulate
// ... --trace F` of the same schedule peaks at 3.07 GB, 667 B an instruction.
inline constexpr std::int64_t kTraceBytesPerInstruction = 700;
// Per (stage, micro-batch) pair the lowering passes and the validator keep tables of a few
// bytes each, sized from the declared counts (a schedule file may declare more than it holds).
inline constexpr std::int64_t kBytesPerStageMicroBatch = 32;
// A lowered schedule runs F, B (or I and W), and a send and a receive of each direction per
// stage and micro-batch; 1F1B of 8 stages measures 5.75.
inline constexpr std::int64_t kInstructionsPerStageMicroBatch = 7;
// Lowered schedules are lock-step grids: every rank has a slot (an empty step where it idles)
// in every step of the longest program, about 2 (V m + S) of them. The grid, its validator
// index and the simulator's flat form cost this much a slot: `ppsim validate` of gpipe on
// 10,000 ranks (2e8 slots) peaks at 16.1 GB, 80 B a slot.
inline constexpr std::int64_t kBytesPerStepSlot = 80;
// The compiled form indexes instructions and transfers with 32-bit integers.
inline constexpr std::int64_t kMaxInstructions = INT32_MAX;

// Half the memory this process may use: the smaller of the machine's physical memory and its
// cgroup's limit. Half, because the estimates are rough and the machine runs other things.
// PIPESCOPE_MEMORY_BUDGET (bytes) overrides it, for tests and for machines that know better.
std::int64_t memory_budget_bytes();

// a * b, or INT64_MAX when that overflows (sizes from the command line can be anything).
std::int64_t saturating_product(std::int64_t a, std::int64_t b);

// What a schedule holds, for the memory estimate.
struct ScheduleSize {
  std::int64_t instructions = 0;
  std::int64_t pairs = 0;       // (stage, micro-batch) pairs the tables are sized by
  std::int64_t step_slots = 0;  // ranks x steps of the lock-step grid
};

// A schedule of these sizes, at most (saturating): what a generator will make of them, or a
// file lowered from them.
ScheduleSize estimated_size(std::int64_t num_ranks, std::int64_t num_stages, std::int64_t num_micro_batches);

// Why `size` at `bytes_per_instruction` does not fit, or nothing when it does:
// "about N instructions and S step slots (~X GB), more than ...".
std::optional<std::string> size_problem(const ScheduleSize& size, std::int64_t bytes_per_instruction = kBytesPerInstruction);

// Throws ScheduleError "WHAT: <size_problem>" when the size does not fit.
void check_schedule_size(std::string_view what, const ScheduleSize& size,
                         std::int64_t bytes_per_instruction = kBytesPerInstruction);

}  // namespace pipescope
