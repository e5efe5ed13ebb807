// The trace reader. Events are built directly from the parser, with no JSON document of the
// whole file in between. With simdjson available, a fast pass reads well-formed files with the
// on-demand parser (a million events in about a second, with no document tree in memory);
// anything it does not like is read again by nlohmann's SAX parser, which is the reference for
// the meaning and names the place of a problem (line and column, or event and field).
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <unistd.h>
#include <cstring>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#ifdef PIPESCOPE_HAVE_SIMDJSON
#include <simdjson.h>
#endif

#include "gzip.hpp"
#include "run_description_json.hpp"
#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/input_file.hpp"
#include "pipescope/core/json_limits.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "pipescope/traces/trace_limits.hpp"

namespace pipescope::traces {
namespace {

using json = nlohmann::json;

constexpr const char* kFormat = "pipescope.trace/1";
// Ranks and lanes of a pipescope trace are used as row indices; anything larger is a broken file.
constexpr std::int64_t kMaxRank = 1 << 20;
constexpr std::int64_t kMaxLane = 1 << 10;
// The parser reads a little past the end of the text (SIMDJSON_PADDING bytes); reading the
// file into a buffer that has them saves copying the whole text once more.
constexpr std::size_t kPadding = 64;

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
      if (ids_[k].is_text) maps_->texts.emplace(ids_[k].text, static_cast<int>(k));
      else maps_->numbers.emplace(ids_[k].number, static_cast<int>(k));
    }
  }

  std::vector<RawId> ids_;
  std::unique_ptr<Maps> maps_;  // past kLinearIds ids only: most tables (a process's threads) never need one
  bool have_last_ = false;
  std::int64_t last_number_ = 0;
  int last_index_ = 0;
};

enum class Field {
  None, Ph, Name, Cat, Pid, Tid, Ts, Dur, Id, Args,
  ArgStage, ArgMicroBatch, ArgPeerRank, ArgBytes, ArgName, ArgOther
};

Field event_field(std::string_view key) {
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

Field arg_field(std::string_view key) {
  if (key == "stage") return Field::ArgStage;
  if (key == "micro_batch") return Field::ArgMicroBatch;
  if (key == "peer_rank") return Field::ArgPeerRank;
  if (key == "bytes") return Field::ArgBytes;
  if (key == "name") return Field::ArgName;
  return Field::ArgOther;
}

const char* expected_type(Field f) {
  switch (f) {
    case Field::Ph: case Field::Name: case Field::Cat: case Field::ArgName: return "a string";
    case Field::Pid: case Field::Tid: case Field::Id: return "a number or a string";
    case Field::Ts: case Field::Dur: case Field::ArgBytes: return "a number";
    case Field::Args: return "an object";
    case Field::ArgStage: case Field::ArgMicroBatch: case Field::ArgPeerRank: return "an integer";
    default: return "something else";
  }
}

const char* field_name(Field f) {
  switch (f) {
    case Field::Ph: return "ph";
    case Field::Name: return "name";
    case Field::Cat: return "cat";
    case Field::Pid: return "pid";
    case Field::Tid: return "tid";
    case Field::Ts: return "ts";
    case Field::Dur: return "dur";
    case Field::Id: return "id";
    case Field::Args: return "args";
    case Field::ArgStage: return "args.stage";
    case Field::ArgMicroBatch: return "args.micro_batch";
    case Field::ArgPeerRank: return "args.peer_rank";
    case Field::ArgBytes: return "args.bytes";
    case Field::ArgName: return "args.name";
    default: return "?";
  }
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
    other_args += json(std::string(key)).dump();
    other_args += ": ";
    other_args += value_json;
  }
  // The args object of an event that has args beyond the typed fields; empty otherwise.
  // A non-metadata event's args.name is one of them.
  std::string args_json() const {
    if (other_args.empty() && arg_name.empty()) return {};
    std::string text = "{";
    if (!arg_name.empty()) text += "\"name\": " + json(arg_name).dump() + (other_args.empty() ? "" : ", ");
    return text + other_args + "}";
  }
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

// Builds a JSON value from SAX callbacks (for otherData, which is small and kept whole).
class ValueBuilder {
 public:
  void start(json* root) { stack_.assign(1, root); have_key_ = false; }
  bool active() const { return !stack_.empty(); }
  template <class V>
  void value(V&& v) { place(json(std::forward<V>(v))); }
  void start_container(json c) {
    json* placed = place(std::move(c));
    stack_.push_back(placed);
  }
  // Returns true when the outermost container closed.
  bool end_container() {
    stack_.pop_back();
    return stack_.size() == 1 ? (stack_.clear(), true) : false;
  }
  void key(const std::string& k) { key_ = k; have_key_ = true; }

 private:
  json* place(json v) {
    json* top = stack_.back();
    if (stack_.size() == 1 && top->is_null()) {  // the root value itself
      *top = std::move(v);
      return top;
    }
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    json& slot = (*top)[key_];
    slot = std::move(v);
    have_key_ = false;
    return &slot;
  }
  std::vector<json*> stack_;
  std::string key_;
  bool have_key_ = false;
};

class TraceSax : public json::json_sax_t {
 public:
  explicit TraceSax(std::string source) : source_(std::move(source)) {}

  // ---- SAX interface ----
  bool null() override { return scalar_null(); }
  bool boolean(bool v) override {
    if (in_other_data()) { other_.value(v); return true; }
    if (in_arg_value()) { arg_builder_.value(v); return true; }
    if (skipping()) return true;
    check_value_allowed();
    if (in_args() && field_ == Field::ArgOther) event_.add_other_arg(arg_key_, v ? "true" : "false");
    field_ = in_args() ? Field::ArgOther : Field::None;
    return true;
  }
  bool number_integer(number_integer_t v) override { return number(static_cast<double>(v), v, true); }
  bool number_unsigned(number_unsigned_t v) override {
    const bool fits = v <= static_cast<number_unsigned_t>(std::numeric_limits<std::int64_t>::max());
    return number(static_cast<double>(v), fits ? static_cast<std::int64_t>(v) : 0, fits);
  }
  bool number_float(number_float_t v, const string_t&) override {
    const bool integral = std::floor(v) == v && std::fabs(v) < 9e18;
    return number(v, integral ? static_cast<std::int64_t>(v) : 0, integral);
  }
  bool string(string_t& v) override {
    if (in_other_data()) { other_.value(v); return true; }
    if (in_arg_value()) { arg_builder_.value(v); return true; }
    if (skipping()) return true;
    if (depth_ == 2 && top_key_ == TopKey::DisplayTimeUnit) return true;
    if (!in_event()) {
      check_not_bare_element();
      return true;
    }
    switch (field_) {
      case Field::Ph: event_.ph = std::move(v); break;
      case Field::Name: event_.name = std::move(v); break;
      case Field::Cat: event_.cat = std::move(v); break;
      case Field::Pid: event_.pid = RawId{true, 0, std::move(v)}; break;
      case Field::Tid: event_.tid = RawId{true, 0, std::move(v)}; break;
      case Field::Id: event_.id_text = std::move(v); event_.has_id = true; break;
      case Field::ArgName: event_.arg_name = std::move(v); break;
      case Field::ArgOther: event_.add_other_arg(arg_key_, json(v).dump()); break;
      case Field::None: break;
      default: type_error();
    }
    field_ = in_args() ? Field::ArgOther : Field::None;
    return true;
  }
  bool binary(binary_t&) override { return true; }

  bool start_object(std::size_t) override {
    if (++depth_ > kMaxJsonDepth) depth_error();
    if (in_other_data_depth()) {
      other_.start_container(json::object());
      return true;
    }
    if (in_arg_value()) { arg_builder_.start_container(json::object()); return true; }
    if (skipping()) return true;
    if (depth_ == 1) { root_is_object_ = true; return true; }
    if (depth_ == 2 && top_key_ == TopKey::TraceEvents)
      throw TraceError(source_ + ": traceEvents must be an array, not an object");
    if (depth_ == 2 && top_key_ == TopKey::OtherData) {
      other_data_depth_ = depth_;
      other_.start(&trace_.meta.extra);
      trace_.meta.extra = json();
      other_.start_container(json::object());
      return true;
    }
    if (events_depth_ != 0 && depth_ == events_depth_ + 1) {  // an event
      event_.reset();
      field_ = Field::None;
      return true;
    }
    if (events_depth_ != 0 && depth_ == events_depth_ + 2 && field_ == Field::Args) {
      args_depth_ = depth_;
      field_ = Field::ArgOther;
      return true;
    }
    check_value_allowed();
    if (starts_arg_value()) {
      start_arg_value(json::object());
      return true;
    }
    start_skip();
    return true;
  }
  bool end_object() override {
    if (in_other_data_depth()) {
      if (other_.end_container()) other_data_depth_ = 0;
      --depth_;
      return true;
    }
    if (in_arg_value()) return end_arg_container();
    if (skip_depth_ != 0 && depth_ == skip_depth_) skip_depth_ = 0;
    if (skip_depth_ == 0) {
      if (args_depth_ != 0 && depth_ == args_depth_) {
        args_depth_ = 0;
        field_ = Field::None;
      } else if (events_depth_ != 0 && depth_ == events_depth_ + 1) {
        finish_event();
        ++event_index_;
      } else if (depth_ == 1) {
        root_done_ = true;
      }
    }
    --depth_;
    if (depth_ == 1) top_key_ = TopKey::Other;
    return true;
  }
  bool start_array(std::size_t) override {
    if (++depth_ > kMaxJsonDepth) depth_error();
    if (in_other_data_depth()) { other_.start_container(json::array()); return true; }
    if (in_arg_value()) { arg_builder_.start_container(json::array()); return true; }
    if (skipping()) return true;
    if (depth_ == 1) {  // the JSON Array Format of Chrome traces: a bare list of events
      events_depth_ = 1;
      saw_events_ = true;
      return true;
    }
    if (depth_ == 2 && top_key_ == TopKey::TraceEvents) {
      events_depth_ = 2;
      saw_events_ = true;
      return true;
    }
    if (depth_ == 2 && top_key_ == TopKey::OtherData)
      throw TraceError(source_ + ": otherData must be an object, not an array");
    if (depth_ == events_depth_ + 1) event_error("an event must be an object, not an array");
    check_value_allowed();
    if (starts_arg_value()) {
      start_arg_value(json::array());
      return true;
    }
    start_skip();
    return true;
  }
  bool end_array() override {
    if (in_other_data_depth()) {
      other_.end_container();
      --depth_;
      return true;
    }
    if (in_arg_value()) return end_arg_container();
    if (skip_depth_ != 0 && depth_ == skip_depth_) skip_depth_ = 0;
    if (skip_depth_ == 0 && events_depth_ != 0 && depth_ == events_depth_) {
      events_depth_ = 0;
      if (depth_ == 1) root_done_ = true;
    }
    --depth_;
    if (depth_ == 1) top_key_ = TopKey::Other;
    field_ = in_args() ? Field::ArgOther : Field::None;
    return true;
  }
  bool key(string_t& k) override {
    if (in_other_data()) { other_.key(k); return true; }
    if (in_arg_value()) { arg_builder_.key(k); return true; }
    if (skipping()) return true;
    if (depth_ == 1) {
      if (k == "traceEvents") top_key_ = TopKey::TraceEvents;
      else if (k == "otherData") top_key_ = TopKey::OtherData;
      else if (k == "displayTimeUnit") top_key_ = TopKey::DisplayTimeUnit;
      else top_key_ = TopKey::Other;
      return true;
    }
    if (args_depth_ != 0 && depth_ == args_depth_) {
      field_ = arg_field(k);
      arg_key_ = k;
    }
    else if (events_depth_ != 0 && depth_ == events_depth_ + 1) field_ = event_field(k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) override {
    error_position_ = position;
    std::string why = ex.what();
    // nlohmann's text starts with "[json.exception.parse_error.101] parse error at line 1, column 2: ".
    if (auto colon = why.find(": "); colon != std::string::npos && why.rfind("[json.exception", 0) == 0)
      why = why.substr(colon + 2);
    error_text_ = why;
    return false;
  }

  // ---- used by the fast path, which reads events itself ----
  void add_event(PendingEvent&& e) {
    event_ = std::move(e);
    finish_event();
    ++event_index_;
  }
  void reserve_events(std::size_t count) { trace_.events.reserve(count); }
  void set_other_data(json other) { trace_.meta.extra = std::move(other); }
  void set_events_seen(bool root_is_object) {
    saw_events_ = true;
    root_done_ = true;
    root_is_object_ = root_is_object;
  }

  // ---- results ----
  std::optional<std::size_t> error_position() const { return error_position_; }
  const std::string& error_text() const { return error_text_; }
  Trace finish();

 private:
  enum class TopKey { Other, TraceEvents, OtherData, DisplayTimeUnit };

  bool in_other_data() const { return other_data_depth_ != 0; }
  bool in_other_data_depth() const { return other_data_depth_ != 0 && depth_ > other_data_depth_ - 1 && other_.active(); }
  bool skipping() const { return skip_depth_ != 0; }
  bool in_event() const { return events_depth_ != 0 && depth_ >= events_depth_ + 1; }
  bool in_args() const { return args_depth_ != 0 && depth_ >= args_depth_; }
  // An arg whose value is an object or array is kept whole, built as JSON while it is read.
  bool in_arg_value() const { return arg_value_depth_ != 0; }
  bool starts_arg_value() const {
    return in_event() && args_depth_ != 0 && depth_ == args_depth_ + 1 && field_ == Field::ArgOther;
  }
  void start_arg_value(json container) {
    arg_value_ = json();
    arg_builder_.start(&arg_value_);
    arg_builder_.start_container(std::move(container));
    arg_value_depth_ = depth_;
  }
  bool end_arg_container() {
    if (arg_builder_.end_container()) {
      event_.add_other_arg(arg_key_, arg_value_.dump());
      arg_value_depth_ = 0;
      field_ = Field::ArgOther;
    }
    --depth_;
    return true;
  }
  void start_skip() { skip_depth_ = depth_; }
  // A container or boolean where a known field wants a number or string.
  void check_value_allowed() const {
    if (in_event() && field_ != Field::None && field_ != Field::ArgOther) type_error();
    check_not_bare_element();
  }
  // The elements of traceEvents are objects.
  void check_not_bare_element() const {
    if (events_depth_ != 0 && depth_ == events_depth_) event_error("an event must be an object");
  }

  bool scalar_null() {
    if (in_other_data()) { other_.value(nullptr); return true; }
    if (in_arg_value()) { arg_builder_.value(nullptr); return true; }
    // null is what absent means; Perfetto writes `"args": null` sometimes.
    field_ = in_args() ? Field::ArgOther : Field::None;
    return true;
  }

  bool number(double value, std::int64_t integer, bool is_integer) {
    if (in_other_data()) {
      if (is_integer) other_.value(integer); else other_.value(value);
      return true;
    }
    if (in_arg_value()) {
      if (is_integer) arg_builder_.value(integer); else arg_builder_.value(value);
      return true;
    }
    if (skipping()) return true;
    if (!in_event()) {
      check_not_bare_element();
      return true;
    }
    auto need_integer = [&] {
      if (!is_integer) type_error();
    };
    switch (field_) {
      case Field::Pid: need_integer(); event_.pid = RawId{false, integer, {}}; break;
      case Field::Tid: need_integer(); event_.tid = RawId{false, integer, {}}; break;
      case Field::Ts: event_.ts = value; break;
      case Field::Dur: event_.dur = value; break;
      case Field::Id: event_.id_text = std::to_string(integer); event_.has_id = true; break;
      case Field::ArgStage: need_integer(); event_.stage = integer; break;
      case Field::ArgMicroBatch: need_integer(); event_.micro_batch = integer; break;
      case Field::ArgPeerRank: need_integer(); event_.peer_rank = integer; break;
      case Field::ArgBytes:
        if (auto problem = bytes_problem(value, true)) event_error("field 'bytes' " + *problem);
        event_.bytes = is_integer ? integer : static_cast<std::int64_t>(value);
        if (!event_.first_numeric_arg) event_.first_numeric_arg = value;
        event_.numeric_args.emplace_back(arg_key_, value);
        break;
      case Field::ArgOther:
        if (!event_.first_numeric_arg) event_.first_numeric_arg = value;
        event_.numeric_args.emplace_back(arg_key_, value);
        event_.add_other_arg(arg_key_, is_integer ? std::to_string(integer) : json(value).dump());
        break;
      case Field::None: break;
      default: type_error();
    }
    field_ = in_args() ? Field::ArgOther : Field::None;
    return true;
  }

  [[noreturn]] void type_error() const {
    throw TraceError(fmt::format("{}: traceEvents[{}]{}: field '{}' must be {}", source_, event_index_,
                                 event_.name.empty() ? "" : fmt::format(" (\"{}\")", event_.name),
                                 field_name(field_), expected_type(field_)));
  }
  // Containers nested beyond the readers' limit (json_limits.hpp): built into an arg's JSON, they
  // would exhaust the stack of the recursive code that prints and copies it.
  [[noreturn]] void depth_error() const {
    if (in_event()) event_error(json_depth_refusal());
    throw TraceError(fmt::format("{}: {}{}", source_, in_other_data() ? "otherData: " : "", json_depth_refusal()));
  }
  [[noreturn]] void event_error(const std::string& what) const {
    throw TraceError(fmt::format("{}: traceEvents[{}]{}: {}", source_, event_index_,
                                 event_.name.empty() ? "" : fmt::format(" (\"{}\")", event_.name), what));
  }

  void finish_event();
  // Keeps the args text of the event about to be added (nothing when it is empty).
  void add_args(std::string args_json) {
    if (!args_json.empty()) trace_.args.push_back({trace_.events.size(), std::move(args_json)});
  }
  int lane_index(int pid_index, const RawId& tid);

  std::string source_;
  Trace trace_;
  int depth_ = 0;
  TopKey top_key_ = TopKey::Other;
  int skip_depth_ = 0;
  int events_depth_ = 0;
  int args_depth_ = 0;
  int other_data_depth_ = 0;
  bool root_is_object_ = false;
  bool root_done_ = false;
  bool saw_events_ = false;
  Field field_ = Field::None;
  std::string arg_key_;  // the key of the arg being read
  json arg_value_;       // a container arg being read
  ValueBuilder arg_builder_;
  int arg_value_depth_ = 0;
  PendingEvent event_;
  std::size_t event_index_ = 0;
  ValueBuilder other_;

  std::optional<std::size_t> error_position_;
  std::string error_text_;

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

int TraceSax::lane_index(int pid_index, const RawId& tid) {
  if (static_cast<std::size_t>(pid_index) >= tids_per_pid_.size()) tids_per_pid_.resize(pid_index + 1);
  return tids_per_pid_[pid_index].intern(tid);
}

void TraceSax::finish_event() {
  PendingEvent& e = event_;
  if (e.ph.empty()) event_error("field 'ph' is missing");
  const char phase = e.ph.size() == 1 ? e.ph[0] : '?';
  if (phase == 'M') {
    if (!e.pid) return;
    const int pid_index = pids_.intern(*e.pid);
    if (e.name == "process_name") process_names_[pid_index] = e.arg_name;
    if (e.name == "thread_name" && e.tid) thread_names_[{pid_index, lane_index(pid_index, *e.tid)}] = e.arg_name;
    return;
  }
  if (phase != 'X' && phase != 'B' && phase != 'E' && phase != 'C' && phase != 's' && phase != 'f' &&
      phase != 't' && phase != 'i' && phase != 'I')
    return;  // object snapshots, samples, async events ...: not part of a timeline of lanes
  if (!e.ts) event_error("field 'ts' is missing");
  if (auto problem = timestamp_problem(*e.ts)) event_error("field 'ts' " + *problem);
  if (!e.pid) e.pid = RawId{false, 0, {}};
  if (!e.tid) e.tid = RawId{false, 0, {}};
  const int pid_index = pids_.intern(*e.pid);
  switch (phase) {
    case 'X': {
      if (!e.dur) event_error("field 'dur' is missing");
      if (auto problem = duration_problem(*e.dur)) event_error("field 'dur' " + *problem);
      TraceEvent out;
      out.rank = pid_index;
      out.lane = lane_index(pid_index, *e.tid);
      out.name = std::move(e.name);
      out.category = std::move(e.cat);
      out.ts_us = *e.ts;
      out.dur_us = *e.dur;
      out.stage = static_cast<int>(e.stage);
      out.micro_batch = static_cast<int>(e.micro_batch);
      out.peer_rank = static_cast<int>(e.peer_rank);
      out.bytes = e.bytes;
      add_args(e.args_json());
      trace_.events.push_back(std::move(out));
      return;
    }
    case 'i': case 'I': {
      // Its lane is found in finish(): a mark does not make a lane of its own.
      trace_.instants.push_back({pid_index, -1, *e.ts, std::move(e.name)});
      instant_tids_.push_back(std::move(*e.tid));
      return;
    }
    case 'B': {
      TraceEvent out;
      out.rank = pid_index;
      out.lane = lane_index(pid_index, *e.tid);
      out.name = std::move(e.name);
      out.category = std::move(e.cat);
      out.ts_us = *e.ts;
      out.stage = static_cast<int>(e.stage);
      out.micro_batch = static_cast<int>(e.micro_batch);
      out.peer_rank = static_cast<int>(e.peer_rank);
      out.bytes = e.bytes;
      open_slices_[{out.rank, out.lane}].push_back({std::move(out), e.args_json()});
      return;
    }
    case 'E': {
      auto it = open_slices_.find({pid_index, lane_index(pid_index, *e.tid)});
      if (it == open_slices_.end() || it->second.empty()) event_error("an end event ('E') without its begin ('B')");
      OpenSlice slice = std::move(it->second.back());
      it->second.pop_back();
      TraceEvent& out = slice.event;
      if (*e.ts < out.ts_us) event_error("an end event ('E') before its begin");
      out.dur_us = *e.ts - out.ts_us;
      add_args(std::move(slice.args_json));
      trace_.events.push_back(std::move(out));
      return;
    }
    case 'C': {
      // The pipescope counter is `memory` with args.bytes; a `memory` counter of another
      // tool with one numeric value under another name is taken too. Other counters are
      // kept as they are, one series per numeric value.
      if (e.name != "memory") {
        for (auto& [key, value] : e.numeric_args)
          trace_.counters.push_back(
              {pid_index, e.numeric_args.size() == 1 || key == e.name || key == "value" ? e.name : e.name + "." + key, *e.ts, value});
        return;
      }
      std::optional<double> value = e.bytes >= 0 ? std::optional<double>(static_cast<double>(e.bytes)) : e.first_numeric_arg;
      if (!value) event_error("a memory counter without a numeric value in args");
      if (auto problem = bytes_problem(*value, true)) event_error("the memory counter's value " + *problem);
      trace_.memory.push_back({pid_index, *e.ts, static_cast<std::int64_t>(*value)});
      return;
    }
    case 's': case 'f': case 't': {
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
      return;
    }
    default: return;
  }
}

int meta_int(const json& other, const char* key, const std::string& source) {
  auto it = other.find(key);
  if (it == other.end() || it->is_null()) return 0;
  const bool fits = it->is_number_unsigned() ? it->get<std::uint64_t>() <= static_cast<std::uint64_t>(INT_MAX)
                                              : it->is_number_integer() && it->get<std::int64_t>() >= INT_MIN &&
                                                    it->get<std::int64_t>() <= INT_MAX;
  if (!fits) throw TraceError(fmt::format("{}: otherData.{} must be an integer ({}..{})", source, key, INT_MIN, INT_MAX));
  return it->get<int>();
}

std::string meta_string(const json& other, const char* key, const std::string& source) {
  auto it = other.find(key);
  if (it == other.end() || it->is_null()) return {};
  if (!it->is_string()) throw TraceError(fmt::format("{}: otherData.{} must be a string", source, key));
  return it->get<std::string>();
}

Trace TraceSax::finish() {
  if (!saw_events_ || !root_done_)
    throw TraceError(source_ + ": not a trace: no traceEvents array" +
                     (root_is_object_ ? std::string(" in the top-level object") : std::string()));
  for (const auto& [key, slices] : open_slices_)
    if (!slices.empty())
      throw TraceError(fmt::format("{}: begin event ('B') \"{}\" has no end event ('E')", source_, slices.back().event.name));

  // otherData: the known fields become TraceMeta and its run description, the rest stays in
  // meta.extra.
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
    throw TraceError(fmt::format("{}: otherData.num_ranks {} is out of range (0..{})", source_, meta.num_ranks, kMaxRank));
  meta.num_stages = meta_int(other, "num_stages", source_);
  meta.num_micro_batches = meta_int(other, "num_micro_batches", source_);
  meta.iteration = meta_int(other, "iteration", source_);
  for (const char* known : {"format", "source", "schedule", "num_ranks", "num_stages", "num_micro_batches", "iteration"})
    other.erase(known);
  meta.run = take_run_description(other, source_);
  meta.extra = std::move(other);

  // Map interned pids and tids to ranks and lanes.
  const auto& pid_ids = pids_.ids();
  std::vector<int> rank_of(pid_ids.size());
  std::vector<std::vector<int>> lane_of(pid_ids.size());
  tids_per_pid_.resize(pid_ids.size());
  auto dense_order = [](const std::vector<RawId>& ids) {
    std::vector<int> order(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) order[i] = static_cast<int>(i);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return ids[a] < ids[b]; });
    std::vector<int> position(ids.size());
    for (std::size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<int>(i);
    return position;
  };
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
          throw TraceError(fmt::format("{}: rank {}: tid {} is not a lane (0 compute, 1 send, 2 receive, 3 collectives)",
                                       source_, id.number, tid.is_text ? '"' + tid.text + '"' : std::to_string(tid.number)));
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

  // Names: process_name / thread_name metadata; plain traces name the original ids.
  const int ranks = trace_.rank_count();
  const int named_ranks = std::max(ranks, pid_ids.empty() ? 0 : 1 + *std::max_element(rank_of.begin(), rank_of.end()));
  auto raw_text = [](const RawId& id) { return id.is_text ? id.text : std::to_string(id.number); };
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

  // The earliest event of any rank is at 0 (SPEC.md section 5).
  double earliest = std::numeric_limits<double>::infinity(), latest = -earliest;
  for (const auto& e : trace_.events) earliest = std::min(earliest, e.ts_us), latest = std::max(latest, e.ts_us + e.dur_us);
  for (const auto& m : trace_.memory) earliest = std::min(earliest, m.ts_us), latest = std::max(latest, m.ts_us);
  for (const auto& c : trace_.counters) earliest = std::min(earliest, c.ts_us), latest = std::max(latest, c.ts_us);
  for (const auto& i : trace_.instants) earliest = std::min(earliest, i.ts_us), latest = std::max(latest, i.ts_us);
  if (auto problem = span_problem(earliest, latest)) throw TraceError(source_ + ": " + *problem);
  if (std::isfinite(earliest) && earliest != 0) {
    for (auto& e : trace_.events) e.ts_us -= earliest;
    for (auto& m : trace_.memory) m.ts_us -= earliest;
    for (auto& c : trace_.counters) c.ts_us -= earliest;
    for (auto& i : trace_.instants) i.ts_us -= earliest;
    for (auto& f : trace_.flows) {
      f.from_ts_us -= earliest;
      f.to_ts_us -= earliest;
    }
  }
  return std::move(trace_);
}

#ifdef PIPESCOPE_HAVE_SIMDJSON
// The fast path reads with simdjson's on-demand parser: no document tree, events are built
// straight from the text. On-demand parsing only checks what it is asked for, so every value
// is read completely (consume), even the ones the trace ignores: anything the reference parser
// would refuse is refused here too, and then the reference parser reads the text to say where.
namespace ondemand = simdjson::ondemand;

// Thrown by the fast path for anything unexpected: the reference parser then reads the text.
struct UseReferenceParser {};

template <class T>
T checked(simdjson::simdjson_result<T>&& result) {
  T out{};
  if (std::move(result).get(out) != simdjson::SUCCESS) throw UseReferenceParser{};
  return out;
}

ondemand::field& checked_ref(simdjson::simdjson_result<ondemand::field>& result) {
  if (result.error() != simdjson::SUCCESS) throw UseReferenceParser{};
  return result.value_unsafe();
}

// simdjson refuses deeper documents itself; this bounds the recursion of consume/to_json, and
// a deeper file goes to the reference parser, which names the event.
constexpr int kMaxDepth = kMaxJsonDepth - 2;  // at most as deep as the reference parser allows

void consume(ondemand::value value, int depth) {
  if (depth > kMaxDepth) throw UseReferenceParser{};
  switch (checked(value.type())) {
    case ondemand::json_type::object:
      for (auto field : checked(value.get_object())) {
        checked(field.unescaped_key());
        consume(checked(field.value()), depth + 1);
      }
      return;
    case ondemand::json_type::array:
      for (auto element : checked(value.get_array())) consume(checked(std::move(element)), depth + 1);
      return;
    case ondemand::json_type::number: checked(value.get_number()); return;
    case ondemand::json_type::string: checked(value.get_string()); return;
    case ondemand::json_type::boolean: checked(value.get_bool()); return;
    case ondemand::json_type::null:
      if (!checked(value.is_null())) throw UseReferenceParser{};
      return;
  }
  throw UseReferenceParser{};
}

// otherData is small and kept whole as JSON, numbers typed as nlohmann's parser types them.
json to_json(ondemand::value value, int depth) {
  if (depth > kMaxDepth) throw UseReferenceParser{};
  switch (checked(value.type())) {
    case ondemand::json_type::object: {
      json out = json::object();
      for (auto field : checked(value.get_object())) {
        const std::string key(checked(field.unescaped_key()));
        out[key] = to_json(checked(field.value()), depth + 1);
      }
      return out;
    }
    case ondemand::json_type::array: {
      json out = json::array();
      for (auto element : checked(value.get_array())) out.push_back(to_json(checked(std::move(element)), depth + 1));
      return out;
    }
    case ondemand::json_type::number: {
      ondemand::number number = checked(value.get_number());
      switch (number.get_number_type()) {
        case ondemand::number_type::signed_integer: return json(number.get_int64());
        case ondemand::number_type::unsigned_integer: return json(number.get_uint64());
        case ondemand::number_type::floating_point_number: return json(number.get_double());
      }
      throw UseReferenceParser{};
    }
    case ondemand::json_type::string: return json(std::string(checked(value.get_string())));
    case ondemand::json_type::boolean: return json(checked(value.get_bool()));
    case ondemand::json_type::null:
      if (!checked(value.is_null())) throw UseReferenceParser{};
      return json();
  }
  throw UseReferenceParser{};
}

// An integer field: a float (even 2.0) or an integer beyond int64 goes to the reference parser.
std::int64_t integer_of(ondemand::value value) { return checked(value.get_int64()); }

// A key as written, without copying it: keys with escapes go to the reference parser (the
// known keys have none), so a key is its raw text up to the closing quote.
std::string_view key_of(simdjson::simdjson_result<ondemand::field>& result) {
  ondemand::field& field = checked_ref(result);
  const char* begin = field.key().raw();
  const char* end = begin;
  while (*end != '"') {
    if (*end == '\\') throw UseReferenceParser{};
    ++end;
  }
  return {begin, static_cast<std::size_t>(end - begin)};
}

RawId id_of(ondemand::value value) {
  if (checked(value.type()) == ondemand::json_type::string) return RawId{true, 0, std::string(checked(value.get_string()))};
  return RawId{false, integer_of(value), {}};
}

bool is_null(ondemand::value value) {
  if (checked(value.type()) != ondemand::json_type::null) return false;
  if (!checked(value.is_null())) throw UseReferenceParser{};
  return true;
}

void read_args(ondemand::value value, PendingEvent& e) {
  if (is_null(value)) return;
  for (auto field : checked(value.get_object())) {
    const std::string_view key = key_of(field);
    ondemand::value v = checked_ref(field).value();
    if (is_null(v)) continue;  // null is what absent means
    switch (arg_field(key)) {
      case Field::ArgStage: e.stage = integer_of(v); break;
      case Field::ArgMicroBatch: e.micro_batch = integer_of(v); break;
      case Field::ArgPeerRank: e.peer_rank = integer_of(v); break;
      case Field::ArgName: e.arg_name.assign(checked(v.get_string())); break;
      case Field::ArgBytes: {
        ondemand::number number = checked(v.get_number());
        const double d = number.as_double();
        if (bytes_problem(d, true)) throw UseReferenceParser{};  // which names the event
        e.bytes = number.is_int64() ? number.get_int64() : static_cast<std::int64_t>(d);
        if (!e.first_numeric_arg) e.first_numeric_arg = d;
        e.numeric_args.emplace_back(std::string(key), d);
        break;
      }
      default:
        if (checked(v.type()) == ondemand::json_type::number) {
          ondemand::number number = checked(v.get_number());
          const double d = number.as_double();
          if (!e.first_numeric_arg) e.first_numeric_arg = d;
          e.numeric_args.emplace_back(std::string(key), d);
          e.add_other_arg(key, number.is_int64() ? std::to_string(number.get_int64()) : json(d).dump());
        } else {
          e.add_other_arg(key, to_json(v, 3).dump());
        }
    }
  }
}

void read_event(ondemand::object object, PendingEvent& e) {
  e.reset();
  for (auto field : object) {
    const std::string_view key = key_of(field);
    ondemand::value v = checked_ref(field).value();
    const Field which = event_field(key);
    if (which != Field::Args && is_null(v)) continue;  // null is what absent means
    switch (which) {
      case Field::Ph: e.ph.assign(checked(v.get_string())); break;
      case Field::Name: e.name.assign(checked(v.get_string())); break;
      case Field::Cat: e.cat.assign(checked(v.get_string())); break;
      case Field::Pid: e.pid = id_of(v); break;
      case Field::Tid: e.tid = id_of(v); break;
      case Field::Ts: e.ts = checked(v.get_double()); break;
      case Field::Dur: e.dur = checked(v.get_double()); break;
      case Field::Id: {
        const RawId id = id_of(v);
        e.id_text = id.is_text ? id.text : std::to_string(id.number);
        e.has_id = true;
        break;
      }
      case Field::Args: read_args(v, e); break;
      default: consume(v, 2);
    }
  }
}

void read_events(ondemand::array events, TraceSax& sax) {
  PendingEvent e;
  for (auto element : events) {
    ondemand::object object = checked(checked(std::move(element)).get_object());
    read_event(object, e);
    sax.add_event(std::move(e));
  }
}

// Returns false when the fast path gives way to the reference parser.
// `text_is_padded`: SIMDJSON_PADDING readable bytes follow the text, so it need not be copied.
bool read_with_simdjson(std::string_view text, bool text_is_padded, TraceSax& sax) {
  try {
    std::optional<simdjson::padded_string> copy;
    if (!text_is_padded) copy.emplace(text.data(), text.size());
    const simdjson::padded_string_view padded =
        copy ? simdjson::padded_string_view(*copy) : simdjson::padded_string_view(text.data(), text.size(), text.size() + kPadding);
    // Events take about 136 bytes each in memory and at least ~60 in the text: reserving for
    // the upper bound touches no memory, and saves moving a million events while growing.
    sax.reserve_events(text.size() / 64);
    ondemand::parser parser;
    ondemand::document doc = checked(parser.iterate(padded));
    const ondemand::json_type root_type = checked(doc.type());
    if (root_type == ondemand::json_type::array) {
      read_events(checked(doc.get_array()), sax);
    } else if (root_type == ondemand::json_type::object) {
      bool saw_events = false;
      for (auto field : checked(doc.get_object())) {
        const std::string_view key = checked(field.unescaped_key());
        ondemand::value v = checked(field.value());
        if (key == "traceEvents") {
          read_events(checked(v.get_array()), sax);
          saw_events = true;
        } else if (key == "otherData") {
          if (checked(v.type()) != ondemand::json_type::object) return false;
          sax.set_other_data(to_json(v, 1));
        } else {
          consume(v, 1);
        }
      }
      if (!saw_events) return false;
    } else {
      return false;
    }
    // Anything after the top-level value (a second value, a stray bracket) is not JSON.
    const char* rest = nullptr;
    if (doc.current_location().get(rest) == simdjson::SUCCESS) return false;
    sax.set_events_seen(root_type == ondemand::json_type::object);
    return true;
  } catch (const UseReferenceParser&) {
    return false;
  } catch (const simdjson::simdjson_error&) {
    return false;
  } catch (const TraceError&) {
    return false;  // the reference parser reports it, with the same meaning
  } catch (const json::exception&) {
    return false;
  }
}
#endif

// 1-based line and column of a byte offset, for error messages.
std::pair<std::size_t, std::size_t> line_and_column(std::string_view text, std::size_t position) {
  position = std::min(position, text.size());
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i + 1 < position; ++i) {
    if (text[i] == '\n') { ++line; column = 1; } else { ++column; }
  }
  return {line, column};
}

Trace parse_text(std::string_view json_text, [[maybe_unused]] bool text_is_padded, const std::string& source) {
  if (json_text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    throw TraceError(source + ": the file is empty");
#ifdef PIPESCOPE_HAVE_SIMDJSON
  {
    TraceSax fast(source);
    if (read_with_simdjson(json_text, text_is_padded, fast)) return fast.finish();
  }
#endif
  TraceSax sax(source);
  const bool ok = json::sax_parse(json_text.begin(), json_text.end(), &sax, json::input_format_t::json, true);
  if (!ok) {
    const auto [line, column] = line_and_column(json_text, sax.error_position().value_or(json_text.size()));
    const bool at_end = sax.error_position().value_or(0) >= json_text.size();
    throw TraceError(fmt::format("{}: line {}, column {}: {}{}", source, line, column,
                                 at_end ? "the file is truncated: " : "not valid JSON: ", sax.error_text()));
  }
  return sax.finish();
}


std::string read_padded(const std::string& path) {
  if (auto problem = input_file_problem(path, "a trace file")) throw TraceError(*problem);
  // Opened without blocking: a FIFO put in the file's place after the check is refused too.
  std::string open_problem;
  const int fd = open_regular_file(path, open_problem);
  if (fd < 0) throw TraceError(fmt::format("{}: cannot open: {}", path, open_problem));
  std::FILE* file = ::fdopen(fd, "rb");
  if (!file) {
    ::close(fd);
    throw TraceError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  // Read straight into the string (one copy, not two through a chunk buffer); whatever a
  // growing file has beyond the size seen first is read on in chunks.
  std::string bytes;
  if (std::fseek(file, 0, SEEK_END) == 0) {
    const long size = std::ftell(file);
    std::rewind(file);
    if (size > 0) {
      bytes.reserve(static_cast<std::size_t>(size) + kPadding);
      bytes.resize(static_cast<std::size_t>(size));
      bytes.resize(std::fread(bytes.data(), 1, bytes.size(), file));
    }
  }
  char chunk[1 << 16];
  std::size_t got = 0;
  while ((got = std::fread(chunk, 1, sizeof chunk, file)) > 0) bytes.append(chunk, got);
  const bool failed = std::ferror(file);
  std::fclose(file);
  if (failed) throw TraceError(path + ": cannot read the file");
  return bytes;
}

}  // namespace

Trace parse_trace(std::string_view json_text, const std::string& source) { return parse_text(json_text, false, source); }

Trace read_trace(const std::string& path) {
  std::string bytes = read_padded(path);
  if (detail::looks_gzipped(bytes)) bytes = detail::gunzip(bytes, path);
  const std::size_t size = bytes.size();
  bytes.append(kPadding, ' ');
  return parse_text(std::string_view(bytes.data(), size), true, path);
}

}  // namespace pipescope::traces
