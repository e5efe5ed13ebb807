// Trace files and comparison at scale: a synthetic 1F1B trace of 8 ranks and 22,800
// micro-batches (about 1,000,000 events, 250 MB of JSON) is written, read (plain and gzip)
// and compared with a jittered twin.
//   build-d/bench/bench_traces --benchmark_min_time=1x   (see docs/BENCHMARKS.md)
#include <benchmark/benchmark.h>

#include <filesystem>
#include <map>
#include <unistd.h>

#include "pipescope/traces/compare.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "pipescope/traces/trace_io.hpp"

using namespace pipescope::traces;

namespace {

SyntheticPipeline million_event_pipeline() {
  SyntheticPipeline pp;
  pp.num_ranks = 8;
  pp.num_micro_batches = 22800;
  return pp;
}

const Trace& million_event_trace() {
  static const Trace trace = make_1f1b_trace(million_event_pipeline());
  return trace;
}

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("pipescope_bench_" + std::to_string(::getpid()) + "_" + name)).string();
}

const std::string& written(const std::string& name) {
  static std::map<std::string, std::string> paths;
  auto it = paths.find(name);
  if (it == paths.end()) {
    const std::string path = temp_file(name);
    write_trace(million_event_trace(), path);
    it = paths.emplace(name, path).first;
  }
  return it->second;
}

void BM_WriteTrace(benchmark::State& state) {
  const Trace& trace = million_event_trace();
  const std::string path = temp_file("write.json");
  for (auto _ : state) write_trace(trace, path);
  state.counters["events"] = static_cast<double>(trace.events.size());
  state.counters["MB"] = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
  std::filesystem::remove(path);
}
BENCHMARK(BM_WriteTrace)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ReadTrace(benchmark::State& state) {
  const std::string& path = written("read.json");
  std::size_t events = 0;
  for (auto _ : state) events = read_trace(path).events.size();
  state.counters["events"] = static_cast<double>(events);
}
BENCHMARK(BM_ReadTrace)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ReadTraceGzip(benchmark::State& state) {
  const std::string& path = written("read.json.gz");
  std::size_t events = 0;
  for (auto _ : state) events = read_trace(path).events.size();
  state.counters["events"] = static_cast<double>(events);
}
BENCHMARK(BM_ReadTraceGzip)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_CompareTraces(benchmark::State& state) {
  SyntheticPipeline pp = million_event_pipeline();
  pp.jitter = 0.1;
  pp.source = "measured";
  const Trace measured = make_1f1b_trace(pp);
  for (auto _ : state) benchmark::DoNotOptimize(compare_traces(million_event_trace(), measured).op_duration_mape);
  state.counters["events"] = static_cast<double>(measured.events.size());
}
BENCHMARK(BM_CompareTraces)->Unit(benchmark::kMillisecond)->UseRealTime();

struct RemoveFiles {
  ~RemoveFiles() {
    for (const char* name : {"read.json", "read.json.gz"}) std::filesystem::remove(temp_file(name));
  }
} remove_files;

}  // namespace

BENCHMARK_MAIN();
