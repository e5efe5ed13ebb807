// Executor benchmarks.
// BM_RuntimeStep / BM_DirectStep: one training step of a deliberately tiny mlp (so the work per
// instruction is small and the runtime's own cost shows), run through PipelineRuntime on one
// rank (data-parallel schedule, fake transport) and by hand with the same LibTorch calls; the
// difference divided by the instructions per step is the runtime's per-instruction overhead.
// BM_PipelineSpeedup: pprun on 2 ranks (1f1b) against one process (data-parallel) for the same
// model and batch (the mlp of bench/pipelining/run.sh: 8 blocks of 1024, micro-batches of 32),
// measured from --metrics (median iteration time after two warm-up steps), with the
// closed-form ideal p*m/(m+p-1) beside it.
// BM_LinearGemm: the three matrix products of one of that mlp's Linear layers (32 x 1024 by
// 1024 x 1024) on one thread, as LibTorch calls BLAS for them: the forward x W^T, the input
// gradient g W and the weight gradient g^T x. bench/pipelining/gemm_shapes.py times the same
// products in PyTorch, which separates the BLAS libraries from everything else.
// BM_StolenTimeReading: what pprun adds to every step to record the host's share (steal) of the
// rank's cores: StolenTimeMeter's start() and elapsed(), each a read of /proc/stat.
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "pipescope/core/registry.hpp"
#include "fused_adamw.hpp"
#include "pipescope/exec/runtime.hpp"
#include "pprun/stolen_time.hpp"

using namespace pipescope;
using namespace pipescope::exec;

namespace {

constexpr int kMicroBatches = 16;

ModelConfig tiny_mlp() {
  ModelConfig c;
  c.name = "mlp";
  c.layers = 1;
  c.hidden = 8;
  c.vocab = 4;
  c.micro_batch_size = 2;
  return c;
}

void BM_RuntimeStep(benchmark::State& state) {
  at::set_num_threads(1);
  const ModelSpec model = make_model_spec(tiny_mlp());
  ScheduleParams params;
  params.num_ranks = 1;
  params.num_micro_batches = kMicroBatches;
  const Schedule schedule = make_schedule("data-parallel", params);
  const Partition partition{{0, static_cast<int>(model.layers.size())}, {}, {}};
  auto transport = make_fake_transport(make_fake_network(1), 0);
  PipelineRuntime runtime(model, schedule, partition, *transport, GridPosition{}, RuntimeOptions{});
  int step = 0;
  for (auto _ : state) runtime.run_step(step, static_cast<std::int64_t>(step) * kMicroBatches), ++step;
  const double instructions = static_cast<double>(schedule.instruction_count());
  state.counters["instructions_per_step"] = instructions;
  // Divide the step time by this to get the time per instruction; compare with BM_DirectStep.
}
BENCHMARK(BM_RuntimeStep)->Unit(benchmark::kMicrosecond);

void BM_DirectStep(benchmark::State& state) {
  at::set_num_threads(1);
  const ModelSpec model = make_model_spec(tiny_mlp());
  StageModule module(model, 0, static_cast<int>(model.layers.size()));
  FusedAdamW optimizer(module.parameter_tensors(), torch::optim::AdamWOptions(1e-3));  // the runtime's default
  const auto params = module.parameter_tensors();
  std::int64_t sample = 0;
  for (auto _ : state) {
    std::vector<at::Tensor> sums;
    for (int m = 0; m < kMicroBatches; ++m) {
      MicroBatch batch = make_micro_batch(model.config, sample++);
      auto loss = model.loss(module.forward(batch.inputs), batch.labels);
      auto grads = torch::autograd::grad({loss}, params, {at::full({}, 1.0 / kMicroBatches)});
      if (sums.empty())
        sums = grads;
      else
        for (std::size_t i = 0; i < grads.size(); ++i) sums[i].add_(grads[i]);
    }
    for (std::size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = sums[i];
    optimizer.step();
  }
}
BENCHMARK(BM_DirectStep)->Unit(benchmark::kMicrosecond);

double median_iteration_time_s(const std::string& args, const std::string& name) {
  const auto metrics = std::filesystem::temp_directory_path() / ("bench_exec_" + name + ".jsonl");
  const std::string command = std::string(PPRUN_PATH) + " " + args + " --quiet --metrics " + metrics.string();
  const int status = std::system(command.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error("pprun failed: " + command);
  std::ifstream in(metrics);
  std::vector<double> times;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.at("step").get<int>() < 2) continue;  // warm-up: first allocations, first transfers
    times.push_back(j.at("iteration_time_s").get<double>());
  }
  if (times.empty()) throw std::runtime_error("pprun wrote no step after the warm-up: " + command);
  std::sort(times.begin(), times.end());
  const std::size_t mid = times.size() / 2;
  return times.size() % 2 ? times[mid] : (times[mid - 1] + times[mid]) / 2;
}

void BM_PipelineSpeedup(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  const std::string model =
      "--model mlp --layers 8 --hidden 1024 --vocab 1024 --micro-batch-size 32 --steps 9 "
      "--threads-per-rank 1 --micro-batches " +
      std::to_string(m);
  double one = 0, two = 0;
  for (auto _ : state) {
    one = median_iteration_time_s("--nproc-per-node 1 --schedule data-parallel " + model, "one");
    two = median_iteration_time_s("--nproc-per-node 2 --schedule 1f1b " + model, "two");
    state.SetIterationTime(two);
  }
  state.counters["one_process_s"] = one;
  state.counters["two_ranks_s"] = two;
  state.counters["speedup"] = one / two;
  state.counters["ideal_speedup"] = 2.0 * m / (m + 2 - 1);
}
BENCHMARK(BM_PipelineSpeedup)->Arg(4)->Arg(8)->Arg(16)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

enum class LinearProduct { Forward, InputGrad, WeightGrad };

void BM_LinearGemm(benchmark::State& state) {
  at::set_num_threads(1);
  const at::Tensor x = at::randn({32, 1024}), w = at::randn({1024, 1024}), g = at::randn({32, 1024});
  const auto product = static_cast<LinearProduct>(state.range(0));
  for (auto _ : state) {
    at::Tensor y = product == LinearProduct::Forward     ? at::mm(x, w.t())
                   : product == LinearProduct::InputGrad ? at::mm(g, w)
                                                         : at::mm(g.t(), x);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetLabel(product == LinearProduct::Forward     ? "x W^T (forward)"
                 : product == LinearProduct::InputGrad ? "g W (input gradient)"
                                                       : "g^T x (weight gradient)");
}
BENCHMARK(BM_LinearGemm)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

void BM_StolenTimeReading(benchmark::State& state) {
  StolenTimeMeter meter;
  for (auto _ : state) {
    meter.start();
    benchmark::DoNotOptimize(meter.elapsed());
  }
}
BENCHMARK(BM_StolenTimeReading)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
