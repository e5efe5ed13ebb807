// Why the step took this long (traces/step_attribution.hpp), on synthetic 1F1B pipelines of
// 4 ranks and 8 micro-batches (F 100 us, B 200 us, transfers 10 us):
// - every rank equally fast: no rank held the step back; the idle time is the schedule's own
//   bubble, and the equal-cost replay leaves each rank as idle as the trace does but for the
//   wait before the optimizer (50 us);
// - rank 2 three times slower: rank 2 held the step back, its computes 3x the others' (F 300 us
//   against 100, B 600 against 200); ranks 0, 1 and 3 waited on it, rank 3's last wait on its
//   SEND_F; rank 3's excess idle is waiting for a slow rank, not the schedule;
// - measured.json (pprun, zb-h1, 2 ranks): the explanation names a step and every rank.
#include <catch2/catch.hpp>

#include <filesystem>

#include "pipescope/traces/step_attribution.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "pipescope/traces/trace_io.hpp"

using namespace pipescope::traces;
namespace fs = std::filesystem;

namespace {

Trace pipeline_trace(int slow_rank, double slow_factor) {
  SyntheticPipeline p;
  p.num_ranks = 4;
  p.num_micro_batches = 8;
  p.slow_rank = slow_rank;
  p.slow_factor = slow_factor;
  p.jitter = slow_rank >= 0 ? 1e-9 : 0;
  p.source = "measured";
  return make_1f1b_trace(p);
}

}  // namespace

TEST_CASE("equal costs on every rank: the schedule's own bubble, no culprit", "[step_attribution]") {
  const Trace t = pipeline_trace(-1, 1);
  const StepAttribution a = attribute_step(t);
  CHECK_FALSE(a.culprit.found);
  REQUIRE(a.ranks.size() == 4);
  for (const auto& r : a.ranks) {
    CHECK(r.compute_ratio == Approx(1));
    CHECK(r.schedule_bubble_us <= r.idle_us);
    CHECK(r.waited_on_slow_rank_us == Approx(0).margin(1));
  }
  // The replay gives each rank its idle time but for the synthetic run's wait for the last
  // rank before the optimizer (at most the 50 us of the last drain's optimizer step).
  for (const auto& r : a.ranks) CHECK(r.schedule_bubble_us >= r.idle_us - 50 - 1);
  CHECK(explain_step(a, t).rfind("step 0: no rank held the step back: its idle time is the schedule's own bubble", 0) ==
        0);
  CHECK(attribution_to_json(a, t)["culprit"].is_null());
}

TEST_CASE("a rank three times slower is named as the one that held the step back", "[step_attribution]") {
  const Trace t = pipeline_trace(2, 3);
  const StepAttribution a = attribute_step(t);
  REQUIRE(a.culprit.found);
  CHECK_FALSE(a.culprit.transfer);
  CHECK(a.culprit.rank == 2);
  CHECK(a.culprit.kind_ratio == Approx(3).epsilon(0.01));
  CHECK(a.culprit.held_back_us > 0.3 * a.step_us);
  CHECK(a.culprit.waiters == std::vector<int>{0, 1, 3});
  CHECK(a.ranks[2].compute_ratio == Approx(3).epsilon(0.01));
  CHECK(a.ranks[3].waited_most_on == 2);
  CHECK(a.ranks[0].waited_most_on == 2);
  CHECK(a.ranks[3].waited_on_slow_rank_us > 0);
  CHECK(a.ranks[3].schedule_bubble_us < a.ranks[3].idle_us);
  const std::string line = explain_step(a, t);
  CHECK(line.rfind("step 0: rank 2 held the step back by ", 0) == 0);
  CHECK(line.find("computes were 3.0x the other ranks'; ranks 0,1,3 waited on its ") != std::string::npos);
  // A wait of rank 3 says whom it waited for: rank 2's send.
  bool found_wait = false;
  // The last one: in the warm-up rank 3's waits lead back to rank 0's first forward.
  for (std::size_t i = t.events.size(); i-- > 0 && !found_wait;) {
    if (t.events[i].rank != 3 || t.events[i].kind != EventKind::RecvActivation) continue;
    const IdleGap* gap = gap_ended_by(a, t, i);
    if (!gap) continue;
    found_wait = true;
    CHECK(gap->cause.root_rank == 2);
    CHECK(describe_action(t, gap->cause.send).rfind("rank 2's SEND_F stage 2 mb ", 0) == 0);
  }
  CHECK(found_wait);
  const auto json = attribution_to_json(a, t);
  CHECK(json["culprit"]["rank"] == 2);
  CHECK(json["culprit"]["kind"] == "rank");
  CHECK(json["ranks"].size() == 4);
}

TEST_CASE("a measured trace is explained rank by rank", "[step_attribution]") {
  const Trace t = read_trace((fs::path(PIPESCOPE_SOURCE_DIR) / "traces/examples/measured.json").string());
  const StepAttribution a = attribute_step(t);
  CHECK(a.step == 9);
  REQUIRE(a.ranks.size() == 2);
  CHECK(a.step_us > 0);
  CHECK(a.replay_step_us > 0);
  CHECK(a.link_rate_bytes_per_us > 0);
  CHECK_FALSE(a.critical_path.empty());
  for (const auto& r : a.ranks) {
    CHECK(r.idle_us >= 0);
    CHECK(r.schedule_bubble_us <= r.idle_us);
    CHECK(r.waited_on_slow_rank_us + r.waited_on_transfer_us <= r.idle_us - r.schedule_bubble_us + 1e-6);
  }
  CHECK(explain_step(a, t).rfind("step 9: ", 0) == 0);
}
