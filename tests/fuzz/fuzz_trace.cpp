// Fuzzes the trace reader (pipescope's format and plain Chrome traces, both parsers: simdjson's
// fast path and nlohmann's SAX reader behind it). Bad input must end in a TraceError and nothing
// else; a trace that reads must write, read back to the same events, and compare with itself.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "pipescope/traces/compare.hpp"
#include "pipescope/traces/trace_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipescope::traces;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Trace trace;
  try {
    trace = parse_trace(text, "fuzz.json");
  } catch (const TraceError&) {
    return 0;
  }
  (void)compare_traces(trace, trace, 5);
  std::string written;
  try {
    written = to_trace_json(trace);
  } catch (const TraceError&) {
    return 0;  // what the writer refuses (no ranks, ...), it says
  }
  const Trace again = parse_trace(written, "fuzz-rewrite.json");
  if (again.events.size() != trace.events.size() || again.memory.size() != trace.memory.size()) __builtin_trap();
  return 0;
}
