// The trace writer: Chrome Trace Event JSON written directly with fmt (a JSON document of a
// million events would cost seconds and gigabytes).
#include <algorithm>
#include <cctype>
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
        if (static_cast<unsigned char>(c) < 0x20)
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<int>(c));
        else
          out.push_back(c);
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
    case 4: return "all-to-all";
    default: return "lane " + std::to_string(lane);
  }
}

std::string default_category(EventKind kind) { return std::string(event_kind_category(kind)); }

namespace {

// The shift that puts the earliest written time at 0; refuses times that are not finite and
// negative durations.
double time_shift(const Trace& trace) {
  double earliest = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    check_finite(e.ts_us, "ts of event", i);
    check_finite(e.dur_us, "dur of event", i);
    if (e.dur_us < 0)
      throw TraceError(fmt::format("cannot write trace: event {} (\"{}\") has a negative duration", i, e.name));
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
  return std::isfinite(earliest) ? earliest : 0.0;
}

// otherData: the known fields first, then whatever else the producer kept.
void append_other_data(fmt::memory_buffer& out, const TraceMeta& meta) {
  auto put = [&out](std::string_view s) { out.append(s); };
  put("{\"displayTimeUnit\": \"ns\",\n\"otherData\": {\"format\": ");
  append_json_string(out, meta.format.empty() ? "pipescope.trace/1" : meta.format);
  put(", \"source\": ");
  append_json_string(out, meta.source);
  put(", \"schedule\": ");
  append_json_string(out, meta.schedule);
  fmt::format_to(std::back_inserter(out),
                 ", \"num_ranks\": {}, \"num_stages\": {}, \"num_micro_batches\": {}, \"iteration\": {}",
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
}

// The elements of traceEvents, one after the other with commas between them.
class EventList {
 public:
  explicit EventList(fmt::memory_buffer& out) : out_(out) {}
  // The buffer, ready for the next element.
  fmt::memory_buffer& next() {
    if (!first_) out_.append(std::string_view(",\n"));
    first_ = false;
    return out_;
  }

 private:
  fmt::memory_buffer& out_;
  bool first_ = true;
};

// Metadata: one process per rank, one thread per lane that is used (at least compute to
// collectives for ranks without lane names, so Perfetto shows the same rows for every rank).
void append_metadata(EventList& list, const Trace& trace) {
  const int ranks = trace.rank_count();
  std::vector<int> lanes_used(ranks, 0);
  for (const auto& e : trace.events) lanes_used[e.rank] = std::max(lanes_used[e.rank], e.lane + 1);
  for (int r = 0; r < ranks; ++r) {
    fmt::memory_buffer& out = list.next();
    fmt::format_to(std::back_inserter(out),
                   "{{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": {}, \"args\": {{\"name\": ", r);
    append_json_string(out, r < static_cast<int>(trace.rank_names.size()) && !trace.rank_names[r].empty()
                                ? trace.rank_names[r]
                                : "rank " + std::to_string(r));
    out.append(std::string_view("}}"));
    const bool has_names = r < static_cast<int>(trace.lane_names.size());
    const int lanes =
        std::max(lanes_used[r], has_names ? static_cast<int>(trace.lane_names[r].size()) : kEveryRankLanes);
    for (int lane = 0; lane < lanes; ++lane) {
      list.next();
      fmt::format_to(std::back_inserter(out),
                     "{{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": {}, \"tid\": {}, \"args\": {{\"name\": ", r,
                     lane);
      const bool named =
          has_names && lane < static_cast<int>(trace.lane_names[r].size()) && !trace.lane_names[r][lane].empty();
      append_json_string(out, named ? trace.lane_names[r][lane] : default_lane_name(lane));
      out.append(std::string_view("}}"));
    }
  }
}

// The members of an EventArgs object ("{...}" less its braces), or empty when it has none.
std::string_view object_members(std::string_view json) {
  const auto open = json.find('{');
  const auto close = json.rfind('}');
  if (open == std::string_view::npos || close == std::string_view::npos || close <= open) return {};
  std::string_view inner = json.substr(open + 1, close - open - 1);
  while (!inner.empty() && std::isspace(static_cast<unsigned char>(inner.front()))) inner.remove_prefix(1);
  while (!inner.empty() && std::isspace(static_cast<unsigned char>(inner.back()))) inner.remove_suffix(1);
  return inner;
}

void append_events(EventList& list, const Trace& trace, double shift) {
  // The args the typed fields do not hold (a plain trace's own, pprun's all-to-all details) go
  // back beside them, so that what was read is written again.
  std::vector<std::string_view> other_args;
  if (!trace.args.empty()) {
    other_args.resize(trace.events.size());
    for (const auto& a : trace.args)
      if (a.event < other_args.size()) other_args[a.event] = object_members(a.json);
  }
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    fmt::memory_buffer& out = list.next();
    out.append(std::string_view("{\"ph\": \"X\", \"name\": "));
    append_json_string(out, e.name);
    out.append(std::string_view(", \"cat\": "));
    append_json_string(out, e.category.empty() ? default_category(e.kind) : e.category);
    fmt::format_to(std::back_inserter(out), ", \"pid\": {}, \"tid\": {}, \"ts\": {}, \"dur\": {}, \"args\": {{", e.rank,
                   e.lane, e.ts_us - shift, e.dur_us);
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
    if (!other_args.empty() && !other_args[i].empty()) {
      if (!first_arg) out.append(std::string_view(", "));
      out.append(other_args[i]);
    }
    out.append(std::string_view("}}"));
  }
}

void append_memory_and_flows(EventList& list, const Trace& trace, double shift) {
  for (const auto& m : trace.memory) {
    fmt::format_to(std::back_inserter(list.next()),
                   "{{\"ph\": \"C\", \"name\": \"memory\", \"pid\": {}, \"ts\": {}, \"args\": {{\"bytes\": {}}}}}",
                   m.rank, m.ts_us - shift, m.bytes);
  }
  // Flow events bind to the enclosing slice ("s") and the slice that starts there ("f", bp e).
  for (std::size_t i = 0; i < trace.flows.size(); ++i) {
    const Flow& f = trace.flows[i];
    fmt::format_to(std::back_inserter(list.next()),
                   "{{\"ph\": \"s\", \"name\": \"transfer\", \"cat\": \"flow\", \"id\": {}, \"pid\": {}, \"tid\": {}, "
                   "\"ts\": {}}}",
                   i, f.from_rank, f.from_lane, f.from_ts_us - shift);
    fmt::format_to(std::back_inserter(list.next()),
                   "{{\"ph\": \"f\", \"bp\": \"e\", \"name\": \"transfer\", \"cat\": \"flow\", \"id\": {}, \"pid\": "
                   "{}, \"tid\": {}, \"ts\": {}}}",
                   i, f.to_rank, f.to_lane, f.to_ts_us - shift);
  }
}

}  // namespace

std::string to_trace_json(const Trace& trace) {
  const double shift = time_shift(trace);
  fmt::memory_buffer out;
  out.reserve(256 + trace.events.size() * 150 + trace.memory.size() * 80);
  append_other_data(out, trace.meta);
  EventList list(out);
  append_metadata(list, trace);
  append_events(list, trace, shift);
  append_memory_and_flows(list, trace, shift);
  out.append(std::string_view("\n]}\n"));
  return fmt::to_string(out);
}

void write_trace(const Trace& trace, const std::string& path) {
  std::string text = to_trace_json(trace);
  const bool gzipped = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (gzipped) text = detail::gzip(text);
  pipescope::write_file_atomic(path, text);
}

}  // namespace pipescope::traces
