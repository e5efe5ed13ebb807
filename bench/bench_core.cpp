// Schedule core speed: generate (generator + lowering passes) and validate interleaved-1f1b
// with 64 ranks, 4 chunks and 1024 micro-batches, the largest configuration people plan.
#include <benchmark/benchmark.h>

#include "pipescope/core/registry.hpp"
#include "pipescope/core/validator.hpp"

namespace {

pipescope::ScheduleParams large_interleaved() {
  pipescope::ScheduleParams params;
  params.num_ranks = 64;
  params.chunks = 4;
  params.chunks_given = true;
  params.num_micro_batches = 1024;
  return params;
}

void BM_GenerateInterleaved(benchmark::State& state) {
  const auto params = large_interleaved();
  std::size_t instructions = 0;
  for (auto _ : state) {
    auto schedule = pipescope::make_schedule("interleaved-1f1b", params);
    instructions = schedule.instruction_count();
    benchmark::DoNotOptimize(schedule);
  }
  state.counters["instructions"] = static_cast<double>(instructions);
}
BENCHMARK(BM_GenerateInterleaved)->Unit(benchmark::kMillisecond);

void BM_ValidateInterleaved(benchmark::State& state) {
  const auto schedule = pipescope::make_schedule("interleaved-1f1b", large_interleaved());
  for (auto _ : state) benchmark::DoNotOptimize(pipescope::find_problem(schedule));
  state.counters["instructions"] = static_cast<double>(schedule.instruction_count());
}
BENCHMARK(BM_ValidateInterleaved)->Unit(benchmark::kMillisecond);

void BM_GenerateAndValidateInterleaved(benchmark::State& state) {
  const auto params = large_interleaved();
  for (auto _ : state) {
    auto schedule = pipescope::make_schedule("interleaved-1f1b", params);
    benchmark::DoNotOptimize(pipescope::find_problem(schedule));
  }
}
BENCHMARK(BM_GenerateAndValidateInterleaved)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
