// The fast path of the trace reader (simdjson's on-demand parser).
#pragma once

#include <string_view>

#include "file_progress.hpp"
#include "trace_assembler.hpp"

namespace pipescope::traces::detail {

// Reads the text's events into `assembler`; false when the fast path gives way to the reference
// parser (anything it is not sure of, or a build without simdjson): then `assembler` holds part
// of the events and must be dropped. `text_is_padded`: kPadding readable bytes follow the text,
// so it need not be copied. `progress` (may be null) hears where the reading is every few
// thousand events; ReadCancelled from it goes through.
bool read_with_simdjson(std::string_view text, bool text_is_padded, TraceAssembler& assembler,
                        FileProgress* progress = nullptr);
// Whether this build has the fast path.
bool have_simdjson();

}  // namespace pipescope::traces::detail
