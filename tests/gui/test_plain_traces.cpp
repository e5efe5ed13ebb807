// A plain Chrome trace in the model, as what it is. One process "trainer" (pid 3) with one
// thread: "step" 0..100 us holds "forward" 10..50 us, which holds "matmul" 10..30 us (X
// events, written child first, so the parent-first order is the model's own), then
// "backward" 60..90 us (B/E) inside step; a second "matmul" 62..70 us inside backward.
// Depths: step 0, forward 1, matmul 2, backward 1, second matmul 2: three sub-rows. Colours
// come from the names (name_rgb): both matmuls share one, forward's differs. An instant
// "marker" at 95 us and a counter "queue" (3, then 1) are kept for the painter. No pipeline:
// has_pipeline is false (a pipescope trace's is true), and the rank is named by the metadata;
// its summary is busy 100 us (any lane), no communication, and no bottleneck (one rank).
#include <catch2/catch.hpp>

#include <algorithm>

#include "plain_trace_fixture.hpp"
#include "pipescope/gui/name_colours.hpp"
#include "pipescope/gui/rank_summary.hpp"
#include "pipescope/gui/timeline_model.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "pipescope/traces/trace_io.hpp"

using namespace pipescope::gui;
using namespace pipescope::traces;

using plain_trace_fixture::kNested;

TEST_CASE("nested slices of a plain trace are stacked by depth and coloured by name", "[plain]") {
  TimelineModel model;
  model.set_traces(parse_trace(kNested, "nested.json"));
  REQUIRE_FALSE(model.has_pipeline(0));
  REQUIRE(model.rank_name(0) == "trainer");
  REQUIRE(model.rows().size() == 1);
  const Row& row = model.rows()[0];
  REQUIRE(row.blocks.size() == 5);
  REQUIRE(row.depth_count == 3);
  const auto& events = model.trace(0).events;
  auto depth_of = [&](const std::string& name, double start_us) {
    for (std::size_t i = 0; i < row.blocks.size(); ++i)
      if (events[row.blocks[i].event].name == name && row.blocks[i].start_us == start_us) return row.depth(i);
    return -1;
  };
  REQUIRE(depth_of("step", 0) == 0);
  REQUIRE(depth_of("forward", 10) == 1);
  REQUIRE(depth_of("matmul", 10) == 2);
  REQUIRE(depth_of("backward", 60) == 1);
  REQUIRE(depth_of("matmul", 62) == 2);

  auto index_of = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find_if(events.begin(), events.end(), [&](const auto& e) { return e.name == name; }) - events.begin());
  };
  REQUIRE(model.event_rgb(0, index_of("matmul")) == name_rgb("matmul"));
  REQUIRE(model.event_rgb(0, index_of("forward")) == name_rgb("forward"));
  REQUIRE(name_rgb("matmul") != name_rgb("forward"));
  REQUIRE(name_rgb("matmul") == name_rgb(std::string("mat") + "mul"));  // stable: from the text alone

  REQUIRE(model.instants(0).size() == 1);
  REQUIRE(model.instants(0)[0].name == "marker");
  REQUIRE(model.counter_tracks(0).size() == 1);
  const CounterTrack& queue = model.counter_tracks(0)[0];
  REQUIRE(queue.name == "queue");
  REQUIRE(queue.samples.size() == 2);
  REQUIRE(queue.min_value == 1);
  REQUIRE(queue.max_value == 3);
  REQUIRE(model.end_us() == 100);

  // No pipeline, so no iteration: the rank is busy while any slice runs (0..100 us).
  const auto ranks = rank_summaries(model);
  REQUIRE(ranks.size() == 1);
  REQUIRE(ranks[0].name == "trainer");
  REQUIRE(ranks[0].busy_us == Approx(100));
  REQUIRE(ranks[0].communication_us == 0);
  REQUIRE_FALSE(ranks[0].bottleneck);  // one rank waits for nobody
}

TEST_CASE("pipeline traces are pipelines and keep their kind colours", "[plain]") {
  TimelineModel model;
  model.set_traces(make_1f1b_trace(SyntheticPipeline{}));
  REQUIRE(model.has_pipeline(0));
  const auto& events = model.trace(0).events;
  for (std::size_t i = 0; i < events.size(); ++i) REQUIRE(model.event_rgb(0, i) == kind_rgb(kind_of(events[i].kind)));
  // 1F1B on one lane never overlaps itself.
  for (const Row& row : model.rows()) REQUIRE(row.depth_count == 1);
}
