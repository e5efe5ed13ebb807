// The trace writer: Chrome Trace Event JSON written directly with fmt (a JSON document of a
// million events would cost seconds and gigabytes).
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "gzip.hpp"
#include "run_description_json.hpp"
#include "pipescope/core/atomic_file.hpp"
#include "pipescope/traces/trace_io.hpp"

namespace pipescope::traces {
namespace {

void append_json_string(fmt::memory_buffer& out, std::string_view text) {
  out.push_back('"');
  for (const char c : text) {
    switch (c) {
      case '"': out.append(std::string_view("\\\"")); break;
      case '\\': out.append(std::string_view("\\\\")); break;
      case '\n': out.append(std::string_view("\\n")); break;
      case '\r': out.append(std::string_view("\\r")); break;
      case '\t': out.append(std::string_view("\\t")); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<int>(c));
        else out.push_back(c);
    }
  }
  out.push_back('"');
}

void check_finite(double value, const char* what, std::size_t index) {
  if (!std::isfinite(value)) throw TraceError(fmt::format("cannot write trace: {} {} is not finite", what, index));
}

}  // namespace

std::string default_lane_name(int lane) {
  switch (lane) {
    case 0: return "compute";
    case 1: return "send";
    case 2: return "receive";
    case 3: return "collectives";
    default: return "lane " + std::to_string(lane);
  }
}

std::string default_category(std::string_view name) {
  if (name == "F" || name == "B" || name == "I" || name == "W" || name == "LOAD") return "compute";
  if (name.rfind("SEND_", 0) == 0 || name.rfind("RECV_", 0) == 0) return "p2p";
  if (name.rfind("REDUCE_", 0) == 0 || name == "OPTIMIZER") return "collective";
  return "other";
}

std::string to_trace_json(const Trace& trace) {
  double earliest = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    check_finite(e.ts_us, "ts of event", i);
    check_finite(e.dur_us, "dur of event", i);
    if (e.dur_us < 0) throw TraceError(fmt::format("cannot write trace: event {} (\"{}\") has a negative duration", i, e.name));
    earliest = std::min(earliest, e.ts_us);
  }
  for (std::size_t i = 0; i < trace.memory.size(); ++i) {
    check_finite(trace.memory[i].ts_us, "ts of memory sample", i);
    earliest = std::min(earliest, trace.memory[i].ts_us);
  }
  for (std::size_t i = 0; i < trace.flows.size(); ++i) {
    check_finite(trace.flows[i].from_ts_us, "start of flow", i);
    check_finite(trace.flows[i].to_ts_us, "end of flow", i);
  }
  const double shift = std::isfinite(earliest) ? earliest : 0.0;

  fmt::memory_buffer out;
  out.reserve(256 + trace.events.size() * 150 + trace.memory.size() * 80);
  auto put = [&out](std::string_view s) { out.append(s); };

  // otherData: the known fields first, then whatever else the producer kept.
  const TraceMeta& meta = trace.meta;
  put("{\"displayTimeUnit\": \"ns\",\n\"otherData\": {\"format\": ");
  append_json_string(out, meta.format.empty() ? "pipescope.trace/1" : meta.format);
  put(", \"source\": ");
  append_json_string(out, meta.source);
  put(", \"schedule\": ");
  append_json_string(out, meta.schedule);
  fmt::format_to(std::back_inserter(out), ", \"num_ranks\": {}, \"num_stages\": {}, \"num_micro_batches\": {}, \"iteration\": {}",
                 meta.num_ranks, meta.num_stages, meta.num_micro_batches, meta.iteration);
  // The run description and the extra fields, in one object's (sorted) key order.
  nlohmann::json other = meta.extra.is_object() ? meta.extra : nlohmann::json::object();
  put_run_description(meta.run, other);
  for (auto it = other.begin(); it != other.end(); ++it) {
    put(", ");
    append_json_string(out, it.key());
    put(": ");
    put(it.value().dump());
  }
  put("},\n\"traceEvents\": [\n");

  // Metadata: one process per rank, one thread per lane that is used (all four for ranks
  // without lane names, so Perfetto shows the same rows for every rank).
  const int ranks = trace.rank_count();
  std::vector<int> lanes_used(ranks, 0);
  for (const auto& e : trace.events) lanes_used[e.rank] = std::max(lanes_used[e.rank], e.lane + 1);
  bool first = true;
  auto next = [&] {
    if (!first) put(",\n");
    first = false;
  };
  for (int r = 0; r < ranks; ++r) {
    next();
    fmt::format_to(std::back_inserter(out), "{{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": {}, \"args\": {{\"name\": ", r);
    append_json_string(out, r < static_cast<int>(trace.rank_names.size()) && !trace.rank_names[r].empty()
                                ? trace.rank_names[r] : "rank " + std::to_string(r));
    put("}}");
    const bool has_names = r < static_cast<int>(trace.lane_names.size());
    const int lanes = std::max(lanes_used[r], has_names ? static_cast<int>(trace.lane_names[r].size()) : kNumLanes);
    for (int lane = 0; lane < lanes; ++lane) {
      next();
      fmt::format_to(std::back_inserter(out),
                     "{{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": {}, \"tid\": {}, \"args\": {{\"name\": ", r, lane);
      const bool named = has_names && lane < static_cast<int>(trace.lane_names[r].size()) && !trace.lane_names[r][lane].empty();
      append_json_string(out, named ? trace.lane_names[r][lane] : default_lane_name(lane));
      put("}}");
    }
  }

  for (const auto& e : trace.events) {
    next();
    put("{\"ph\": \"X\", \"name\": ");
    append_json_string(out, e.name);
    put(", \"cat\": ");
    append_json_string(out, e.category.empty() ? default_category(e.name) : e.category);
    fmt::format_to(std::back_inserter(out), ", \"pid\": {}, \"tid\": {}, \"ts\": {}, \"dur\": {}, \"args\": {{", e.rank, e.lane,
                   e.ts_us - shift, e.dur_us);
    bool first_arg = true;
    auto arg = [&](const char* key, std::int64_t value) {
      if (value < 0) return;
      fmt::format_to(std::back_inserter(out), "{}\"{}\": {}", first_arg ? "" : ", ", key, value);
      first_arg = false;
    };
    arg("stage", e.stage);
    arg("micro_batch", e.micro_batch);
    arg("peer_rank", e.peer_rank);
    arg("bytes", e.bytes);
    put("}}");
  }

  for (const auto& m : trace.memory) {
    next();
    fmt::format_to(std::back_inserter(out), "{{\"ph\": \"C\", \"name\": \"memory\", \"pid\": {}, \"ts\": {}, \"args\": {{\"bytes\": {}}}}}",
                   m.rank, m.ts_us - shift, m.bytes);
  }

  // Flow events bind to the enclosing slice ("s") and the slice that starts there ("f", bp e).
  for (std::size_t i = 0; i < trace.flows.size(); ++i) {
    const Flow& f = trace.flows[i];
    next();
    fmt::format_to(std::back_inserter(out),
                   "{{\"ph\": \"s\", \"name\": \"transfer\", \"cat\": \"flow\", \"id\": {}, \"pid\": {}, \"tid\": {}, \"ts\": {}}}", i,
                   f.from_rank, f.from_lane, f.from_ts_us - shift);
    next();
    fmt::format_to(std::back_inserter(out),
                   "{{\"ph\": \"f\", \"bp\": \"e\", \"name\": \"transfer\", \"cat\": \"flow\", \"id\": {}, \"pid\": {}, \"tid\": {}, \"ts\": {}}}",
                   i, f.to_rank, f.to_lane, f.to_ts_us - shift);
  }
  put("\n]}\n");
  return fmt::to_string(out);
}

void write_trace(const Trace& trace, const std::string& path) {
  std::string text = to_trace_json(trace);
  const bool gzipped = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (gzipped) text = detail::gzip(text);
  pipescope::write_file_atomic(path, text);
}

}  // namespace pipescope::traces
