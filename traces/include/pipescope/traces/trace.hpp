// The trace: one iteration of one run, predicted (sim) or measured (exec), as one value type.
// sim and exec produce it, gui and `ppsim compare` only read it. On disk it is a Chrome Trace
// Event JSON file (SPEC.md section 5) that Perfetto and chrome://tracing open unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipescope/traces/event_kind.hpp"
#include "pipescope/traces/run_description.hpp"

namespace pipescope::traces {

struct TimeRange {
  double start_us = 0;
  double end_us = 0;
  double duration_us() const { return end_us - start_us; }
  bool contains(double t_us) const { return t_us >= start_us && t_us < end_us; }
};

// One complete ("X") event. `name` is what the file says (F, B, I, W, SEND_F, RECV_F, SEND_B,
// RECV_B, REDUCE_GRAD, REDUCE_TIED, OPTIMIZER, LOAD, or any name, for plain Chrome traces);
// `kind` is that name parsed once (event_kind.hpp), by the reader or whoever makes the event:
// code asks the kind, never the name.
struct TraceEvent {
  int rank = 0;  // pid
  int lane = 0;  // tid
  std::string name;
  EventKind kind = EventKind::Other;
  std::string category;  // "compute", "p2p", "collective", ...
  double ts_us = 0;      // start, microseconds from the start of the iteration
  double dur_us = 0;
  int stage = -1;           // -1 when absent
  int micro_batch = -1;     // -1 when absent
  int peer_rank = -1;       // transfers only
  std::int64_t bytes = -1;  // transfers only
  double end_us() const { return ts_us + dur_us; }
  TimeRange range() const { return {ts_us, ts_us + dur_us}; }
};

// A `memory` counter sample: bytes held on `rank` from `ts_us` on.
struct MemorySample {
  int rank = 0;
  double ts_us = 0;
  std::int64_t bytes = 0;
};

// A send-to-receive link (flow events "s"/"f").
struct Flow {
  int from_rank = 0;
  int from_lane = 0;
  double from_ts_us = 0;
  int to_rank = 0;
  int to_lane = 0;
  double to_ts_us = 0;
};

// An instant event (Chrome "ph": "i"): a mark at one time, from plain traces.
struct InstantEvent {
  int rank = 0;
  int lane = -1;  // the lane of its thread, or -1 for the whole rank (a thread without slices)
  double ts_us = 0;
  std::string name;
};

// A sample of a counter other than `memory` (Chrome "ph": "C"), from plain traces: one
// series per counter name and value key ("name" alone when the counter holds one value or
// the key is the name or "value", else "name.key").
struct CounterSample {
  int rank = 0;
  std::string name;
  double ts_us = 0;
  double value = 0;
};

// The args of an event that the typed fields do not hold (all but stage, micro_batch,
// peer_rank and bytes), as the text of a JSON object: what a plain trace's details show.
struct EventArgs {
  std::size_t event = 0;  // index into Trace::events
  std::string json;
};

struct TraceMeta {
  std::string format = "pipescope.trace/1";
  std::string source;  // "predicted" or "measured" (empty for plain Chrome traces)
  std::string schedule;
  int num_ranks = 0;
  int num_stages = 0;
  int num_micro_batches = 0;
  int iteration = 0;
  RunDescription run;                               // the run's otherData fields, typed
  nlohmann::json extra = nlohmann::json::object();  // other otherData fields, kept
};

struct Trace {
  TraceMeta meta;
  std::vector<std::string> rank_names;  // from process_name metadata; may be empty
  // lane_names[rank][lane] from thread_name metadata; may be empty (then the lanes are the
  // ones of SPEC.md section 5, see default_lane_name in trace_io.hpp).
  std::vector<std::vector<std::string>> lane_names;
  std::vector<TraceEvent> events;
  std::vector<MemorySample> memory;
  std::vector<Flow> flows;
  std::vector<InstantEvent> instants;
  std::vector<CounterSample> counters;
  std::vector<EventArgs> args;  // sorted by event; only events that have such args

  // The other args of an event (JSON object text), or nullptr when it has none.
  const std::string* args_of(std::size_t event) const;
  int rank_count() const;  // max(meta.num_ranks, 1 + highest rank seen)
  double end_us() const;   // the latest event end
};

// A trace file that cannot be read: the message names the file and the place.
class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace pipescope::traces
