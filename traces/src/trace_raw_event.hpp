// What the trace parsers hand the trace assembler (trace_assembler.hpp): one event as it is
// written, its fields typed but not yet interpreted. The nlohmann SAX parser (trace_sax.cpp)
// and the simdjson fast path (trace_simdjson.cpp) both fill a PendingEvent and pass it on, so
// what an event means is decided once, by the assembler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pipescope/traces/trace.hpp"

namespace pipescope::traces::detail {

// The parser reads a little past the end of the text (SIMDJSON_PADDING bytes); reading the
// file into a buffer that has them saves copying the whole text once more.
inline constexpr std::size_t kPadding = 64;

// A pid or tid as written: Chrome traces allow numbers and strings.
struct RawId {
  bool is_text = false;
  std::int64_t number = 0;
  std::string text;
  bool operator<(const RawId& o) const {
    if (is_text != o.is_text) return !is_text;
    return is_text ? text < o.text : number < o.number;
  }
};


// The fields of an event and of its args that the trace reads.
enum class Field {
  None, Ph, Name, Cat, Pid, Tid, Ts, Dur, Id, Args,
  ArgStage, ArgMicroBatch, ArgPeerRank, ArgBytes, ArgName, ArgOther
};

inline Field event_field(std::string_view key) {
  switch (key.size()) {
    case 2:
      if (key == "ph") return Field::Ph;
      if (key == "ts") return Field::Ts;
      if (key == "id") return Field::Id;
      break;
    case 3:
      if (key == "pid") return Field::Pid;
      if (key == "tid") return Field::Tid;
      if (key == "cat") return Field::Cat;
      if (key == "dur") return Field::Dur;
      break;
    case 4:
      if (key == "name") return Field::Name;
      if (key == "args") return Field::Args;
      break;
    default: break;
  }
  return Field::None;
}

inline Field arg_field(std::string_view key) {
  if (key == "stage") return Field::ArgStage;
  if (key == "micro_batch") return Field::ArgMicroBatch;
  if (key == "peer_rank") return Field::ArgPeerRank;
  if (key == "bytes") return Field::ArgBytes;
  if (key == "name") return Field::ArgName;
  return Field::ArgOther;
}

// One event as it is being read.
struct PendingEvent {
  std::string ph, name, cat, id_text, arg_name;
  std::optional<RawId> pid, tid;
  std::optional<double> ts, dur;
  std::int64_t stage = -1, micro_batch = -1, peer_rank = -1, bytes = -1;
  std::optional<double> first_numeric_arg;  // counters in plain traces
  // Counter values by key, and the args the typed fields do not hold as JSON object members
  // ("key": value, ...): what plain traces show in the details.
  std::vector<std::pair<std::string, double>> numeric_args;
  std::string other_args;
  bool has_id = false;
  void reset() {
    ph.clear(); name.clear(); cat.clear(); id_text.clear(); arg_name.clear();
    pid.reset(); tid.reset(); ts.reset(); dur.reset();
    stage = micro_batch = peer_rank = bytes = -1;
    first_numeric_arg.reset();
    numeric_args.clear();
    other_args.clear();
    has_id = false;
  }
  void add_other_arg(std::string_view key, const std::string& value_json) {
    if (!other_args.empty()) other_args += ", ";
    other_args += nlohmann::json(std::string(key)).dump();
    other_args += ": ";
    other_args += value_json;
  }
  // The args object of an event that has args beyond the typed fields; empty otherwise.
  // A non-metadata event's args.name is one of them.
  std::string args_json() const {
    if (other_args.empty() && arg_name.empty()) return {};
    std::string text = "{";
    if (!arg_name.empty()) text += "\"name\": " + nlohmann::json(arg_name).dump() + (other_args.empty() ? "" : ", ");
    return text + other_args + "}";
  }
};

// The one form of an error in an event: the file, the event's index and name, what is wrong.
[[noreturn]] inline void throw_event_error(const std::string& source, std::size_t index, const std::string& name,
                                           const std::string& what) {
  throw TraceError(fmt::format("{}: traceEvents[{}]{}: {}", source, index,
                               name.empty() ? "" : fmt::format(" (\"{}\")", name), what));
}

}  // namespace pipescope::traces::detail
