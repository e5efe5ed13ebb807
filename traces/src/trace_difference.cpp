#include "pipescope/traces/trace_difference.hpp"

#include <cstddef>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "run_description_json.hpp"

namespace pipescope::traces {
namespace {

// Compares field by field, keeping the first difference found.
class DifferenceFinder {
 public:
  template <class T>
  void field(const std::string& where, const T& a, const T& b) {
    if (found_ || a == b) return;
    std::ostringstream text;
    text << where << ": " << printable(a) << " vs " << printable(b);
    found_ = text.str();
  }
  // Sizes first, then element by element.
  template <class T, class Each>
  void list(const std::string& where, const std::vector<T>& a, const std::vector<T>& b, Each each) {
    field(where + ".size()", a.size(), b.size());
    for (std::size_t i = 0; !found_ && i < a.size(); ++i) each(fmt::format("{}[{}]", where, i), a[i], b[i]);
  }
  const std::optional<std::string>& found() const { return found_; }

 private:
  template <class T>
  static const T& printable(const T& v) { return v; }
  static std::string printable(const nlohmann::json& v) { return v.dump(); }
  static std::string printable(EventKind k) { return std::string(event_kind_name(k)) + " (kind)"; }
  static std::string printable(const std::vector<std::string>& v) { return nlohmann::json(v).dump(); }
  static std::string printable(const RunDescription& r) {
    nlohmann::json j = nlohmann::json::object();
    put_run_description(r, j);
    return j.dump();
  }

  std::optional<std::string> found_;
};

void compare_meta(DifferenceFinder& d, const TraceMeta& a, const TraceMeta& b) {
  d.field("meta.format", a.format, b.format);
  d.field("meta.source", a.source, b.source);
  d.field("meta.schedule", a.schedule, b.schedule);
  d.field("meta.num_ranks", a.num_ranks, b.num_ranks);
  d.field("meta.num_stages", a.num_stages, b.num_stages);
  d.field("meta.num_micro_batches", a.num_micro_batches, b.num_micro_batches);
  d.field("meta.iteration", a.iteration, b.iteration);
  d.field("meta.run", a.run, b.run);
  d.field("meta.extra", a.extra, b.extra);
}

void compare_events(DifferenceFinder& d, const std::vector<TraceEvent>& a, const std::vector<TraceEvent>& b) {
  d.list("events", a, b, [&](const std::string& w, const TraceEvent& x, const TraceEvent& y) {
    d.field(w + ".rank", x.rank, y.rank);
    d.field(w + ".lane", x.lane, y.lane);
    d.field(w + ".name", x.name, y.name);
    d.field(w + ".kind", x.kind, y.kind);
    d.field(w + ".category", x.category, y.category);
    d.field(w + ".ts_us", x.ts_us, y.ts_us);
    d.field(w + ".dur_us", x.dur_us, y.dur_us);
    d.field(w + ".stage", x.stage, y.stage);
    d.field(w + ".micro_batch", x.micro_batch, y.micro_batch);
    d.field(w + ".peer_rank", x.peer_rank, y.peer_rank);
    d.field(w + ".bytes", x.bytes, y.bytes);
  });
}

}  // namespace

std::optional<std::string> trace_difference(const Trace& a, const Trace& b) {
  DifferenceFinder d;
  compare_meta(d, a.meta, b.meta);
  d.list("rank_names", a.rank_names, b.rank_names,
         [&](const std::string& w, const std::string& x, const std::string& y) { d.field(w, x, y); });
  d.list("lane_names", a.lane_names, b.lane_names,
         [&](const std::string& w, const std::vector<std::string>& x, const std::vector<std::string>& y) { d.field(w, x, y); });
  compare_events(d, a.events, b.events);
  d.list("memory", a.memory, b.memory, [&](const std::string& w, const MemorySample& x, const MemorySample& y) {
    d.field(w + ".rank", x.rank, y.rank);
    d.field(w + ".ts_us", x.ts_us, y.ts_us);
    d.field(w + ".bytes", x.bytes, y.bytes);
  });
  d.list("flows", a.flows, b.flows, [&](const std::string& w, const Flow& x, const Flow& y) {
    d.field(w + ".from_rank", x.from_rank, y.from_rank);
    d.field(w + ".from_lane", x.from_lane, y.from_lane);
    d.field(w + ".from_ts_us", x.from_ts_us, y.from_ts_us);
    d.field(w + ".to_rank", x.to_rank, y.to_rank);
    d.field(w + ".to_lane", x.to_lane, y.to_lane);
    d.field(w + ".to_ts_us", x.to_ts_us, y.to_ts_us);
  });
  d.list("instants", a.instants, b.instants, [&](const std::string& w, const InstantEvent& x, const InstantEvent& y) {
    d.field(w + ".rank", x.rank, y.rank);
    d.field(w + ".lane", x.lane, y.lane);
    d.field(w + ".ts_us", x.ts_us, y.ts_us);
    d.field(w + ".name", x.name, y.name);
  });
  d.list("counters", a.counters, b.counters, [&](const std::string& w, const CounterSample& x, const CounterSample& y) {
    d.field(w + ".rank", x.rank, y.rank);
    d.field(w + ".name", x.name, y.name);
    d.field(w + ".ts_us", x.ts_us, y.ts_us);
    d.field(w + ".value", x.value, y.value);
  });
  d.list("args", a.args, b.args, [&](const std::string& w, const EventArgs& x, const EventArgs& y) {
    d.field(w + ".event", x.event, y.event);
    d.field(w + ".json", x.json, y.json);
  });
  return d.found();
}

}  // namespace pipescope::traces
