// The viewer at scale, offscreen: opening a trace of about 1,000,000 events (read, model,
// widget) and repainting the whole 1600x1000 timeline at several zoom levels, with the
// difference view, critical path and arrows on for a predicted/measured pair.
//   QT_QPA_PLATFORM=offscreen build-d/bench/bench_gui   (see docs/BENCHMARKS.md)
#include <benchmark/benchmark.h>

#include <QApplication>
#include <QImage>
#include <QPainter>

#include <cstdlib>
#include <filesystem>
#include <unistd.h>

#include "pipescope/gui/timeline_model.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "pipescope/traces/trace_io.hpp"
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

const std::string& million_event_file() {
  static const std::string path = [] {
    const std::string p = (std::filesystem::temp_directory_path() / ("pipescope_bench_gui_" + std::to_string(::getpid()) + ".json")).string();
    write_trace(make_1f1b_trace(million_event_pipeline()), p);
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
BENCHMARK(BM_OpenMillionEventTrace)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);

// Repaint of the whole widget; the argument is the zoom: the visible span is the trace
// divided by 10^arg, centred in the iteration.
void BM_RepaintPair(benchmark::State& state) {
  static std::shared_ptr<TimelineModel> model = [] {
    SyntheticPipeline pp = million_event_pipeline();
    Trace predicted = make_1f1b_trace(pp);
    pp.jitter = 0.1;
    pp.slow_rank = 3;
    pp.slow_factor = 1.2;
    pp.source = "measured";
    auto m = std::make_shared<TimelineModel>();
    m->set_traces(std::move(predicted), make_1f1b_trace(pp));
    return m;
  }();
  TimelineWidget widget;
  widget.resize(1600, 1000);
  widget.set_model(model);
  widget.set_show_difference(true);
  widget.set_show_critical_path(state.range(1) != 0);
  widget.set_show_flows(state.range(1) != 0);
  const double span = model->end_us() / std::pow(10.0, static_cast<double>(state.range(0)));
  const double center = model->end_us() / 2;
  widget.zoom_to(center - span / 2, center + span / 2);
  QImage image(widget.size(), QImage::Format_ARGB32_Premultiplied);
  for (auto _ : state) {
    QPainter painter(&image);
    widget.render(&painter);
  }
  state.counters["events"] = static_cast<double>(model->trace(0).events.size() + model->trace(1).events.size());
}
BENCHMARK(BM_RepaintPair)
    ->ArgsProduct({{0, 1, 2, 3, 5, 7}, {0, 1}})
    ->ArgNames({"zoom10^", "paths+arrows"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  setenv("QT_QPA_PLATFORM", "offscreen", 0);
  QApplication app(argc, argv);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::filesystem::remove(million_event_file());
  return 0;
}
