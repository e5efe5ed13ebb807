// The trace assembler: turns the events a parser reads (trace_raw_event.hpp) into a Trace.
// It decides what each event means (slices, marks, counters, flows, metadata), interns pids and
// tids, and at the end maps them to ranks and lanes, reads otherData into TraceMeta and shifts
// times to start at 0. Both parsers feed it, so both read a file the same way (as Perfetto's
// JSON importer splits its tokenizer from its parser).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trace_raw_event.hpp"
#include "pipescope/traces/trace.hpp"

namespace pipescope::traces::detail {

// Interns raw ids into small indices in order of first appearance. A table of a few ids (a
// process's threads) is searched in place; hash maps are built only past kLinearIds, so that a
// trace of a million processes does not cost a million hash maps.
class IdTable {
 public:
  int intern(const RawId& id) {
    if (!id.is_text && have_last_ && id.number == last_number_) return last_index_;
    int index = find(id);
    if (index < 0) {
      index = static_cast<int>(ids_.size());
      ids_.push_back(id);
      if (ids_.size() > kLinearIds) index_id(ids_.size() - 1);
    }
    if (!id.is_text) {
      have_last_ = true;
      last_number_ = id.number;
      last_index_ = index;
    }
    return index;
  }
  const std::vector<RawId>& ids() const { return ids_; }
  // The index of an id seen before, or -1.
  int find(const RawId& id) const {
    if (ids_.size() <= kLinearIds) {
      for (std::size_t i = 0; i < ids_.size(); ++i)
        if (ids_[i].is_text == id.is_text && (id.is_text ? ids_[i].text == id.text : ids_[i].number == id.number))
          return static_cast<int>(i);
      return -1;
    }
    if (!id.is_text) {
      auto it = maps_->numbers.find(id.number);
      return it == maps_->numbers.end() ? -1 : it->second;
    }
    auto it = maps_->texts.find(id.text);
    return it == maps_->texts.end() ? -1 : it->second;
  }

 private:
  static constexpr std::size_t kLinearIds = 8;

  struct Maps {
    std::unordered_map<std::int64_t, int> numbers;
    std::unordered_map<std::string, int> texts;
  };

  // Puts ids_[i] (and, when the table has just outgrown its linear search, all before it) in the maps.
  void index_id(std::size_t i) {
    if (!maps_) maps_ = std::make_unique<Maps>();
    const std::size_t first = ids_.size() == kLinearIds + 1 ? 0 : i;
    for (std::size_t k = first; k <= i; ++k) {
      if (ids_[k].is_text)
        maps_->texts.emplace(ids_[k].text, static_cast<int>(k));
      else
        maps_->numbers.emplace(ids_[k].number, static_cast<int>(k));
    }
  }

  std::vector<RawId> ids_;
  std::unique_ptr<Maps> maps_;  // past kLinearIds ids only: most tables (a process's threads) never need one
  bool have_last_ = false;
  std::int64_t last_number_ = 0;
  int last_index_ = 0;
};

// A begin event ("B") waiting for its end, with the args it came with.
struct OpenSlice {
  TraceEvent event;
  std::string args_json;
};

struct RawFlowEnd {
  int pid_index = 0;
  int tid_index = 0;
  double ts_us = 0;
};

class TraceAssembler {
 public:
  explicit TraceAssembler(std::string source) : source_(std::move(source)) {}

  // Adds the next event of traceEvents; may take its strings. Throws TraceError naming it.
  void add_event(PendingEvent& e);
  void reserve_events(std::size_t count) { trace_.events.reserve(count); }
  // otherData, whole; the last one given counts.
  void set_other_data(nlohmann::json other) { trace_.meta.extra = std::move(other); }
  // The index of the event being read (the number of events added so far).
  std::size_t event_index() const { return event_index_; }
  const std::string& source() const { return source_; }
  // The trace, once every event is in. Throws TraceError for a slice left open, bad otherData,
  // pids and tids that are not ranks and lanes (pipescope traces) or times out of bounds.
  Trace finish();

 private:
  [[noreturn]] void event_error(const PendingEvent& e, const std::string& what) const {
    throw_event_error(source_, event_index_, e.name, what);
  }
  TraceEvent slice_event(PendingEvent& e, int pid_index);
  void add_complete(PendingEvent& e, int pid_index);
  void add_begin(PendingEvent& e, int pid_index);
  void add_end(PendingEvent& e, int pid_index);
  void add_counter(PendingEvent& e, int pid_index);
  void add_flow_end(const PendingEvent& e, char phase, int pid_index);
  // Keeps the args text of the event about to be added (nothing when it is empty).
  void add_args(std::string args_json) {
    if (!args_json.empty()) trace_.args.push_back({trace_.events.size(), std::move(args_json)});
  }
  int lane_index(int pid_index, const RawId& tid);

  // finish()'s steps, in order.
  bool take_meta();  // true for a pipescope trace
  void map_ids_to_ranks_and_lanes(bool is_pipescope, std::vector<int>& rank_of, std::vector<std::vector<int>>& lane_of);
  void name_ranks_and_lanes(bool is_pipescope, const std::vector<int>& rank_of,
                            const std::vector<std::vector<int>>& lane_of);
  void shift_to_zero();

  std::string source_;
  Trace trace_;
  std::size_t event_index_ = 0;
  // Events keep interned pid / lane indices until finish() maps them to ranks and lanes.
  IdTable pids_;
  std::vector<IdTable> tids_per_pid_;
  std::map<int, std::string> process_names_;
  std::map<std::pair<int, int>, std::string> thread_names_;
  std::unordered_map<std::string, RawFlowEnd> open_flows_;
  std::vector<RawId> instant_tids_;  // parallel to trace_.instants
  // Begin events ("B") waiting for their "E", per (pid index, lane index).
  std::map<std::pair<int, int>, std::vector<OpenSlice>> open_slices_;
};

}  // namespace pipescope::traces::detail
