// A rank's traced step as it travels to rank 0 (pprun/rank_trace_record.hpp).
// Expected:
// - Through JSON text and back, every field of every event, args entry, memory sample, probe
//   (the backward split's, with and without its inner part, and the expert-call one's, forward
//   and backward) and both core lists is the same; each event's kind is parsed from its name
//   ("F" a forward, "SEND_F" a send), whatever the sender held.
// - The JSON names its fields (objects, not positional arrays).
// - append_rank_trace puts a second rank's events after the first's, with its args re-indexed
//   to the trace's events, and its memory samples after the first's.
// - A record missing a field (its expert-call probe too) is refused.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "pipescope/traces/event_kind.hpp"
#include "pprun/rank_trace_record.hpp"

using namespace pipescope;
using namespace pipescope::exec;

namespace {

traces::TraceEvent record_test_event(int rank, const std::string& name, double ts_us) {
  traces::TraceEvent e;
  e.rank = rank;
  e.lane = 1;
  e.name = name;
  e.kind = traces::EventKind::Other;  // the receiver parses it from the name
  e.category = "p2p";
  e.ts_us = ts_us;
  e.dur_us = 2.5;
  e.stage = 3;
  e.micro_batch = 4;
  e.peer_rank = 1;
  e.bytes = 4096;
  return e;
}

RankTraceRecord record_of(int rank) {
  RankTraceRecord record;
  record.events = {record_test_event(rank, "F", 1e9 + 0.1), record_test_event(rank, "SEND_F", 12.75)};
  record.args = {{1, R"({"layer":2})"}};
  record.memory = {{rank, 0.5, 123}, {rank, 1.5, 456}};
  record.backward_split_probe = {{0, {{1.0, 2.0}, {0.5}, {0.25}}, traces::BackwardSplitTimes{{3.0}, {1.5}, {1.25}}},
                                 {1, {{4.0}, {2.0}, {1.0}}, std::nullopt}};
  record.expert_call_probe = {{1, "blocks.1", false, 32, {40.5, 41.25}}, {1, "blocks.1", true, 256, {900}}};
  record.cores = "0-3,8";
  record.transport_cores = "4";
  return record;
}

}  // namespace

TEST_CASE("rank trace record: through JSON text and back, field for field") {
  const RankTraceRecord sent = record_of(2);
  const nlohmann::json j = sent;
  REQUIRE(j.at("events").at(0).is_object());
  CHECK(j.at("events").at(0).at("name") == "F");
  const auto got = nlohmann::json::parse(j.dump()).get<RankTraceRecord>();
  REQUIRE(got.events.size() == sent.events.size());
  for (std::size_t i = 0; i < sent.events.size(); ++i) {
    const traces::TraceEvent& a = sent.events[i];
    const traces::TraceEvent& b = got.events[i];
    CHECK(b.rank == a.rank);
    CHECK(b.lane == a.lane);
    CHECK(b.name == a.name);
    CHECK(b.kind == traces::event_kind_from_name(a.name));
    CHECK(b.category == a.category);
    CHECK(b.ts_us == a.ts_us);
    CHECK(b.dur_us == a.dur_us);
    CHECK(b.stage == a.stage);
    CHECK(b.micro_batch == a.micro_batch);
    CHECK(b.peer_rank == a.peer_rank);
    CHECK(b.bytes == a.bytes);
  }
  CHECK(got.events[0].kind != got.events[1].kind);
  REQUIRE(got.args.size() == 1);
  CHECK(got.args[0].event == 1);
  CHECK(got.args[0].json == sent.args[0].json);
  REQUIRE(got.memory.size() == 2);
  CHECK(got.memory[1].rank == 2);
  CHECK(got.memory[1].ts_us == 1.5);
  CHECK(got.memory[1].bytes == 456);
  // Compared as one bool: LibTorch's logging header would print the vectors and cannot.
  const bool same_probes = got.backward_split_probe == sent.backward_split_probe;
  CHECK(same_probes);
  REQUIRE(got.expert_call_probe.size() == 2);
  const bool same_expert_calls = got.expert_call_probe == sent.expert_call_probe;
  CHECK(same_expert_calls);
  CHECK(got.cores == "0-3,8");
  CHECK(got.transport_cores == "4");
}

TEST_CASE("rank trace record: a second rank's events follow the first's, args re-indexed") {
  traces::Trace trace;
  append_rank_trace(trace, record_of(0));
  append_rank_trace(trace, record_of(1));
  REQUIRE(trace.events.size() == 4);
  CHECK(trace.events[2].rank == 1);
  REQUIRE(trace.args.size() == 2);
  CHECK(trace.args[0].event == 1);
  CHECK(trace.args[1].event == 3);
  REQUIRE(trace.memory.size() == 4);
  CHECK(trace.memory[3].rank == 1);
}

TEST_CASE("rank trace record: a record missing a field is refused") {
  nlohmann::json j = record_of(0);
  j.erase("cores");
  CHECK_THROWS(j.get<RankTraceRecord>());
  nlohmann::json no_bytes = record_of(0);
  no_bytes.at("events").at(0).erase("bytes");
  CHECK_THROWS(no_bytes.get<RankTraceRecord>());
  nlohmann::json no_rows = record_of(0);
  no_rows.at("expert_call_probe").at(1).erase("rows");
  CHECK_THROWS(no_rows.get<RankTraceRecord>());
}
