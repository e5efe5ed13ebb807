// Simulator speed. Goals: >= 20 million simulated instructions per second on one core for
// interleaved-1f1b with 64 ranks, 4 chunks and 1024 micro-batches (the schedule is generated
// and compiled once, outside the timed loop; the whole process, generation and lowering
// included, is timed with `ppsim simulate`, docs/BENCHMARKS.md), and 10,000 planner
// configurations in under 5 s (2 k/s). BM_CompileInterleaved* time the two ways from a
// schedule name to the compiled form.
#include <benchmark/benchmark.h>

#include "pipescope/core/registry.hpp"
#include "pipescope/sim/planner.hpp"
#include "pipescope/sim/simulator.hpp"

namespace {

using namespace pipescope;

ScheduleParams large_interleaved_params() {
  ScheduleParams params;
  params.num_ranks = 64;
  params.chunks = 4;
  params.chunks_given = true;
  params.num_micro_batches = 1024;
  return params;
}

const sim::CompiledSchedule& large_interleaved() {
  static const sim::CompiledSchedule compiled =
      sim::compile(make_schedule("interleaved-1f1b", large_interleaved_params()));
  return compiled;
}

// Times `compile_interleaved`, a way from the schedule's name to its compiled form.
template <class CompileInterleaved>
void run_compile(benchmark::State& state, CompileInterleaved compile_interleaved) {
  std::size_t instructions = 0;
  for (auto _ : state) {
    const sim::CompiledSchedule compiled = compile_interleaved();
    instructions = compiled.instructions.size();
    benchmark::DoNotOptimize(compiled);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * instructions));
}

// What `ppsim simulate` did before the straight path: build the lowered Schedule, compile it.
void BM_CompileInterleavedLowered(benchmark::State& state) {
  run_compile(state, [] { return sim::compile(make_schedule("interleaved-1f1b", large_interleaved_params())); });
}
BENCHMARK(BM_CompileInterleavedLowered)->Unit(benchmark::kMillisecond);

// What it does now: the compute order compiled as it is lowered, one rank at a time.
void BM_CompileInterleavedStraight(benchmark::State& state) {
  run_compile(state, [] {
    return sim::compile(std::move(*make_compute_order("interleaved-1f1b", large_interleaved_params())));
  });
}
BENCHMARK(BM_CompileInterleavedStraight)->Unit(benchmark::kMillisecond);

void run_simulation(benchmark::State& state, const sim::CostModel& costs, const sim::Topology& topology, bool trace) {
  const sim::CompiledSchedule& schedule = large_interleaved();
  sim::SimOptions options;
  options.build_trace = trace;
  for (auto _ : state) {
    auto result = sim::simulate(schedule, costs, topology, options);
    benchmark::DoNotOptimize(result);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(schedule.instructions.size()));
  state.counters["instructions"] = static_cast<double>(schedule.instructions.size());
}

// The base model: fixed transfer delay, no trace.
void BM_SimulateInterleaved(benchmark::State& state) {
  run_simulation(state, sim::CostModel::uniform(1.0, 1.0, 1.0, 0.01, 2, -1, -1), sim::Topology{}, false);
}
BENCHMARK(BM_SimulateInterleaved)->Unit(benchmark::kMillisecond);

// Links shared by concurrent transfers (every send waits for its time in the event queue).
void BM_SimulateInterleavedLinks(benchmark::State& state) {
  sim::CostModel costs = sim::CostModel::uniform(1e-3, 1e-3, 1e-3, 0, 2, -1, -1);
  costs.transfer_model = sim::TransferModel::Links;
  costs.stages[0].activation_bytes = 16 << 20;
  sim::Topology topology;
  topology.pipeline_rank_stride = 2;
  run_simulation(state, costs, topology, false);
}
BENCHMARK(BM_SimulateInterleavedLinks)->Unit(benchmark::kMillisecond);

// A calibrated profile's receives both ways (recv_contended_s other than recv_s): the engine
// follows every rank's undelivered messages per peer, and a rank ahead of its peer in the
// event loop waits for the loop's clock at such a receive.
void BM_SimulateInterleavedBothWays(benchmark::State& state) {
  sim::CostModel costs = sim::CostModel::uniform(1.0, 1.0, 1.0, 0.01, 2, -1, -1);
  sim::StageRuntimeEffects effects;
  effects.recv_s = 0.001;
  effects.recv_contended_s = 0.002;
  costs.runtime.stages = {effects};
  run_simulation(state, costs, sim::Topology{}, false);
}
BENCHMARK(BM_SimulateInterleavedBothWays)->Unit(benchmark::kMillisecond);

// The same with the predicted trace built (events, memory counters, flows).
void BM_SimulateInterleavedWithTrace(benchmark::State& state) {
  run_simulation(state, sim::CostModel::uniform(1.0, 1.0, 1.0, 0.01, 2, -1, -1), sim::Topology{}, true);
}
BENCHMARK(BM_SimulateInterleavedWithTrace)->Unit(benchmark::kMillisecond);

// Times sim::plan on `request` and reports the configurations it considered per second.
void run_planner(benchmark::State& state, const sim::PlanRequest& request) {
  std::int64_t configurations = 0;
  for (auto _ : state) {
    const sim::PlanResult result = sim::plan(request);
    configurations += result.considered;
    benchmark::DoNotOptimize(result);
  }
  state.counters["configurations_per_s"] =
      benchmark::Counter(static_cast<double>(configurations), benchmark::Counter::kIsRate);
}

// The planner on its default example: gpt-7b on 64 H100, 8 per node, global batch 512, in 3D
// (tensor-parallel 1, 2, 4, 8 x pipeline x data-parallel, recomputation none / selective / full,
// sequence parallelism on and off where T > 1: 2,856 configurations); argument 0 simulates every
// configuration, 10 keeps the best 10 as `ppsim plan` does.
void BM_PlanDefault(benchmark::State& state) {
  sim::PlanRequest request;
  request.model = sim::resolve_model("gpt-7b");
  request.device = sim::device_preset("h100");
  request.topology.intra_node = request.device.nvlink;
  request.keep_best = static_cast<std::size_t>(state.range(0));
  run_planner(state, request);
}
BENCHMARK(BM_PlanDefault)->Arg(0)->Arg(10)->Unit(benchmark::kMillisecond);

// A wide search: gpt-1.3b on 256 GPUs, every micro-batch size up to 32, chunks 2/3/4/6/8
// (many configurations are refused or dropped for memory before any simulation).
void BM_PlanWide(benchmark::State& state) {
  sim::PlanRequest request;
  request.model = sim::resolve_model("gpt-1.3b");
  request.device = sim::device_preset("h100");
  request.topology.intra_node = request.device.nvlink;
  request.num_gpus = 256;
  request.global_batch = 1024;
  request.micro_batch_sizes = {1, 2, 4, 8, 16, 32};
  request.interleave_chunks = {2, 3, 4, 6, 8};
  request.schedules = {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zbv", "dualpipev"};
  request.keep_best = static_cast<std::size_t>(state.range(0));
  run_planner(state, request);
}
BENCHMARK(BM_PlanWide)->Arg(0)->Arg(10)->Unit(benchmark::kMillisecond);

// The question: Llama-3-405B on 16,384 H100 with a global batch of 2048, as `ppsim plan
// --model llama-3-405b --gpus 16384 --global-batch 2048` asks it (tensor 1-8 x context 1-8 x
// pipeline x data parallelism, micro-batches 1-8, the six default schedules, three
// recomputations, sequence parallelism on and off; top 10). Goal: <= 10 s.
void BM_PlanLlama405bOn16k(benchmark::State& state) {
  sim::PlanRequest request;
  request.model = sim::resolve_model("llama-3-405b");
  request.device = sim::device_preset("h100");
  request.topology.intra_node = request.device.nvlink;
  request.num_gpus = 16384;
  request.global_batch = 2048;
  request.context_parallel_sizes = {1, 2, 4, 8};
  request.keep_best = 10;
  run_planner(state, request);
}
BENCHMARK(BM_PlanLlama405bOn16k)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
