// The reference parser of trace files (nlohmann's SAX parser feeding the trace assembler).
#pragma once

#include <string>
#include <string_view>

#include "pipescope/traces/trace.hpp"

namespace pipescope::traces::detail {

// Parses trace JSON text; throws TraceError naming `source` and the place (line and column for
// text that is not JSON, else the event and field).
Trace parse_with_sax(std::string_view json_text, const std::string& source);

}  // namespace pipescope::traces::detail
