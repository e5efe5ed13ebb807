// Ranks on different clocks (traces/clock_alignment.hpp).
// measured.json (pprun, zb-h1, 2 ranks on one host, one steady clock): every receive ends after
// its send began, so the clocks are consistent and aligning leaves the trace unchanged. With
// rank 1's times moved 5 ms later (or 7.5 ms earlier), receives end before their sends begin:
// the offset found for rank 1 undoes the skew to within the width of the unskewed trace's
// bounds (a few ms: the sends and receives both ways), and the aligned trace keeps every bound.
// A torch-style trace of three ranks on three hosts, with no transfers between ranks 0 and 2
// but a REDUCE_TIED they both take part in: rank 2's clock 40 ms ahead is found from the
// collective's ends to within its skew (the ends 30 us apart).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include "pipescope/traces/clock_alignment.hpp"
#include "pipescope/traces/trace_difference.hpp"
#include "pipescope/traces/trace_io.hpp"

using namespace pipescope::traces;
namespace fs = std::filesystem;

namespace {

Trace measured_example() {
  return read_trace((fs::path(PIPESCOPE_SOURCE_DIR) / "traces/examples/measured.json").string());
}

void shift_rank(Trace& trace, int rank, double by_us) {
  for (auto& e : trace.events)
    if (e.rank == rank) e.ts_us += by_us;
}

const ClockBound& bound_between(const std::vector<ClockBound>& bounds, int a, int b) {
  for (const auto& bound : bounds)
    if (bound.from_rank == a && bound.to_rank == b) return bound;
  FAIL("no bound between ranks " << a << " and " << b);
  return bounds.front();
}

TraceEvent clock_event(const char* name, int rank, int peer, int stage, double ts_us, double dur_us) {
  TraceEvent e;
  e.rank = rank;
  e.name = name;
  e.kind = event_kind_from_name(e.name);
  e.lane = static_cast<int>(event_kind_lane(e.kind));
  e.ts_us = ts_us;
  e.dur_us = dur_us;
  e.stage = stage;
  e.micro_batch = 0;
  e.peer_rank = peer;
  return e;
}

}  // namespace

TEST_CASE("a trace on one clock is left as it is", "[clock_alignment]") {
  const Trace original = measured_example();
  Trace aligned = original;
  const ClockAlignment alignment = align_clocks(aligned);
  CHECK_FALSE(alignment.applied);
  CHECK(alignment.worst_violation_us == 0);
  REQUIRE(alignment.offset_us.size() == 2);
  CHECK(alignment.offset_us[0] == 0);
  CHECK(alignment.offset_us[1] == 0);
  CHECK_FALSE(trace_difference(original, aligned).has_value());
  CHECK(describe_clock_alignment(alignment) == "clocks: consistent (no offsets)");
  // Both directions bound the pair: sends one way give the lower bound, the other way the upper.
  const ClockBound& bound = bound_between(alignment.bounds, 0, 1);
  CHECK(bound.lower_us <= 0);
  CHECK(bound.upper_us >= 0);
  CHECK(bound.transfers == 16);
}

TEST_CASE("a skewed rank is brought back within the bounds of its transfers", "[clock_alignment]") {
  const Trace original = measured_example();
  const ClockBound truth = bound_between(clock_bounds(original), 0, 1);
  for (const double skew_us : {5000.0, -7500.0}) {
    Trace skewed = original;
    shift_rank(skewed, 1, skew_us);
    const ClockAlignment alignment = align_clocks(skewed);
    REQUIRE(alignment.applied);
    CHECK(alignment.worst_violation_us > 0);
    // o1 - o0 undoes the skew: what is left of it lies within the unskewed bounds.
    const double left_us = alignment.offset_us[1] - alignment.offset_us[0] + skew_us;
    CHECK(left_us >= truth.lower_us - kClockToleranceUs);
    CHECK(left_us <= truth.upper_us + kClockToleranceUs);
    CHECK(std::fabs(left_us) < std::fabs(skew_us) / 2);
    CHECK_FALSE(estimate_clock_alignment(skewed).applied);
    REQUIRE(skewed.meta.extra.contains("clock_offsets_us"));
    CHECK(skewed.meta.extra["clock_offsets_us"].size() == 2);
    CHECK(describe_clock_alignment(alignment).rfind("clocks: ranks' offsets ", 0) == 0);
  }
}

TEST_CASE("a collective's ends align ranks that exchanged no data", "[clock_alignment]") {
  // True times: rank 0 sends to rank 1 at 100 us, arriving at 150; rank 1 sends to rank 2 at
  // 300, arriving at 340; the tied reduction of ranks 0 and 2 runs 500..600 on rank 0 and
  // 520..630 on rank 2 (ends 30 us apart). Rank 1's clock is 10 ms behind, rank 2's 40 ms ahead.
  Trace t;
  t.meta.num_ranks = 3;
  t.events = {clock_event("SEND_F", 0, 1, 0, 100, 20),         clock_event("RECV_F", 1, 0, 1, 60 - 10000, 90),
              clock_event("SEND_F", 1, 2, 1, 300 - 10000, 10), clock_event("RECV_F", 2, 1, 2, 280 + 40000, 60),
              clock_event("REDUCE_TIED", 0, -1, 0, 500, 100),  clock_event("REDUCE_TIED", 2, -1, 2, 520 + 40000, 110)};
  const ClockAlignment alignment = align_clocks(t);
  REQUIRE(alignment.applied);
  const double rank2_us = alignment.offset_us[2] - alignment.offset_us[0];
  CHECK(rank2_us == Approx(-40000).margin(50));
  const double rank1_us = alignment.offset_us[1] - alignment.offset_us[0];
  CHECK(rank1_us > 10000 - 200);
  CHECK(rank1_us < 10000 + 200);
  const ClockBound& collective = bound_between(alignment.bounds, 0, 2);
  CHECK(collective.collectives == 1);
  CHECK(collective.transfers == 0);
  // The earliest event stays where the file put it.
  double first = 1e300;
  for (const auto& e : t.events) first = std::min(first, e.ts_us);
  CHECK(first == Approx(-9940));
}
