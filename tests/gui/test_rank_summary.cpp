// The per-rank summary of a synthetic 1F1B pair (4 ranks, 8 micro-batches, F 100 us, B 200 us;
// the measured twin has rank 2 1.5x slower). Each rank computes 8 x 300 us = 2400 us predicted;
// measured, rank 2 computes 3600 us, so its error (predicted - measured) / measured is -1/3 and
// it is the bottleneck; the others' errors are 0. Busy + idle is the measured iteration; the
// communication of a rank is the union of its send and receive lanes (rank 0 has 8 sends and
// 8 receives of 10 us). The CSV has a header and one line per rank.
// The waits of a single measured trace are in test_step_attribution.cpp; here, that they reach
// the summary.
#include <catch2/catch.hpp>

#include <sstream>

#include "pipescope/gui/rank_summary.hpp"
#include "pipescope/traces/bubble.hpp"
#include "pipescope/traces/synthetic.hpp"

using namespace pipescope::gui;
using namespace pipescope::traces;

TEST_CASE("rank summary of a pair: busy, idle, communication, error and the bottleneck", "[rank_summary]") {
  SyntheticPipeline pp;
  Trace predicted = make_1f1b_trace(pp);
  pp.slow_rank = 2;
  pp.slow_factor = 1.5;
  pp.source = "measured";
  TimelineModel model;
  model.set_traces(predicted, make_1f1b_trace(pp));
  const auto ranks = rank_summaries(model);
  REQUIRE(ranks.size() == 4);
  for (const auto& r : ranks) {
    INFO("rank " << r.rank);
    REQUIRE(r.predicted_busy_us == Approx(2400));
    REQUIRE(r.busy_us == r.measured_busy_us);
    REQUIRE(r.busy_us + r.idle_us == Approx(model.iteration_us(1)));
    REQUIRE(r.bottleneck == (r.rank == 2));
    if (r.rank == 2) {
      REQUIRE(r.measured_busy_us == Approx(3600));
      REQUIRE(r.error == Approx(-1.0 / 3));
    } else {
      REQUIRE(r.error == Approx(0).margin(1e-9));
    }
  }
  REQUIRE(ranks[0].communication_us > 0);
  REQUIRE(ranks[0].communication_us <= 16 * 10 * 1.5 + 1e-9);

  const std::string csv = rank_summary_csv(ranks, true);
  std::istringstream lines(csv);
  std::string line;
  REQUIRE(std::getline(lines, line));
  REQUIRE(line == "rank,name,busy_us,idle_us,communication_us,predicted_busy_us,measured_busy_us,error,bottleneck");
  int count = 0;
  while (std::getline(lines, line)) {
    ++count;
    REQUIRE(line.rfind(std::to_string(count - 1) + ",rank " + std::to_string(count - 1) + ",", 0) == 0);
    REQUIRE(line.back() == (count - 1 == 2 ? '1' : '0'));
  }
  REQUIRE(count == 4);
}

TEST_CASE("a single trace's summary has no prediction columns", "[rank_summary]") {
  TimelineModel model;
  model.set_traces(make_1f1b_trace(SyntheticPipeline{}));
  const auto ranks = rank_summaries(model);
  REQUIRE(ranks.size() == 4);
  REQUIRE(std::isnan(ranks[0].error));
  const std::string csv = rank_summary_csv(ranks, false);
  REQUIRE(csv.rfind("rank,name,busy_us,idle_us,communication_us,bottleneck\n", 0) == 0);
  REQUIRE(std::count(csv.begin(), csv.end(), '\n') == 5);
}

// One measured trace of the same pipeline with rank 2 three times slower: rank 2 held the step
// back (the name `ppsim compare --explain` gives), and rank 3, which receives its activations,
// waited on it most; with every rank equally fast nobody held the step back.
TEST_CASE("the rank summary names whom each rank waited on and the rank that held the step back", "[rank_summary]") {
  SyntheticPipeline pp;
  pp.slow_rank = 2;
  pp.slow_factor = 3;
  pp.source = "measured";
  TimelineModel model;
  model.set_traces(make_1f1b_trace(pp));
  const auto ranks = rank_summaries(model);
  REQUIRE(ranks.size() == 4);
  for (const auto& r : ranks) REQUIRE(r.held_step_back == (r.rank == 2));
  REQUIRE(ranks[2].held_back_us > 0);
  REQUIRE(ranks[3].waited_most_on == 2);
  REQUIRE(ranks[3].waited_most_us > 0);

  TimelineModel even;
  even.set_traces(make_1f1b_trace(SyntheticPipeline{}));
  for (const auto& r : rank_summaries(even)) REQUIRE_FALSE(r.held_step_back);
}
