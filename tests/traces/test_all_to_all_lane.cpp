// The all-to-all lane (SPEC.md section 5, lane 4) in trace files. A synthetic 1F1B trace of 2
// ranks (a dense run) is written with thread names for lanes 0-3 of each rank and none for lane
// 4; with one ALL_TO_ALL_COMBINE_B on rank 1 (the kind's lane, 4096 bytes, args `peers` [1, 3])
// rank 1 alone also names lane 4 "all-to-all", and the event reads back there with its bytes
// and args. An older file with that event on tid 3 (the collectives lane) still reads: lane 3,
// the typed kind, its bytes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "pipescope/traces/synthetic.hpp"
#include "pipescope/traces/trace_io.hpp"

using namespace pipescope::traces;

namespace {

Trace two_rank_pipeline_for_lanes() {
  SyntheticPipeline pp;
  pp.num_ranks = 2;
  pp.num_micro_batches = 2;
  return make_1f1b_trace(pp);
}

Trace with_combine_on_rank1(Trace t, Lane lane) {
  TraceEvent e;
  e.rank = 1;
  e.lane = static_cast<int>(lane);
  e.kind = EventKind::AllToAllCombineBackward;
  e.name = "ALL_TO_ALL_COMBINE_B";
  e.category = "collective";
  e.stage = 1;
  e.micro_batch = 0;
  e.ts_us = 150;
  e.dur_us = 5;
  e.bytes = 4096;
  t.events.push_back(e);
  t.args.push_back({t.events.size() - 1, R"({"peers": [1, 3]})"});
  return t;
}

// (pid, tid) -> name of the thread_name metadata in a written trace.
std::map<std::pair<int, int>, std::string> lane_names_written(const Trace& t) {
  std::map<std::pair<int, int>, std::string> names;
  const nlohmann::json doc = nlohmann::json::parse(to_trace_json(t));
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name")
      names[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"].get<std::string>();
  return names;
}

}  // namespace

TEST_CASE("the all-to-all lane is named where a rank has such events, and only there", "[trace_io][a2a_lane]") {
  REQUIRE(event_kind_lane(EventKind::AllToAllCombineBackward) == Lane::AllToAll);
  REQUIRE(static_cast<int>(Lane::AllToAll) == 4);
  REQUIRE(default_lane_name(3) == "collectives");
  REQUIRE(default_lane_name(4) == "all-to-all");
  REQUIRE(default_lane_name(5) == "lane 5");

  const auto dense = lane_names_written(two_rank_pipeline_for_lanes());
  REQUIRE(dense.size() == 8);
  REQUIRE(dense.count({0, 4}) == 0);
  REQUIRE(dense.at({1, 3}) == "collectives");

  const Trace moe = with_combine_on_rank1(two_rank_pipeline_for_lanes(), Lane::AllToAll);
  const auto names = lane_names_written(moe);
  REQUIRE(names.size() == 9);
  REQUIRE(names.at({1, 4}) == "all-to-all");
  REQUIRE(names.count({0, 4}) == 0);

  const Trace read = parse_trace(to_trace_json(moe), "moe.json");
  const auto found = std::find_if(read.events.begin(), read.events.end(),
                                  [](const TraceEvent& x) { return x.kind == EventKind::AllToAllCombineBackward; });
  REQUIRE(found != read.events.end());
  const TraceEvent& e = *found;
  REQUIRE(e.lane == 4);
  REQUIRE(e.bytes == 4096);
  REQUIRE(read.lane_names.at(1).at(4) == "all-to-all");
  const std::string* args = read.args_of(static_cast<std::size_t>(&e - read.events.data()));
  REQUIRE(args != nullptr);
  REQUIRE(nlohmann::json::parse(*args)["peers"] == nlohmann::json::parse("[1, 3]"));
}

TEST_CASE("an older trace with the all-to-all on the collectives lane still reads", "[trace_io][a2a_lane]") {
  const Trace old = with_combine_on_rank1(two_rank_pipeline_for_lanes(), Lane::Collective);
  const Trace read = parse_trace(to_trace_json(old), "old.json");
  const auto it =
      std::find_if(read.events.begin(), read.events.end(), [](const TraceEvent& x) { return is_all_to_all(x.kind); });
  REQUIRE(it != read.events.end());
  REQUIRE(it->lane == static_cast<int>(Lane::Collective));
  REQUIRE(it->kind == EventKind::AllToAllCombineBackward);
  REQUIRE(it->bytes == 4096);
  REQUIRE(lane_names_written(read).count({1, 4}) == 0);
}
