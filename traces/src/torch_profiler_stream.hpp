// The fast path of the torch reader: one pass over a torch.profiler file's text that fills the
// compact event store (torch_profiler_events.hpp) event by event, with simdjson's on-demand
// parser on each event's own text: no document of the file, no index of its whole text. It
// holds every event to load_rank_file's rules, and gives way to the reference parser
// (torch_profiler_document.cpp) for anything it is not sure of, an event a rule refuses
// included: that parser then says what and where, as it always did. Private to the traces library.
#pragma once

#include <functional>
#include <string_view>

#include "file_progress.hpp"
#include "file_text.hpp"
#include "torch_profiler_files.hpp"

namespace pipescope::traces::detail {

// Fills `f`'s header fields (rank, world size, host), recorded time span and events from
// `text` (the whole JSON, kTextPadding readable bytes after it). False when it gives way (a
// build without simdjson too): then `f` holds part of the file and must be filled again.
// `progress` hears where the pass is every few thousand events (ReadCancelled goes through);
// `passed` hears how far into the text the pass is, so what lies before may be dropped.
bool read_torch_text_fast(std::string_view text, RankFile& f, FileProgress& progress,
                          const std::function<void(std::uint64_t)>& passed);
// The same from a text that comes by chunks (a gzip file inflated as it is read; a UTF-8 byte
// order mark skipped): only the event being read is held.
bool read_torch_chunks_fast(TextChunks& chunks, RankFile& f, FileProgress& progress);

// load_rank_file's reading of the header (rank, world size and host from distributedInfo and
// host_name of `doc`, an object), shared by both paths. Throws TraceError naming the field.
void read_torch_header(const nlohmann::json& doc, RankFile& f);

}  // namespace pipescope::traces::detail
