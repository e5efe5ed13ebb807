// Where two traces differ, field by field: what holds the trace readers to one meaning (the
// fast path against the reference parser, in tests and in tests/fuzz/fuzz_trace_parsers.cpp).
#pragma once

#include <optional>
#include <string>

#include "pipescope/traces/trace.hpp"

namespace pipescope::traces {

// The first difference ("events[3].dur_us: 5 vs 6", "meta.extra: {...} vs {...}"), or nothing
// when every field of the two is equal (numbers exactly, otherData as JSON values).
std::optional<std::string> trace_difference(const Trace& a, const Trace& b);

}  // namespace pipescope::traces
