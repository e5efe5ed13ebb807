#include "trace_assembler.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "run_description_json.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "pipescope/traces/trace_limits.hpp"

namespace pipescope::traces::detail {
namespace {

using json = nlohmann::json;

// Ranks and lanes of a pipescope trace are used as row indices; anything larger is a broken file.
constexpr std::int64_t kMaxRank = 1 << 20;
constexpr std::int64_t kMaxLane = 1 << 10;

int meta_int(const json& other, const char* key, const std::string& source) {
  auto it = other.find(key);
  if (it == other.end() || it->is_null()) return 0;
  const bool fits = it->is_number_unsigned() ? it->get<std::uint64_t>() <= static_cast<std::uint64_t>(INT_MAX)
                                             : it->is_number_integer() && it->get<std::int64_t>() >= INT_MIN &&
                                                   it->get<std::int64_t>() <= INT_MAX;
  if (!fits)
    throw TraceError(fmt::format("{}: otherData.{} must be an integer ({}..{})", source, key, INT_MIN, INT_MAX));
  return it->get<int>();
}

std::string meta_string(const json& other, const char* key, const std::string& source) {
  auto it = other.find(key);
  if (it == other.end() || it->is_null()) return {};
  if (!it->is_string()) throw TraceError(fmt::format("{}: otherData.{} must be a string", source, key));
  return it->get<std::string>();
}

// The position of each id in ascending order of the ids: plain traces number ranks and lanes so.
std::vector<int> dense_order(const std::vector<RawId>& ids) {
  std::vector<int> order(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return ids[a] < ids[b]; });
  std::vector<int> position(ids.size());
  for (std::size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<int>(i);
  return position;
}

std::string raw_text(const RawId& id) { return id.is_text ? id.text : std::to_string(id.number); }

}  // namespace

int TraceAssembler::lane_index(int pid_index, const RawId& tid) {
  if (static_cast<std::size_t>(pid_index) >= tids_per_pid_.size()) tids_per_pid_.resize(pid_index + 1);
  return tids_per_pid_[pid_index].intern(tid);
}

void TraceAssembler::add_event(PendingEvent& e) {
  if (e.ph.empty()) event_error(e, "field 'ph' is missing");
  const char phase = e.ph.size() == 1 ? e.ph[0] : '?';
  if (phase == 'M') {
    if (e.pid) {
      const int pid_index = pids_.intern(*e.pid);
      if (e.name == "process_name") process_names_[pid_index] = e.arg_name;
      if (e.name == "thread_name" && e.tid) thread_names_[{pid_index, lane_index(pid_index, *e.tid)}] = e.arg_name;
    }
    ++event_index_;
    return;
  }
  if (phase != 'X' && phase != 'B' && phase != 'E' && phase != 'C' && phase != 's' && phase != 'f' && phase != 't' &&
      phase != 'i' && phase != 'I') {
    ++event_index_;
    return;  // object snapshots, samples, async events ...: not part of a timeline of lanes
  }
  if (!e.ts) event_error(e, "field 'ts' is missing");
  if (auto problem = timestamp_problem(*e.ts)) event_error(e, "field 'ts' " + *problem);
  if (!e.pid) e.pid = RawId{false, 0, {}};
  if (!e.tid) e.tid = RawId{false, 0, {}};
  const int pid_index = pids_.intern(*e.pid);
  switch (phase) {
    case 'X': add_complete(e, pid_index); break;
    case 'i':
    case 'I':
      // Its lane is found in finish(): a mark does not make a lane of its own.
      trace_.instants.push_back({pid_index, -1, *e.ts, std::move(e.name)});
      instant_tids_.push_back(std::move(*e.tid));
      break;
    case 'B': add_begin(e, pid_index); break;
    case 'E': add_end(e, pid_index); break;
    case 'C': add_counter(e, pid_index); break;
    default: add_flow_end(e, phase, pid_index); break;  // 's', 'f', 't'
  }
  ++event_index_;
}

// What a complete ("X") and a begin ("B") event share: all but the duration.
TraceEvent TraceAssembler::slice_event(PendingEvent& e, int pid_index) {
  TraceEvent out;
  out.rank = pid_index;
  out.lane = lane_index(pid_index, *e.tid);
  out.name = std::move(e.name);
  out.kind = event_kind_from_name(out.name);
  out.category = std::move(e.cat);
  out.ts_us = *e.ts;
  out.stage = static_cast<int>(e.stage);
  out.micro_batch = static_cast<int>(e.micro_batch);
  out.peer_rank = static_cast<int>(e.peer_rank);
  out.bytes = e.bytes;
  return out;
}

void TraceAssembler::add_complete(PendingEvent& e, int pid_index) {
  if (!e.dur) event_error(e, "field 'dur' is missing");
  if (auto problem = duration_problem(*e.dur)) event_error(e, "field 'dur' " + *problem);
  TraceEvent out = slice_event(e, pid_index);
  out.dur_us = *e.dur;
  add_args(e.args_json());
  trace_.events.push_back(std::move(out));
}

void TraceAssembler::add_begin(PendingEvent& e, int pid_index) {
  TraceEvent out = slice_event(e, pid_index);
  auto& open = open_slices_[{out.rank, out.lane}];
  open.push_back({std::move(out), e.args_json()});
}

void TraceAssembler::add_end(PendingEvent& e, int pid_index) {
  auto it = open_slices_.find({pid_index, lane_index(pid_index, *e.tid)});
  if (it == open_slices_.end() || it->second.empty()) event_error(e, "an end event ('E') without its begin ('B')");
  OpenSlice slice = std::move(it->second.back());
  it->second.pop_back();
  TraceEvent& out = slice.event;
  if (*e.ts < out.ts_us) event_error(e, "an end event ('E') before its begin");
  out.dur_us = *e.ts - out.ts_us;
  add_args(std::move(slice.args_json));
  trace_.events.push_back(std::move(out));
}

void TraceAssembler::add_counter(PendingEvent& e, int pid_index) {
  // The pipescope counter is `memory` with args.bytes; a `memory` counter of another
  // tool with one numeric value under another name is taken too. Other counters are
  // kept as they are, one series per numeric value.
  if (e.name != "memory") {
    for (auto& [key, value] : e.numeric_args)
      trace_.counters.push_back(
          {pid_index, e.numeric_args.size() == 1 || key == e.name || key == "value" ? e.name : e.name + "." + key,
           *e.ts, value});
    return;
  }
  std::optional<double> value =
      e.bytes >= 0 ? std::optional<double>(static_cast<double>(e.bytes)) : e.first_numeric_arg;
  if (!value) event_error(e, "a memory counter without a numeric value in args");
  if (auto problem = bytes_problem(*value, true)) event_error(e, "the memory counter's value " + *problem);
  trace_.memory.push_back({pid_index, *e.ts, static_cast<std::int64_t>(*value)});
}

void TraceAssembler::add_flow_end(const PendingEvent& e, char phase, int pid_index) {
  if (!e.has_id) return;
  const std::string key = e.cat + '\x1f' + e.id_text;
  const RawFlowEnd end{pid_index, lane_index(pid_index, *e.tid), *e.ts};
  if (phase == 's') {
    open_flows_[key] = end;
  } else if (phase == 'f') {
    auto it = open_flows_.find(key);
    if (it == open_flows_.end()) return;  // a flow whose start is outside this trace
    Flow flow;
    flow.from_rank = it->second.pid_index;
    flow.from_lane = it->second.tid_index;
    flow.from_ts_us = it->second.ts_us;
    flow.to_rank = end.pid_index;
    flow.to_lane = end.tid_index;
    flow.to_ts_us = end.ts_us;
    trace_.flows.push_back(flow);
    open_flows_.erase(it);
  }
}

Trace TraceAssembler::finish() {
  for (const auto& [key, slices] : open_slices_)
    if (!slices.empty())
      throw TraceError(
          fmt::format("{}: begin event ('B') \"{}\" has no end event ('E')", source_, slices.back().event.name));
  const bool is_pipescope = take_meta();
  std::vector<int> rank_of;
  std::vector<std::vector<int>> lane_of;
  map_ids_to_ranks_and_lanes(is_pipescope, rank_of, lane_of);
  name_ranks_and_lanes(is_pipescope, rank_of, lane_of);
  shift_to_zero();
  return std::move(trace_);
}

// otherData: the known fields become TraceMeta and its run description, the rest stays in
// meta.extra.
bool TraceAssembler::take_meta() {
  TraceMeta& meta = trace_.meta;
  json other = std::move(meta.extra);
  if (!other.is_object()) other = json::object();
  const std::string format = meta_string(other, "format", source_);
  const bool is_pipescope = format.rfind("pipescope.trace/", 0) == 0;
  meta.format = format.empty() ? std::string() : format;
  meta.source = meta_string(other, "source", source_);
  meta.schedule = meta_string(other, "schedule", source_);
  meta.num_ranks = meta_int(other, "num_ranks", source_);
  // Readers keep tables per rank: a declared count is held to the cap on rank ids.
  if (meta.num_ranks < 0 || meta.num_ranks > kMaxRank)
    throw TraceError(
        fmt::format("{}: otherData.num_ranks {} is out of range (0..{})", source_, meta.num_ranks, kMaxRank));
  meta.num_stages = meta_int(other, "num_stages", source_);
  meta.num_micro_batches = meta_int(other, "num_micro_batches", source_);
  meta.iteration = meta_int(other, "iteration", source_);
  for (const char* known :
       {"format", "source", "schedule", "num_ranks", "num_stages", "num_micro_batches", "iteration"})
    other.erase(known);
  meta.run = take_run_description(other, source_);
  meta.extra = std::move(other);
  return is_pipescope;
}

// Maps interned pids and tids to ranks and lanes: a pipescope trace's are its ranks and lanes,
// a plain trace's are numbered densely in ascending order.
void TraceAssembler::map_ids_to_ranks_and_lanes(bool is_pipescope, std::vector<int>& rank_of,
                                                std::vector<std::vector<int>>& lane_of) {
  const auto& pid_ids = pids_.ids();
  rank_of.assign(pid_ids.size(), 0);
  lane_of.assign(pid_ids.size(), {});
  tids_per_pid_.resize(pid_ids.size());
  if (is_pipescope) {
    for (std::size_t i = 0; i < pid_ids.size(); ++i) {
      const RawId& id = pid_ids[i];
      if (id.is_text || id.number < 0 || id.number >= kMaxRank)
        throw TraceError(fmt::format("{}: pid {} is not a rank (a number from 0)", source_,
                                     id.is_text ? '"' + id.text + '"' : std::to_string(id.number)));
      rank_of[i] = static_cast<int>(id.number);
      const auto& tid_ids = tids_per_pid_[i].ids();
      lane_of[i].resize(tid_ids.size());
      for (std::size_t j = 0; j < tid_ids.size(); ++j) {
        const RawId& tid = tid_ids[j];
        if (tid.is_text || tid.number < 0 || tid.number >= kMaxLane)
          throw TraceError(
              fmt::format("{}: rank {}: tid {} is not a lane (0 compute, 1 send, 2 receive, 3 collectives)", source_,
                          id.number, tid.is_text ? '"' + tid.text + '"' : std::to_string(tid.number)));
        lane_of[i][j] = static_cast<int>(tid.number);
      }
    }
  } else {
    rank_of = dense_order(pid_ids);
    for (std::size_t i = 0; i < pid_ids.size(); ++i) lane_of[i] = dense_order(tids_per_pid_[i].ids());
  }

  for (auto& e : trace_.events) {
    const int pid_index = e.rank;
    e.rank = rank_of[pid_index];
    e.lane = lane_of[pid_index][e.lane];
  }
  for (auto& m : trace_.memory) m.rank = rank_of[m.rank];
  for (auto& c : trace_.counters) c.rank = rank_of[c.rank];
  // An instant on a thread that has slices marks that lane; one elsewhere (a thread of marks
  // only, or process-scoped) marks the whole rank (lane -1).
  for (std::size_t k = 0; k < trace_.instants.size(); ++k) {
    InstantEvent& i = trace_.instants[k];
    const int tid_index = tids_per_pid_[i.rank].find(instant_tids_[k]);
    i.lane = tid_index < 0 ? -1 : lane_of[i.rank][tid_index];
    i.rank = rank_of[i.rank];
  }
  for (auto& f : trace_.flows) {
    f.from_lane = lane_of[f.from_rank][f.from_lane];
    f.from_rank = rank_of[f.from_rank];
    f.to_lane = lane_of[f.to_rank][f.to_lane];
    f.to_rank = rank_of[f.to_rank];
  }
}

// Names: process_name / thread_name metadata; plain traces name the original ids.
void TraceAssembler::name_ranks_and_lanes(bool is_pipescope, const std::vector<int>& rank_of,
                                          const std::vector<std::vector<int>>& lane_of) {
  const auto& pid_ids = pids_.ids();
  const int ranks = trace_.rank_count();
  const int named_ranks = std::max(ranks, pid_ids.empty() ? 0 : 1 + *std::max_element(rank_of.begin(), rank_of.end()));
  if (!process_names_.empty() || !is_pipescope) {
    trace_.rank_names.assign(named_ranks, std::string());
    for (std::size_t i = 0; i < pid_ids.size(); ++i) {
      auto it = process_names_.find(static_cast<int>(i));
      trace_.rank_names[rank_of[i]] = it != process_names_.end() && !it->second.empty()
                                          ? it->second
                                          : (is_pipescope ? "rank " : "pid ") + raw_text(pid_ids[i]);
    }
    for (int r = 0; r < named_ranks; ++r)
      if (trace_.rank_names[r].empty()) trace_.rank_names[r] = "rank " + std::to_string(r);
  }
  if (!thread_names_.empty() || !is_pipescope) {
    trace_.lane_names.assign(named_ranks, {});
    for (std::size_t i = 0; i < pid_ids.size(); ++i) {
      const auto& tid_ids = tids_per_pid_[i].ids();
      auto& names = trace_.lane_names[rank_of[i]];
      for (std::size_t j = 0; j < tid_ids.size(); ++j) {
        const int lane = lane_of[i][j];
        if (static_cast<int>(names.size()) <= lane) names.resize(lane + 1);
        auto it = thread_names_.find({static_cast<int>(i), static_cast<int>(j)});
        names[lane] = it != thread_names_.end() && !it->second.empty()
                          ? it->second
                          : (is_pipescope ? default_lane_name(lane) : "tid " + raw_text(tid_ids[j]));
      }
      for (std::size_t lane = 0; lane < names.size(); ++lane)
        if (names[lane].empty()) names[lane] = default_lane_name(static_cast<int>(lane));
    }
  }
}

// The earliest event of any rank is at 0 (SPEC.md section 5).
void TraceAssembler::shift_to_zero() {
  double earliest = std::numeric_limits<double>::infinity(), latest = -earliest;
  for (const auto& e : trace_.events)
    earliest = std::min(earliest, e.ts_us), latest = std::max(latest, e.ts_us + e.dur_us);
  for (const auto& m : trace_.memory) earliest = std::min(earliest, m.ts_us), latest = std::max(latest, m.ts_us);
  for (const auto& c : trace_.counters) earliest = std::min(earliest, c.ts_us), latest = std::max(latest, c.ts_us);
  for (const auto& i : trace_.instants) earliest = std::min(earliest, i.ts_us), latest = std::max(latest, i.ts_us);
  if (auto problem = span_problem(earliest, latest)) throw TraceError(source_ + ": " + *problem);
  if (!std::isfinite(earliest) || earliest == 0) return;
  for (auto& e : trace_.events) e.ts_us -= earliest;
  for (auto& m : trace_.memory) m.ts_us -= earliest;
  for (auto& c : trace_.counters) c.ts_us -= earliest;
  for (auto& i : trace_.instants) i.ts_us -= earliest;
  for (auto& f : trace_.flows) {
    f.from_ts_us -= earliest;
    f.to_ts_us -= earliest;
  }
}

}  // namespace pipescope::traces::detail
