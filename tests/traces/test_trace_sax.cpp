// The reference parser (traces/src/trace_sax.cpp): nlohmann's SAX callbacks into events.
// A trace with otherData and two events reads with its args: F's stage 0 and micro-batch 2
// typed, its "note" and nested "shape" kept as JSON. Text that is not JSON is refused with its
// line and column (line 2, column 3 for a stray "x"), a truncated file says so, a field of the
// wrong type names the event and the field, and a top-level object without traceEvents is no trace.
#include <catch2/catch.hpp>

#include "trace_sax.hpp"

using namespace pipescope::traces;
using pipescope::traces::detail::parse_with_sax;

TEST_CASE("reference parser: events, args and otherData", "[sax]") {
  const Trace t = parse_with_sax(R"({"otherData": {"format": "pipescope.trace/1", "schedule": "gpipe", "extra": [1, {"a": null}]},
    "traceEvents": [
      {"ph": "X", "name": "F", "pid": 0, "tid": 0, "ts": 100, "dur": 10,
       "args": {"stage": 0, "micro_batch": 2, "note": "x", "shape": [2, {"k": true}]}},
      {"ph": "X", "name": "RECV_F", "pid": 1, "tid": 2, "ts": 105, "dur": 5, "args": {"peer_rank": 0, "bytes": 64}}]})",
                                 "sax.json");
  REQUIRE(t.meta.schedule == "gpipe");
  REQUIRE(t.meta.extra == nlohmann::json::parse(R"({"extra": [1, {"a": null}]})"));
  REQUIRE(t.events.size() == 2);
  REQUIRE(t.events[0].stage == 0);
  REQUIRE(t.events[0].micro_batch == 2);
  REQUIRE(t.events[0].kind == EventKind::Forward);
  REQUIRE(t.events[1].kind == EventKind::RecvActivation);
  REQUIRE(t.events[1].peer_rank == 0);
  REQUIRE(t.events[1].bytes == 64);
  REQUIRE(t.events[1].ts_us == 5);
  REQUIRE(t.args.size() == 1);
  REQUIRE(t.args[0].event == 0);
  REQUIRE(nlohmann::json::parse(t.args[0].json) == nlohmann::json::parse(R"({"note": "x", "shape": [2, {"k": true}]})"));
}

TEST_CASE("reference parser: a bare array of events", "[sax]") {
  const Trace t = parse_with_sax(R"([{"ph": "X", "name": "W", "pid": 0, "tid": 0, "ts": 1, "dur": 2}])", "bare.json");
  REQUIRE(t.events.size() == 1);
  REQUIRE(t.events[0].kind == EventKind::BackwardWeight);
}

TEST_CASE("reference parser: refusals name the place", "[sax]") {
  REQUIRE_THROWS_WITH(parse_with_sax("{\"traceEvents\": [\n  x]}", "bad.json"),
                      Catch::StartsWith("bad.json: line 2, column 3: not valid JSON: "));
  REQUIRE_THROWS_WITH(parse_with_sax(R"({"traceEvents": [{"ph": "X")", "cut.json"),
                      Catch::StartsWith("cut.json: line 1, column 27: the file is truncated: "));
  REQUIRE_THROWS_WITH(parse_with_sax(R"({"traceEvents": [{"ph": "X", "name": "F", "ts": "soon"}]})", "type.json"),
                      "type.json: traceEvents[0] (\"F\"): field 'ts' must be a number");
  REQUIRE_THROWS_WITH(parse_with_sax(R"({"events": []})", "none.json"),
                      "none.json: not a trace: no traceEvents array in the top-level object");
}
