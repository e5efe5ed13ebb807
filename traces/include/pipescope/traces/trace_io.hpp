// Reading and writing trace files (SPEC.md section 5): Chrome Trace Event JSON, plain or
// gzip-compressed. Readers also take plain Chrome / Perfetto / PyTorch profiler traces, using
// `name`, `pid` and `tid` when the pipescope fields are missing.
#pragma once

#include <string>
#include <string_view>

#include "pipescope/traces/read_progress.hpp"
#include "pipescope/traces/trace.hpp"

namespace pipescope::traces {

// Reads a `.json` or `.json.gz` trace (gzip is recognised by its magic bytes, whatever the
// name). Throws TraceError naming the file and the place (line and column, or the event) for
// input that is not JSON, has wrong types, is truncated or empty.
Trace read_trace(const std::string& path);
// The same, reporting to `progress` (may be null) as it reads; throws ReadCancelled when
// progress->cancel_requested is set.
Trace read_trace(const std::string& path, ReadProgress* progress);

// Parses trace JSON text; `source` names it in error messages (usually the file name).
// Times are shifted so that the earliest event is at 0. A plain Chrome trace (no
// otherData.format) gets its pids and tids renumbered densely in ascending order; the
// original ids stay visible in rank_names / lane_names.
Trace parse_trace(std::string_view json_text, const std::string& source);

// The file content: process_name/thread_name metadata, X events with args
// stage/micro_batch/peer_rank/bytes, C `memory` counters, s/f flow events and otherData.
// Times are shifted so that the earliest written time is 0. Throws TraceError for
// non-finite times or negative durations.
std::string to_trace_json(const Trace& trace);

// Writes to_trace_json atomically (never a partial file); gzip when the path ends in `.gz`.
void write_trace(const Trace& trace, const std::string& path);

// The conventional lane names: compute, send, receive, collectives, all-to-all ("lane N" after).
std::string default_lane_name(int lane);

// The category written for an event without one: compute, p2p, collective, wait, sharding
// or other (event_kind_category).
std::string default_category(EventKind kind);

}  // namespace pipescope::traces
