// The reference parser of traces: nlohmann's SAX parser, with a tokenizer state machine that
// turns its callbacks into events for the trace assembler. It reads any JSON the format allows
// and names the place of a problem (line and column, or event and field); the simdjson fast
// path (trace_simdjson.cpp) gives way to it for anything unexpected.
#include "trace_sax.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "trace_assembler.hpp"
#include "trace_raw_event.hpp"
#include "pipescope/core/json_limits.hpp"
#include "pipescope/traces/trace_limits.hpp"

namespace pipescope::traces::detail {
namespace {

using json = nlohmann::json;

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
  explicit TraceSax(std::string source) : assembler_(std::move(source)) {}

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
      throw TraceError(source() + ": traceEvents must be an array, not an object");
    if (depth_ == 2 && top_key_ == TopKey::OtherData) {
      other_data_depth_ = depth_;
      other_data_ = json();
      has_other_data_ = true;
      other_.start(&other_data_);
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
        assembler_.add_event(event_);
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
      throw TraceError(source() + ": otherData must be an object, not an array");
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
    throw TraceError(fmt::format("{}: traceEvents[{}]{}: field '{}' must be {}", source(), assembler_.event_index(),
                                 event_.name.empty() ? "" : fmt::format(" (\"{}\")", event_.name),
                                 field_name(field_), expected_type(field_)));
  }
  // Containers nested beyond the readers' limit (json_limits.hpp): built into an arg's JSON, they
  // would exhaust the stack of the recursive code that prints and copies it.
  [[noreturn]] void depth_error() const {
    if (in_event()) event_error(json_depth_refusal());
    throw TraceError(fmt::format("{}: {}{}", source(), in_other_data() ? "otherData: " : "", json_depth_refusal()));
  }
  [[noreturn]] void event_error(const std::string& what) const {
    throw_event_error(source(), assembler_.event_index(), event_.name, what);
  }

  const std::string& source() const { return assembler_.source(); }

  TraceAssembler assembler_;
  json other_data_;  // the last otherData object read
  bool has_other_data_ = false;
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
  ValueBuilder other_;

  std::optional<std::size_t> error_position_;
  std::string error_text_;
};

Trace TraceSax::finish() {
  if (!saw_events_ || !root_done_)
    throw TraceError(source() + ": not a trace: no traceEvents array" +
                     (root_is_object_ ? std::string(" in the top-level object") : std::string()));
  if (has_other_data_) assembler_.set_other_data(std::move(other_data_));
  return assembler_.finish();
}

// 1-based line and column of a byte offset, for error messages.
std::pair<std::size_t, std::size_t> line_and_column(std::string_view text, std::size_t position) {
  position = std::min(position, text.size());
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i + 1 < position; ++i) {
    if (text[i] == '\n') { ++line; column = 1; } else { ++column; }
  }
  return {line, column};
}

}  // namespace

Trace parse_with_sax(std::string_view json_text, const std::string& source) {
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

}  // namespace pipescope::traces::detail
