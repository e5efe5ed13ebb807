// A torch.profiler trace's JSON as a document that keeps of each event only what the torch
// reader reads (torch_profiler_files.cpp checks it, torch_profiler_reader.cpp makes the events):
// a kernel's occupancy figures, an operator's strides and concrete inputs, ids and flags would
// otherwise hold several times the file's size in memory. Private to the traces library.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "file_progress.hpp"

namespace pipescope::traces::detail {

// Parses `text` (the whole file; nlohmann's parser, so an error is the same json::exception as
// json::parse's, naming line and column). Every value is parsed and every event stays, in order
// (their indices name them in messages), but of traceEvents[i] only ph, name, cat, pid, tid,
// ts, dur and args are kept, of its args only correlation, Input Dims, Input type, Device Type
// and Total Allocated, and an event that is neither complete ("X") nor a `[memory]` sample keeps
// ph, name, pid and tid alone. `progress` hears where the parse is every few thousand events.
nlohmann::json parse_torch_document(std::string_view text, FileProgress& progress);

}  // namespace pipescope::traces::detail
