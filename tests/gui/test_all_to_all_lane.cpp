// The all-to-all of mixture-of-experts layers on a lane of its own (lane 4, "all-to-all").
// - A synthetic 1F1B pair (4 ranks, 8 micro-batches: rank 0's first forward at [0, 100] us) with
//   one ALL_TO_ALL_DISPATCH_F of micro-batch 0 on rank 0 at [20, 30] us, 4096 bytes sent: the
//   measured one lists its group's ranks 0 and 4, 2048 bytes received and layer blocks.1; the
//   predicted one gives its group's size, 2. Opened in a real (offscreen) window, rank 0 shows
//   the all-to-all lane for both series (the comparison keeps lanes paired); the same pair
//   without the event (a dense run) shows none. A click at 25 us in the lane selects the event;
//   the details pane and the tooltip say "with ranks 0, 4 (group of 2), sent 4.00 KiB,
//   received 2.00 KiB, layer blocks.1", and the predicted lane is painted in the dispatch-F pink.
// - ppsim's DualPipeV prediction of Mixtral 8x7B (4 ranks x 2 chunks, EP 8 over nodes of 4, 16
//   micro-batches), through the viewer's model: on some rank an all-to-all block overlaps a
//   compute block (F or B) of another micro-batch.
// - An older trace with the all-to-all on the collectives lane (tid 3) still reads: the event
//   stays on lane 3 with its own kind and colour, and no lane 4 appears.
#include <catch2/catch.hpp>

#include <QApplication>
#include <QLabel>
#include <QMouseEvent>

#include <filesystem>
#include <string>

#include "main_window.hpp"
#include "pipescope/core/generators.hpp"
#include "pipescope/gui/all_to_all_detail.hpp"
#include "pipescope/gui/kinds.hpp"
#include "pipescope/gui/timeline_model.hpp"
#include "pipescope/sim/model.hpp"
#include "pipescope/sim/simulator.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "test_application.hpp"
#include "timeline_widget.hpp"

using namespace pipescope;
using namespace pipescope::gui;
namespace fs = std::filesystem;

namespace {

constexpr int kAllToAllLane = static_cast<int>(traces::Lane::AllToAll);

// A synthetic 1F1B trace of `source`, with rank 0's dispatch of micro-batch 0 when `moe`.
traces::Trace a2a_pipeline(const std::string& source, bool moe) {
  traces::SyntheticPipeline pp;
  pp.source = source;
  traces::Trace t = traces::make_1f1b_trace(pp);
  if (!moe) return t;
  traces::TraceEvent e;
  e.rank = 0;
  e.lane = kAllToAllLane;
  e.kind = traces::EventKind::AllToAllDispatchForward;
  e.name = "ALL_TO_ALL_DISPATCH_F";
  e.category = "collective";
  e.stage = 0;
  e.micro_batch = 0;
  e.ts_us = 20;
  e.dur_us = 10;
  e.bytes = 4096;
  t.events.push_back(e);
  const std::string args = source == "measured" ? R"({"layer": "blocks.1", "peers": [0, 4], "bytes_received": 2048})"
                                                : R"({"group_size": 2})";
  t.args.push_back({t.events.size() - 1, args});
  return t;
}

std::string written(const traces::Trace& t, const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("pipescope_test_a2a_lane_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string path = (dir / name).string();
  traces::write_trace(t, path);
  return path;
}

// A window showing the predicted and measured pair, with or without the all-to-all.
struct PairWindow {
  struct ApplicationFirst {
    ApplicationFirst() { testing::app(); }
  } application_first;
  MainWindow window;
  explicit PairWindow(bool moe) {
    window.resize(1400, 1200);
    const std::string tag = moe ? "moe" : "dense";
    const QString predicted = QString::fromStdString(written(a2a_pipeline("predicted", moe), tag + "-predicted.json"));
    const QString measured = QString::fromStdString(written(a2a_pipeline("measured", moe), tag + "-measured.json"));
    REQUIRE_FALSE(window.open_files({predicted, measured}));
    window.show();
    QApplication::processEvents();
  }
  TimelineWidget& timeline() { return *window.timeline(); }
};

void click(QWidget& widget, QPoint at) {
  QMouseEvent press(QEvent::MouseButtonPress, at, widget.mapToGlobal(at), Qt::LeftButton, Qt::LeftButton,
                    Qt::NoModifier);
  QApplication::sendEvent(&widget, &press);
  QMouseEvent release(QEvent::MouseButtonRelease, at, widget.mapToGlobal(at), Qt::LeftButton, Qt::NoButton,
                      Qt::NoModifier);
  QApplication::sendEvent(&widget, &release);
}

bool image_has(const QImage& image, const QRect& area, std::uint32_t rgb) {
  const QRect clipped = area.intersected(image.rect());
  for (int y = clipped.top(); y <= clipped.bottom(); ++y)
    for (int x = clipped.left(); x <= clipped.right(); ++x)
      if ((image.pixel(x, y) & 0xffffff) == rgb) return true;
  return false;
}

// ppsim's DualPipeV prediction of Mixtral 8x7B over EP 8 (as tests/sim/test_moe_overlap.cpp).
traces::Trace dualpipev_moe_prediction() {
  sim::ParallelConfig parallel;
  parallel.pipeline = 4;
  parallel.chunks = 2;
  parallel.data_parallel = 8;
  parallel.expert_parallel = 8;
  sim::Topology nodes;
  nodes.gpus_per_node = 4;
  ScheduleParams params;
  params.num_ranks = 4;
  params.num_micro_batches = 16;
  params.chunks = 2;
  const sim::CostModel costs =
      sim::derive_costs(sim::resolve_model("mixtral-8x7b"), sim::device_preset("h100"), nodes, parallel);
  return sim::simulate(sim::compile(dualpipev_order(params)), costs, sim::with_parallel_layout(nodes, parallel)).trace;
}

}  // namespace

TEST_CASE("the all-to-all lane is shown for a MoE trace and not for a dense one", "[a2a_lane][widgets]") {
  PairWindow moe(true);
  const TimelineModel& model = *moe.timeline().model();
  REQUIRE(model.row(0, 0, kAllToAllLane) != nullptr);
  REQUIRE(model.row(0, 1, kAllToAllLane) != nullptr);  // predicted and measured lanes stay paired
  REQUIRE(model.row(1, 0, kAllToAllLane) == nullptr);  // only the ranks that have such events
  CHECK(model.lane_name(0, kAllToAllLane) == "all-to-all");
  REQUIRE_FALSE(moe.timeline().lane_rect(0, 0, kAllToAllLane).isEmpty());
  REQUIRE_FALSE(moe.timeline().lane_rect(0, 1, kAllToAllLane).isEmpty());
  REQUIRE(moe.timeline().lane_rect(1, 0, kAllToAllLane).isEmpty());

  PairWindow dense(false);
  for (int rank = 0; rank < dense.timeline().model()->rank_count(); ++rank) {
    REQUIRE(dense.timeline().model()->row(rank, 0, kAllToAllLane) == nullptr);
    REQUIRE(dense.timeline().lane_rect(rank, 0, kAllToAllLane).isEmpty());
    REQUIRE(dense.timeline().lane_rect(rank, 1, kAllToAllLane).isEmpty());
  }
}

TEST_CASE("an all-to-all block is hit-tested and its details give bytes and peers", "[a2a_lane][widgets]") {
  PairWindow w(true);
  TimelineWidget& t = w.timeline();
  t.zoom_to(0, 200);
  QApplication::processEvents();
  const int x = t.time_area_left() + static_cast<int>(t.view().time_to_x(25));
  const QRect predicted_lane = t.lane_rect(0, 0, kAllToAllLane);
  REQUIRE(image_has(t.grab().toImage(), QRect(x - 2, predicted_lane.top(), 5, predicted_lane.height()),
                    kind_rgb(Kind::AllToAllDispatchForward)));

  click(t, QPoint(x, t.lane_rect(0, 1, kAllToAllLane).center().y()));
  const auto selected = t.selected_event();
  REQUIRE(selected.has_value());
  REQUIRE(selected->first == 1);
  const traces::TraceEvent& e = t.model()->trace(1).events[selected->second];
  REQUIRE(e.name == "ALL_TO_ALL_DISPATCH_F");
  const QString details = w.window.details()->text();
  INFO(details.toStdString());
  CHECK(details.contains("all-to-all dispatch F"));
  CHECK(details.contains("all-to-all lane"));
  CHECK(details.contains("with ranks 0, 4 (group of 2), sent 4.00 KiB, received 2.00 KiB, layer blocks.1"));
  const QString tooltip = t.tooltip_text(selected->first, selected->second);
  INFO(tooltip.toStdString());
  CHECK(tooltip.contains("with ranks 0, 4 (group of 2), sent 4.00 KiB"));

  // The predicted one gives its group's size in place of the ranks.
  const auto hit = t.event_at(QPoint(x, predicted_lane.center().y()));
  REQUIRE(hit.has_value());
  REQUIRE(hit->first == 0);
  const auto detail = all_to_all_detail(t.model()->trace(0), hit->second);
  REQUIRE(detail.has_value());
  CHECK(all_to_all_text(*detail) == "all-to-all in an expert-parallel group of 2, sent 4.00 KiB");
  CHECK_FALSE(all_to_all_detail(t.model()->trace(0), 0).has_value());  // not an all-to-all
}

TEST_CASE("a DualPipeV MoE prediction runs an all-to-all beside another micro-batch's compute", "[a2a_lane]") {
  TimelineModel model;
  model.set_traces(dualpipev_moe_prediction());
  const traces::Trace& trace = model.trace(0);
  int overlapping_ranks = 0;
  for (int rank = 0; rank < model.rank_count(); ++rank) {
    const Row* a2a = model.row(rank, 0, kAllToAllLane);
    const Row* compute = model.row(rank, 0, static_cast<int>(traces::Lane::Compute));
    REQUIRE(a2a != nullptr);
    REQUIRE(compute != nullptr);
    bool overlaps = false;
    for (const Block& b : a2a->blocks) {
      REQUIRE(is_all_to_all(b.kind));
      const int micro_batch = trace.events[b.event].micro_batch;
      for (std::size_t c = compute->first_ending_after(b.start_us);
           !overlaps && c < compute->blocks.size() && compute->blocks[c].start_us < b.end_us; ++c) {
        const Block& work = compute->blocks[c];
        const bool pass = work.kind == Kind::Forward || work.kind == Kind::Backward;
        overlaps = pass && work.end_us > b.start_us && trace.events[work.event].micro_batch != micro_batch;
      }
    }
    overlapping_ranks += overlaps ? 1 : 0;
  }
  CHECK(overlapping_ranks > 0);
}

TEST_CASE("an older trace with the all-to-all on the collectives lane still reads and draws it", "[a2a_lane]") {
  traces::Trace old = a2a_pipeline("predicted", true);
  old.events.back().lane = static_cast<int>(traces::Lane::Collective);
  const traces::Trace read = traces::read_trace(written(old, "old.json"));
  TimelineModel model;
  model.set_traces(read);
  REQUIRE(model.row(0, 0, kAllToAllLane) == nullptr);
  const Row* collectives = model.row(0, 0, static_cast<int>(traces::Lane::Collective));
  REQUIRE(collectives != nullptr);
  bool found = false;
  for (const Block& b : collectives->blocks)
    if (b.kind == Kind::AllToAllDispatchForward) {
      found = true;
      CHECK(model.event_rgb(0, b.event) == kind_rgb(Kind::AllToAllDispatchForward));
      CHECK(all_to_all_detail(model.trace(0), b.event)->group_size == 2);
    }
  CHECK(found);
}
