// What one rank hands rank 0 for a traced step, through the rendezvous store: its events and
// memory samples on its own steady clock, the args of its all-to-all events, the backward split
// and expert-call probes (last step only) and the cores its threads ran on. Rank 0 builds its own
// record the same way, so every rank's part of the trace is assembled by one function.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipescope/traces/run_description.hpp"
#include "pipescope/traces/trace.hpp"

namespace pipescope::exec {

struct RankTraceRecord {
  std::vector<traces::TraceEvent> events;  // each event's kind follows from its name
  std::vector<traces::EventArgs> args;     // EventArgs::event indexes `events`
  std::vector<traces::MemorySample> memory;
  std::vector<traces::BackwardSplitProbe> backward_split_probe;
  std::vector<traces::ExpertCallProbe> expert_call_probe;  // empty for models without experts
  std::string cores;                                       // core_list of the cores the rank may run on
  std::string transport_cores;                             // likewise, the union over its transport's threads
};

// Objects with named keys, not positional arrays: a field added later is a key more. The
// reader derives each event's kind from its name, as every trace reader does.
void to_json(nlohmann::json& j, const RankTraceRecord& record);
void from_json(const nlohmann::json& j, RankTraceRecord& record);

// Appends the record's events, args and memory samples to `trace` (args re-indexed to the
// trace's events).
void append_rank_trace(traces::Trace& trace, const RankTraceRecord& record);

}  // namespace pipescope::exec
