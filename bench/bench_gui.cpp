// The viewer at scale, offscreen: opening a trace of about 1,000,000 events (read, model,
// widget), opening a predicted/measured pair of them through the main window (both files read
// at once, comparison beside the rows), and repainting the whole 1600x1000 timeline at several
// zoom levels, with the difference view, critical path and arrows on for the pair; opening a
// pair of 100,000 and of 1,000,000 ranks of one event each; and, given torch.profiler files
// (PIPESCOPE_BENCH_TORCH=FILE[:FILE...], e.g. scripts/make-large-trace.py's), repainting their
// run at every zoom.
//   QT_QPA_PLATFORM=offscreen build-d/bench/bench_gui   (see docs/BENCHMARKS.md)
#include <benchmark/benchmark.h>

#include <QApplication>
#include <QImage>
#include <QPainter>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>
#include <unistd.h>

#include "pipescope/gui/timeline_model.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "pipescope/traces/torch_profiler.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "main_window.hpp"
#include "timeline_widget.hpp"

using namespace pipescope::gui;
using namespace pipescope::traces;

namespace {

SyntheticPipeline million_event_pipeline() {
  SyntheticPipeline pp;
  pp.num_ranks = 8;
  pp.num_micro_batches = 22800;
  return pp;
}

SyntheticPipeline measured_pipeline() {
  SyntheticPipeline pp = million_event_pipeline();
  pp.jitter = 0.1;
  pp.slow_rank = 3;
  pp.slow_factor = 1.2;
  pp.source = "measured";
  return pp;
}

// The trace files written so far, removed at exit (only those a selected benchmark needed).
std::vector<std::string> written_files;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("pipescope_bench_gui_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

const std::string& million_event_file() {
  static const std::string path = [] {
    std::string p = temp_path("predicted.json");
    write_trace(make_1f1b_trace(million_event_pipeline()), p);
    written_files.push_back(p);
    return p;
  }();
  return path;
}

const std::string& million_event_measured_file() {
  static const std::string path = [] {
    std::string p = temp_path("measured.json");
    write_trace(make_1f1b_trace(measured_pipeline()), p);
    written_files.push_back(p);
    return p;
  }();
  return path;
}

void BM_OpenMillionEventTrace(benchmark::State& state) {
  const std::string& path = million_event_file();
  TimelineWidget widget;
  widget.resize(1600, 1000);
  for (auto _ : state) {
    auto model = std::make_shared<TimelineModel>();
    model->set_traces(read_trace(path));
    widget.set_model(model);
  }
  state.counters["events"] = static_cast<double>(widget.model()->trace(0).events.size());
}
BENCHMARK(BM_OpenMillionEventTrace)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Iterations(2);

// What File > Open does with two files: read both (at once), build the model with the
// comparison, show it, fill the summary table. CPU time is the process's (both threads).
void BM_OpenMillionEventPair(benchmark::State& state) {
  const QStringList paths{QString::fromStdString(million_event_file()),
                          QString::fromStdString(million_event_measured_file())};
  MainWindow window;
  window.resize(1600, 1000);
  for (auto _ : state) {
    if (auto error = window.open_files(paths)) state.SkipWithError(error->toStdString().c_str());
  }
  state.counters["events"] = static_cast<double>(window.timeline()->model()->trace(0).events.size() +
                                                 window.timeline()->model()->trace(1).events.size());
}
BENCHMARK(BM_OpenMillionEventPair)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Iterations(2);

// A pipeline as wide as it gets: `ranks` ranks of one forward each (issue 34: the viewer's
// per-rank work, its layout and its rank table, must stay linear in the ranks).
const std::string& many_rank_file(int ranks, const std::string& source) {
  static std::map<std::pair<int, std::string>, std::string> paths;
  auto [it, added] = paths.try_emplace({ranks, source});
  if (added) {
    Trace trace;
    trace.meta.format = "pipescope.trace/1";
    trace.meta.source = source;
    trace.meta.num_ranks = ranks;
    for (int r = 0; r < ranks; ++r) {
      TraceEvent e;
      e.rank = r;
      e.lane = 0;
      e.name = "F";
      e.kind = event_kind_from_name(e.name);  // as a reader would parse it
      e.ts_us = r;
      e.dur_us = source == "measured" ? 1.1 : 1.0;
      e.stage = r;
      e.micro_batch = 0;
      trace.events.push_back(e);
    }
    it->second = temp_path(std::to_string(ranks) + "_ranks_" + source + ".json");
    write_trace(trace, it->second);
    written_files.push_back(it->second);
  }
  return it->second;
}

// What ppview does with a predicted and a measured trace of `ranks` ranks: read both, build the
// model and the comparison, lay out the timeline, fill the rank table.
void BM_OpenManyRankPair(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const QStringList paths{QString::fromStdString(many_rank_file(ranks, "predicted")),
                          QString::fromStdString(many_rank_file(ranks, "measured"))};
  MainWindow window;
  window.resize(1600, 1000);
  for (auto _ : state) {
    if (auto error = window.open_files(paths)) state.SkipWithError(error->toStdString().c_str());
  }
  state.counters["ranks"] = ranks;
}
BENCHMARK(BM_OpenManyRankPair)
    ->Arg(100000)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Iterations(1);

// Repaints `widget` (showing `model`) into an image, once per iteration, at the zoom the
// benchmark's first argument gives: the visible span is the trace divided by 10^arg, centred in
// the iteration.
void repaint_at_zoom(benchmark::State& state, TimelineWidget& widget, const TimelineModel& model) {
  const double span = model.end_us() / std::pow(10.0, static_cast<double>(state.range(0)));
  const double center = model.end_us() / 2;
  widget.zoom_to(center - span / 2, center + span / 2);
  QImage image(widget.size(), QImage::Format_ARGB32_Premultiplied);
  for (auto _ : state) {
    QPainter painter(&image);
    widget.render(&painter);
  }
}

// Repaint of the whole widget; the argument is the zoom (repaint_at_zoom).
void BM_RepaintPair(benchmark::State& state) {
  static std::shared_ptr<TimelineModel> model = [] {
    auto m = std::make_shared<TimelineModel>();
    m->set_traces(make_1f1b_trace(million_event_pipeline()), make_1f1b_trace(measured_pipeline()));
    return m;
  }();
  TimelineWidget widget;
  widget.resize(1600, 1000);
  widget.set_model(model);
  widget.set_show_difference(true);
  widget.set_show_critical_path(state.range(1) != 0);
  widget.set_show_flows(state.range(1) != 0);
  repaint_at_zoom(state, widget, *model);
  state.counters["events"] = static_cast<double>(model->trace(0).events.size() + model->trace(1).events.size());
}
BENCHMARK(BM_RepaintPair)
    ->ArgsProduct({{0, 1, 2, 3, 5, 7}, {0, 1}})
    ->ArgNames({"zoom10^", "paths+arrows"})
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

// The torch.profiler files PIPESCOPE_BENCH_TORCH names (colon-separated), or none.
std::vector<std::string> bench_torch_files() {
  std::vector<std::string> files;
  const char* list = std::getenv("PIPESCOPE_BENCH_TORCH");
  for (std::string rest = list ? list : ""; !rest.empty();) {
    const auto colon = rest.find(':');
    files.push_back(rest.substr(0, colon));
    rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
  }
  return files;
}

// Repaint of a torch.profiler run (operators and GPU kernels kept, as ppview opens it); the
// argument is the zoom, as above.
void BM_RepaintTorchRun(benchmark::State& state) {
  const std::vector<std::string> files = bench_torch_files();
  if (files.empty()) {
    state.SkipWithError("set PIPESCOPE_BENCH_TORCH to torch.profiler trace files (scripts/make-large-trace.py)");
    return;
  }
  static std::shared_ptr<TimelineModel> model = [&files] {
    auto m = std::make_shared<TimelineModel>();
    m->set_traces(read_torch_profiler_run(files).trace);
    return m;
  }();
  TimelineWidget widget;
  widget.resize(1600, 1000);
  widget.set_model(model);
  repaint_at_zoom(state, widget, *model);
  state.counters["events"] = static_cast<double>(model->trace(0).events.size());
}
BENCHMARK(BM_RepaintTorchRun)
    ->ArgsProduct({{0, 1, 2, 3, 5, 7}})
    ->ArgNames({"zoom10^"})
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  setenv("QT_QPA_PLATFORM", "offscreen", 0);
  // Opening through the main window records recent files: keep them out of the user's settings.
  const std::string settings_dir = temp_path("settings");
  setenv("XDG_CONFIG_HOME", settings_dir.c_str(), 1);
  QApplication app(argc, argv);
  QApplication::setOrganizationName("pipescope-bench");
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (const auto& path : written_files) std::filesystem::remove(path);
  std::filesystem::remove_all(settings_dir);
  return 0;
}
