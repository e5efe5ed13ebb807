// The widget-free timeline model on synthetic 1F1B traces (4 ranks, 8 micro-batches, F 100 us,
// B 200 us, transfers 10 us, optimizer 50 us; the measured twin has rank 2 1.5x slower).
// Rows: each rank uses all four lanes, so 4 ranks x 2 series x 4 lanes = 32 rows, predicted
// before measured. Folding: at 1 us per pixel nothing folds (16 compute blocks on rank 0);
// squeezed into 10 px the 16 blocks fold into at most 10/3 + 1 spans. The model's search,
// critical path and memory tracks have tests of their own (test_timeline_search.cpp,
// test_critical_path.cpp, test_memory_track.cpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "pipescope/gui/kinds.hpp"
#include "pipescope/gui/timeline_model.hpp"
#include "pipeline_trace_fixture.hpp"
#include "pipescope/traces/synthetic.hpp"

using namespace pipescope::gui;
using namespace pipescope::traces;
using pipeline_trace_fixture::predicted_and_slow_measured_1f1b;

TEST_CASE("rows are start-sorted per rank, series and lane", "[model]") {
  auto [p, m] = predicted_and_slow_measured_1f1b();
  TimelineModel model;
  model.set_traces(p, m);
  REQUIRE(model.series_count() == 2);
  REQUIRE(model.rank_count() == 4);
  REQUIRE(model.rows().size() == 32);
  REQUIRE(model.rows()[0].rank == 0);
  REQUIRE(model.rows()[0].series == 0);
  REQUIRE(model.rows()[4].series == 1);
  const Row* compute = model.row(0, 0, 0);
  REQUIRE(compute);
  REQUIRE(compute->blocks.size() == 16);
  for (std::size_t i = 1; i < compute->blocks.size(); ++i)
    REQUIRE(compute->blocks[i - 1].start_us <= compute->blocks[i].start_us);
  REQUIRE(model.row(0, 2, 0) == nullptr);
  REQUIRE(model.row(9, 0, 0) == nullptr);
  REQUIRE(model.series_name(0) == "predicted");
  REQUIRE(model.series_name(1) == "measured");
  REQUIRE(model.lane_name(0, 2) == "receive");
  REQUIRE(model.peak_memory_bytes(0, 0) == 4 * (64LL << 20));
  // The 1F1B bubble with 10 us transfers and the optimizer, as compare_traces computes it.
  REQUIRE(model.bubble_fraction(0, 0) == Approx(model.comparison()->ranks[0].bubble_fraction_predicted));
}

TEST_CASE("binary searches find the blocks of a time", "[model]") {
  TimelineModel model;
  model.set_traces(predicted_and_slow_measured_1f1b().first);
  const Row& row = *model.row(0, 0, 0);  // rank 0 compute: F0 [0,100], F1 [100,200] ...
  REQUIRE(row.first_ending_after(0) == 0);
  REQUIRE(row.first_ending_after(100) == 1);
  REQUIRE(row.first_starting_from(100) == 1);
  REQUIRE(row.first_starting_from(1e9) == row.blocks.size());
  REQUIRE(row.block_at(50, 0).value() == 0);
  REQUIRE(row.block_at(150, 0).value() == 1);
  const auto& events = model.trace(0).events;
  // Between rank 0's warm-up forwards and its first backward it idles (the bubble).
  const double idle = events[row.blocks[3].event].end_us() + 1;
  REQUIRE(events[row.blocks[4].event].ts_us > idle);
  REQUIRE_FALSE(row.block_at(idle, 0.5).has_value());
}

TEST_CASE("visit_visible draws visible blocks and folds narrow ones", "[model]") {
  TimelineModel model;
  model.set_traces(predicted_and_slow_measured_1f1b().first);
  const Row& row = *model.row(0, 0, 0);
  ViewState view;
  view.set_extent(model.end_us());
  view.set_width(model.end_us());  // 1 us per pixel: every block is at least 100 px
  std::vector<Span> spans;
  visit_visible(row, view, 3, [&](const Span& s) { spans.push_back(s); });
  REQUIRE(spans.size() == 16);
  for (const auto& s : spans) REQUIRE_FALSE(s.folded());
  REQUIRE(spans[0].x0 == Approx(0));
  REQUIRE(spans[0].x1 == Approx(100));

  view.set_width(10);  // the whole trace in 10 px
  spans.clear();
  std::size_t covered = 0;
  visit_visible(row, view, 3, [&](const Span& s) {
    spans.push_back(s);
    covered += s.count;
  });
  REQUIRE(spans.size() <= 10 / 3 + 1);
  REQUIRE(covered == 16);  // every block is in exactly one span

  view.set_width(1000);
  view.set_visible(1000, 1500);  // only the blocks overlapping [1000, 1500] us
  spans.clear();
  visit_visible(row, view, 3, [&](const Span& s) { spans.push_back(s); });
  REQUIRE_FALSE(spans.empty());
  for (const auto& s : spans) {
    const auto& b = row.blocks[s.first];
    REQUIRE(b.end_us >= 1000);
    REQUIRE(b.start_us < 1500);
  }
}

TEST_CASE("measured errors against the prediction", "[model]") {
  auto [p, m] = predicted_and_slow_measured_1f1b();
  TimelineModel model;
  model.set_traces(p, m);
  const auto& events = model.trace(1).events;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto predicted = model.matched_predicted(i);
    REQUIRE(predicted.has_value());
    // Rank 2 computes and sends 1.5x slower; a receive takes as long as its send.
    const bool slow = events[i].lane == 2 ? events[i].peer_rank == 2 : events[i].rank == 2;
    const double expected = slow ? 0.5 : 0.0;
    REQUIRE(model.measured_error(i) == Approx(expected).margin(1e-6));
  }
  REQUIRE(difference_rgb(0.5) == 0xd62728);
  REQUIRE(difference_rgb(-0.9) == 0x1f5fb4);
  REQUIRE(difference_rgb(0) == 0xffffff);
  REQUIRE(difference_rgb(std::nan("")) == kUnmatchedRgb);
}

TEST_CASE("overview density is the busy share of compute", "[model]") {
  SyntheticPipeline pp;
  pp.num_ranks = 1;
  pp.num_micro_batches = 1;
  pp.optimizer_us = 300;  // F [0,100], B [100,300], optimizer [300,600] on another lane
  TimelineModel model;
  model.set_traces(make_1f1b_trace(pp));
  const auto density = model.overview_density(0, 6);  // 100 us bins
  REQUIRE(density[0] == Approx(1));
  REQUIRE(density[2] == Approx(1));
  REQUIRE(density[3] == Approx(0));
  REQUIRE(density[5] == Approx(0));
}

TEST_CASE("rows of many blocks get a coarser summary used when zoomed far out", "[model]") {
  // 2 ranks x 9,000 micro-batches: each compute row holds 18,000 blocks (F and B per
  // micro-batch), above the 4 x 4,096 that earn a summary. The summary
  // step is end_us / 4096; every block lies inside the summary block that took it; the whole
  // trace in 1,000 px is painted from the summary, a 1/1000 slice of it from the full row.
  // A small trace (the 4-rank, 8 micro-batch one) has no summary.
  SyntheticPipeline pp;
  pp.num_ranks = 2;
  pp.num_micro_batches = 9000;
  TimelineModel model;
  model.set_traces(make_1f1b_trace(pp));
  const Row* compute = model.row(0, 0, static_cast<int>(Lane::Compute));
  REQUIRE(compute != nullptr);
  REQUIRE(compute->blocks.size() == 18000);
  REQUIRE(compute->summary != nullptr);
  REQUIRE(compute->summary_us == Approx(model.end_us() / 4096));
  const auto& coarse = compute->summary->blocks;
  REQUIRE(coarse.size() < compute->blocks.size() / 2);
  REQUIRE(coarse.size() <= 2 * 4096 + 2);
  std::size_t k = 0;
  for (const Block& b : compute->blocks) {
    while (k + 1 < coarse.size() && coarse[k + 1].start_us <= b.start_us) ++k;
    INFO("block at " << b.start_us);
    REQUIRE(coarse[k].start_us <= b.start_us);
    REQUIRE(coarse[k].end_us >= b.end_us);
  }

  ViewState view;
  view.set_extent(model.end_us());
  view.set_width(1000);
  view.show_all();
  std::set<const Row*> visited;
  visit_visible(*compute, view, 3, [&](const Span& span) { visited.insert(span.row); });
  REQUIRE(visited == std::set<const Row*>{compute->summary.get()});
  view.set_visible(model.end_us() / 2, model.end_us() / 2 + model.end_us() / 1000);
  visited.clear();
  visit_visible(*compute, view, 3, [&](const Span& span) { visited.insert(span.row); });
  REQUIRE(visited == std::set<const Row*>{compute});

  TimelineModel small;
  auto [predicted, measured] = predicted_and_slow_measured_1f1b();
  small.set_traces(predicted, measured);
  for (const Row& row : small.rows()) REQUIRE(row.summary == nullptr);
}

TEST_CASE("the viewer's bubble is traces/bubble.hpp's: loads busy, the optimizer not", "[model]") {
  // Rank 0: LOAD [0,5], F [5,15], B [30,50] on the compute lane, OPTIMIZER [50,60] on the
  // collectives lane: busy 35 of 60 us, bubble 25/60. Rank 1: F [20,30], B [30,50] and the
  // optimizer: busy 30, bubble 0.5. compare_traces says the same.
  Trace t;
  t.meta.source = "predicted";
  t.meta.num_ranks = 2;
  auto add = [&](int rank, Lane lane, const char* name, double start, double end) {
    TraceEvent e;
    e.rank = rank;
    e.lane = static_cast<int>(lane);
    e.name = name;
    e.kind = event_kind_from_name(e.name);  // as a reader would parse it
    e.stage = rank;
    e.micro_batch = 0;
    e.ts_us = start;
    e.dur_us = end - start;
    t.events.push_back(e);
  };
  add(0, Lane::Compute, "LOAD", 0, 5);
  add(0, Lane::Compute, "F", 5, 15);
  add(0, Lane::Compute, "B", 30, 50);
  add(0, Lane::Collective, "OPTIMIZER", 50, 60);
  add(1, Lane::Compute, "F", 20, 30);
  add(1, Lane::Compute, "B", 30, 50);
  add(1, Lane::Collective, "OPTIMIZER", 50, 60);
  TimelineModel model;
  model.set_traces(t, t);
  CHECK(model.bubble_fraction(0, 0) == Approx(25.0 / 60));
  CHECK(model.bubble_fraction(0, 1) == Approx(0.5));
  REQUIRE(model.comparison().has_value());
  CHECK(model.bubble_fraction(1, 0) == Approx(model.comparison()->ranks[0].bubble_fraction_measured));
  CHECK(model.bubble_fraction(0, 1) == Approx(model.comparison()->ranks[1].bubble_fraction_predicted));
}

TEST_CASE("TP_F and TP_B, a pass's tensor-parallel collectives, have a kind, a colour and a label of their own") {
  using pipescope::gui::Kind;
  CHECK(pipescope::gui::kind_of(event_kind_from_name("TP_F")) == Kind::TensorParallel);
  CHECK(pipescope::gui::kind_of(event_kind_from_name("TP_B")) == Kind::TensorParallel);
  CHECK(pipescope::gui::kind_of(event_kind_from_name("SEND_F")) == Kind::Communication);
  CHECK(pipescope::gui::kind_label(Kind::TensorParallel) == "tensor-parallel collective");
  for (const Kind other : {Kind::Forward, Kind::Backward, Kind::BackwardInput, Kind::BackwardWeight,
                           Kind::Communication, Kind::Optimizer, Kind::Other})
    CHECK(pipescope::gui::kind_rgb(Kind::TensorParallel) != pipescope::gui::kind_rgb(other));
}

// The all-to-all of mixture-of-experts layers (dispatch and combine, forward and backward) has
// a colour per kind, none of them the sends' and receives' (they share the all-to-all lane and
// must be told apart there); LOAD, torch's waits and plain names are Other.
TEST_CASE("the MoE all-to-all kinds have colours of their own") {
  using pipescope::gui::Kind;
  const std::vector<std::pair<const char*, Kind>> all_to_all{{"ALL_TO_ALL_DISPATCH_F", Kind::AllToAllDispatchForward},
                                                             {"ALL_TO_ALL_COMBINE_F", Kind::AllToAllCombineForward},
                                                             {"ALL_TO_ALL_DISPATCH_B", Kind::AllToAllDispatchBackward},
                                                             {"ALL_TO_ALL_COMBINE_B", Kind::AllToAllCombineBackward}};
  std::set<std::uint32_t> colours;
  for (const auto& [name, kind] : all_to_all) {
    INFO(name);
    CHECK(pipescope::gui::kind_of(event_kind_from_name(name)) == kind);
    CHECK(pipescope::gui::is_all_to_all(kind));
    CHECK(pipescope::gui::kind_label(kind).rfind("all-to-all ", 0) == 0);
    colours.insert(pipescope::gui::kind_rgb(kind));
  }
  for (int k = 0; k < pipescope::gui::kKindCount; ++k)
    if (!pipescope::gui::is_all_to_all(static_cast<Kind>(k)))
      CHECK(colours.count(pipescope::gui::kind_rgb(static_cast<Kind>(k))) == 0);
  CHECK(colours.size() == 4);
  CHECK(pipescope::gui::kind_of(EventKind::Load) == Kind::Other);
  CHECK(pipescope::gui::kind_of(EventKind::WaitSendGrad) == Kind::Other);
  CHECK(pipescope::gui::kind_of(event_kind_from_name("aten::mm")) == Kind::Other);
  CHECK(pipescope::gui::kind_of(EventKind::ReduceTied) == Kind::Optimizer);
  CHECK(pipescope::gui::kind_of(EventKind::BackwardInput) == Kind::BackwardInput);
}
