// The fast path of the trace reader: simdjson's on-demand parser feeding the trace assembler.
// A million events in about a second, with no document tree in memory. It reads only what it
// is sure of and gives way to the reference parser (trace_sax.cpp) for anything else, so the
// two never give a file different meanings (tests/fuzz/fuzz_trace_parsers.cpp holds them to it).
#include "trace_simdjson.hpp"

#ifdef PIPESCOPE_HAVE_SIMDJSON
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "trace_raw_event.hpp"
#include "pipescope/core/json_limits.hpp"
#include "pipescope/traces/trace_limits.hpp"
#endif

namespace pipescope::traces::detail {

#ifdef PIPESCOPE_HAVE_SIMDJSON
namespace {

using json = nlohmann::json;

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

// An element as a range-for over an array gives it: a copy (the type is trivially copyable)
// read as above.
template <class T>
T checked(const simdjson::simdjson_result<T>& result) {
  return checked(simdjson::simdjson_result<T>(result));
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
      for (auto element : checked(value.get_array())) consume(checked(element), depth + 1);
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
      for (auto element : checked(value.get_array())) out.push_back(to_json(checked(element), depth + 1));
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
  if (checked(value.type()) == ondemand::json_type::string)
    return RawId{true, 0, std::string(checked(value.get_string()))};
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

// Where the reading is, told to `progress` every kEventsPerReport events.
constexpr std::size_t kEventsPerReport = 1 << 12;

struct ProgressOfText {
  FileProgress* progress = nullptr;
  ondemand::document* doc = nullptr;
  const char* text = nullptr;
  void report() const {
    const char* at = nullptr;
    if (progress && doc->current_location().get(at) == simdjson::SUCCESS)
      progress->at(static_cast<std::uint64_t>(at - text));
  }
};

void read_events(ondemand::array events, TraceAssembler& assembler, const ProgressOfText& where) {
  PendingEvent e;
  std::size_t count = 0;
  for (auto element : events) {
    ondemand::object object = checked(checked(element).get_object());
    read_event(object, e);
    assembler.add_event(e);
    if (++count % kEventsPerReport == 0) where.report();
  }
}

bool read_with_simdjson_checked(std::string_view text, bool text_is_padded, TraceAssembler& assembler,
                                FileProgress* progress) {
  std::optional<simdjson::padded_string> copy;
  if (!text_is_padded) copy.emplace(text.data(), text.size());
  const simdjson::padded_string_view padded =
      copy ? simdjson::padded_string_view(*copy)
           : simdjson::padded_string_view(text.data(), text.size(), text.size() + kPadding);
  // Events take about 136 bytes each in memory and at least ~60 in the text: reserving for
  // the upper bound touches no memory, and saves moving a million events while growing.
  assembler.reserve_events(text.size() / 64);
  ondemand::parser parser;
  ondemand::document doc = checked(parser.iterate(padded));
  const ProgressOfText where{progress, &doc, padded.data()};
  const ondemand::json_type root_type = checked(doc.type());
  if (root_type == ondemand::json_type::array) {
    read_events(checked(doc.get_array()), assembler, where);
  } else if (root_type == ondemand::json_type::object) {
    bool saw_events = false;
    for (auto field : checked(doc.get_object())) {
      const std::string_view key = checked(field.unescaped_key());
      ondemand::value v = checked(field.value());
      if (key == "traceEvents") {
        read_events(checked(v.get_array()), assembler, where);
        saw_events = true;
      } else if (key == "otherData") {
        if (checked(v.type()) != ondemand::json_type::object) return false;
        assembler.set_other_data(to_json(v, 1));
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
  return true;
}

}  // namespace

bool read_with_simdjson(std::string_view text, bool text_is_padded, TraceAssembler& assembler, FileProgress* progress) {
  try {
    return read_with_simdjson_checked(text, text_is_padded, assembler, progress);
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

bool have_simdjson() { return true; }
#else
bool read_with_simdjson(std::string_view, bool, TraceAssembler&, FileProgress*) { return false; }
bool have_simdjson() { return false; }
#endif

}  // namespace pipescope::traces::detail
