// The fast path (traces/src/trace_simdjson.cpp): where it reads a text, it reads it as the
// reference parser does (same events, args, otherData); it gives way (false) for what it is not
// sure of: an escaped key, a pid written as 2.0, a second top-level value, no traceEvents, an
// event the assembler refuses. Without simdjson in the build it always gives way.
#include <catch2/catch.hpp>

#include "trace_sax.hpp"
#include "trace_simdjson.hpp"
#include "pipescope/traces/trace_difference.hpp"

using namespace pipescope::traces;
using namespace pipescope::traces::detail;

namespace {

bool fast_reads(const std::string& text) {
  TraceAssembler assembler("fast.json");
  return read_with_simdjson(text, false, assembler);
}

}  // namespace

TEST_CASE("fast path: reads what the reference parser reads, to the same trace", "[simdjson]") {
  const std::string text = R"({"traceEvents": [
      {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "rank zero"}},
      {"ph": "X", "name": "F", "pid": 0, "tid": 0, "ts": 100, "dur": 10,
       "args": {"stage": 0, "micro_batch": 2, "note": "x", "shape": [2, {"k": true}], "load": 0.5}},
      {"ph": "C", "name": "memory", "pid": 0, "ts": 100, "args": {"bytes": 2048}},
      {"ph": "X", "name": "SEND_F", "pid": 0, "tid": 1, "ts": 110, "dur": 1, "args": {"peer_rank": 1, "bytes": 64}}],
    "otherData": {"format": "pipescope.trace/1", "num_ranks": 2, "big": 18446744073709551615, "f": 1.5}})";
  TraceAssembler assembler("same.json");
  if (!have_simdjson()) {
    REQUIRE_FALSE(read_with_simdjson(text, false, assembler));
    return;
  }
  REQUIRE(read_with_simdjson(text, false, assembler));
  const Trace fast = assembler.finish();
  const Trace reference = parse_with_sax(text, "same.json");
  REQUIRE(fast.events.size() == 2);
  REQUIRE(fast.events[1].kind == EventKind::SendActivation);
  const auto difference = trace_difference(fast, reference);
  INFO(difference.value_or("none"));
  REQUIRE_FALSE(difference);
}

TEST_CASE("fast path: gives way for what it is not sure of", "[simdjson]") {
  REQUIRE_FALSE(fast_reads(R"({"traceEvents": [{"ph": "X", "n\u0061me": "F", "pid": 0, "tid": 0, "ts": 0, "dur": 1}]})"));
  REQUIRE_FALSE(fast_reads(R"({"traceEvents": [{"ph": "X", "name": "F", "pid": 2.0, "tid": 0, "ts": 0, "dur": 1}]})"));
  REQUIRE_FALSE(fast_reads(R"({"traceEvents": []} {})"));
  REQUIRE_FALSE(fast_reads(R"({"events": []})"));
  REQUIRE_FALSE(fast_reads(R"({"traceEvents": [{"name": "F", "pid": 0, "tid": 0, "ts": 0, "dur": 1}]})"));
  if (have_simdjson()) REQUIRE(fast_reads(R"({"traceEvents": [{"ph": "X", "name": "F", "pid": 0, "tid": 0, "ts": 0, "dur": 1}]})"));
}
