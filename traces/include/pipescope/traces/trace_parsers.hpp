// The two parsers behind parse_trace (trace_io.hpp), each on its own: the reference parser
// (nlohmann's SAX parser) and the fast path (simdjson's on-demand parser, where the build has
// simdjson). Both feed one trace assembler, so a text both accept must give one trace; the
// tests and the fuzzer tests/fuzz/fuzz_trace_parsers.cpp hold them to that.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "pipescope/traces/trace.hpp"

namespace pipescope::traces {

// What parse_trace gives when the fast path gives way: the trace, or TraceError naming the place.
Trace parse_trace_reference(std::string_view json_text, const std::string& source);

// The fast path alone: nothing when it gives way to the reference parser (anything it is not
// sure of; always, without simdjson). Throws TraceError for a text it read whose events do not
// make a trace (a slice left open, bad otherData, ...), as parse_trace does.
std::optional<Trace> parse_trace_fast(std::string_view json_text, const std::string& source);

// Whether this build has the fast path.
bool have_fast_trace_parser();

}  // namespace pipescope::traces
