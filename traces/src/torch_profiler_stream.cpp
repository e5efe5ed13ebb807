// The torch reader's fast path (torch_profiler_stream.hpp). The file's top level is walked by a
// small scanner that finds where each value ends (strings and brackets only, at memchr's pace
// through the long names); each event's text is then parsed by simdjson on its own, every value
// read to the end so that anything the reference parser refuses is refused here too. The
// scanner never decides what is valid: where it finds anything unexpected it gives way.
#include "torch_profiler_stream.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#ifdef PIPESCOPE_HAVE_SIMDJSON
#include <simdjson.h>
#endif

#include "file_text.hpp"
#ifdef PIPESCOPE_HAVE_SIMDJSON
#include "json_top_level_scanner.hpp"
#endif
#include "pipescope/core/json_limits.hpp"
#include "pipescope/traces/trace.hpp"
#include "pipescope/traces/trace_limits.hpp"
#include "torch_profiler_actions.hpp"

namespace pipescope::traces::detail {

namespace {

// distributedInfo's integer `key`, or TraceError naming it.
int distributed_info_int(const std::string& path, const nlohmann::json& info, const char* key, int fallback) {
  const auto it = info.find(key);
  if (it == info.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > (1 << 20))
    throw TraceError(fmt::format("{}: distributedInfo.{} must be an integer from 0 to {}", path, key, 1 << 20));
  return static_cast<int>(it->get<std::int64_t>());
}

}  // namespace

void read_torch_header(const nlohmann::json& doc, RankFile& f) {
  if (const auto info = doc.find("distributedInfo"); info != doc.end() && !info->is_null()) {
    if (!info->is_object()) throw TraceError(f.path + ": distributedInfo must be an object");
    f.has_distributed_info = info->contains("rank");
    f.rank = distributed_info_int(f.path, *info, "rank", 0);
    f.world_size = distributed_info_int(f.path, *info, "world_size", 1);
  }
  if (const auto host = doc.find("host_name"); host != doc.end() && host->is_string())
    f.host = host->get<std::string>();
}

#ifdef PIPESCOPE_HAVE_SIMDJSON
namespace torch_stream {

namespace ondemand = simdjson::ondemand;
using nlohmann::json;

static_assert(kTextPadding >= simdjson::SIMDJSON_PADDING);

// Thrown for anything the fast path is not sure of: the reference parser reads the file.
struct GiveWay {};

template <class T>
T ok(simdjson::simdjson_result<T>&& result) {
  T out{};
  if (std::move(result).get(out) != simdjson::SUCCESS) throw GiveWay{};
  return out;
}

// An element as a range-for over an array gives it (a trivially copyable result), read as above.
template <class T>
T ok(const simdjson::simdjson_result<T>& result) {
  return ok(simdjson::simdjson_result<T>(result));
}

// A value read whole, typed as nlohmann's parser types it (an operator's recorded shapes).
json to_json(ondemand::value value, int depth) {
  if (depth > kMaxJsonDepth) throw GiveWay{};
  switch (ok(value.type())) {
    case ondemand::json_type::object: {
      json out = json::object();
      for (auto field : ok(value.get_object())) {
        const std::string key(ok(field.unescaped_key()));
        out[key] = to_json(ok(field.value()), depth + 1);
      }
      return out;
    }
    case ondemand::json_type::array: {
      json out = json::array();
      for (auto element : ok(value.get_array())) out.push_back(to_json(ok(element), depth + 1));
      return out;
    }
    case ondemand::json_type::number: {
      ondemand::number number = ok(value.get_number());
      switch (number.get_number_type()) {
        case ondemand::number_type::signed_integer: return json(number.get_int64());
        case ondemand::number_type::unsigned_integer: return json(number.get_uint64());
        case ondemand::number_type::floating_point_number: return json(number.get_double());
      }
      throw GiveWay{};
    }
    case ondemand::json_type::string: return json(std::string(ok(value.get_string())));
    case ondemand::json_type::boolean: return json(ok(value.get_bool()));
    case ondemand::json_type::null:
      if (!ok(value.is_null())) throw GiveWay{};
      return json();
  }
  throw GiveWay{};
}

// A value read whole and dropped: reading it is what checks it.
void consume(ondemand::value value, int depth) {
  if (depth > kMaxJsonDepth) throw GiveWay{};
  switch (ok(value.type())) {
    case ondemand::json_type::object:
      for (auto field : ok(value.get_object())) {
        ok(field.unescaped_key());
        consume(ok(field.value()), depth + 1);
      }
      return;
    case ondemand::json_type::array:
      for (auto element : ok(value.get_array())) consume(ok(element), depth + 1);
      return;
    case ondemand::json_type::number: ok(value.get_number()); return;
    case ondemand::json_type::string: ok(value.get_string()); return;
    case ondemand::json_type::boolean: ok(value.get_bool()); return;
    case ondemand::json_type::null:
      if (!ok(value.is_null())) throw GiveWay{};
      return;
  }
  throw GiveWay{};
}

// What an event's field holds, as far as the rules and the reader care.
enum class Held : std::uint8_t { Absent, Null, Text, Integer, Number, Object, Other };

struct EventFields {
  Held ph = Held::Absent, name = Held::Absent, cat = Held::Absent, pid = Held::Absent, tid = Held::Absent;
  Held ts = Held::Absent, dur = Held::Absent, args = Held::Absent;
  std::string_view ph_text, name_text, cat_text, tid_text;
  std::int64_t pid_value = 0, tid_value = 0;
  double ts_us = 0, dur_us = 0;
  // args
  Held correlation = Held::Absent, total_allocated = Held::Absent, device_type = Held::Absent;
  std::int64_t correlation_value = 0;
  ondemand::number total_allocated_value{};
  double device_type_value = 0;
  std::optional<json> input_dims, input_type;
};

// A field's value as `Held`, reading strings and numbers (the text views live as long as the
// event's parse).
Held read_plain(ondemand::value v, std::string_view& text, std::int64_t& integer, double& number, int depth) {
  switch (ok(v.type())) {
    case ondemand::json_type::string: text = ok(v.get_string()); return Held::Text;
    case ondemand::json_type::number: {
      ondemand::number n = ok(v.get_number());
      if (n.get_number_type() == ondemand::number_type::signed_integer) {
        integer = n.get_int64();
        number = static_cast<double>(integer);
        return Held::Integer;
      }
      if (n.get_number_type() == ondemand::number_type::unsigned_integer) throw GiveWay{};  // past int64
      number = n.get_double();
      return Held::Number;
    }
    case ondemand::json_type::null:
      if (!ok(v.is_null())) throw GiveWay{};
      return Held::Null;
    default: consume(v, depth); return Held::Other;
  }
}

class EventReader {
 public:
  explicit EventReader(RankFile& f) : f_(f) {}

  // `text`: one event's; `readable_end`: how far past it may be read (simdjson's padding).
  void read(std::string_view text, const char* readable_end) {
    std::optional<simdjson::padded_string> copy;
    const char* data = text.data();
    std::size_t capacity = static_cast<std::size_t>(readable_end - data);
    if (capacity < text.size() + simdjson::SIMDJSON_PADDING) {
      copy.emplace(text.data(), text.size());
      data = copy->data(), capacity = text.size() + simdjson::SIMDJSON_PADDING;
    }
    ondemand::document doc = ok(parser_.iterate(data, text.size(), capacity));
    EventFields e;
    read_fields(ok(doc.get_object()), e);
    const char* rest = nullptr;
    if (doc.current_location().get(rest) == simdjson::SUCCESS) throw GiveWay{};
    keep(e);
  }

 private:
  // Each field once (a repeated one, where nlohmann keeps the last, gives way).
  void read_fields(ondemand::object object, EventFields& e) {
    unsigned seen = 0;
    auto first_time = [&seen](unsigned bit) {
      if (seen & bit) throw GiveWay{};
      seen |= bit;
    };
    double unused_number = 0;
    std::int64_t unused_integer = 0;
    std::string_view unused_text;
    for (auto field : object) {
      const std::string_view key = ok(field.unescaped_key());
      ondemand::value v = ok(field.value());
      if (key == "ph")
        first_time(1), e.ph = read_plain(v, e.ph_text, unused_integer, unused_number, 4);
      else if (key == "name")
        first_time(2), e.name = read_plain(v, e.name_text, unused_integer, unused_number, 4);
      else if (key == "cat")
        first_time(4), e.cat = read_plain(v, e.cat_text, unused_integer, unused_number, 4);
      else if (key == "pid")
        first_time(8), e.pid = read_plain(v, unused_text, e.pid_value, unused_number, 4);
      else if (key == "tid")
        first_time(16), e.tid = read_plain(v, e.tid_text, e.tid_value, unused_number, 4);
      else if (key == "ts")
        first_time(32), e.ts = read_plain(v, unused_text, unused_integer, e.ts_us, 4);
      else if (key == "dur")
        first_time(64), e.dur = read_plain(v, unused_text, unused_integer, e.dur_us, 4);
      else if (key == "args")
        first_time(128), read_args(v, e);
      else
        consume(v, 4);
    }
  }

  void read_args(ondemand::value v, EventFields& e) {
    if (ok(v.type()) != ondemand::json_type::object) {
      consume(v, 4);
      e.args = Held::Other;
      return;
    }
    e.args = Held::Object;
    unsigned seen = 0;
    auto first_time = [&seen](unsigned bit) {
      if (seen & bit) throw GiveWay{};
      seen |= bit;
    };
    double unused_number = 0;
    std::string_view unused_text;
    for (auto field : ok(v.get_object())) {
      const std::string_view key = ok(field.unescaped_key());
      ondemand::value a = ok(field.value());
      if (key == "correlation") {
        first_time(1), e.correlation = read_plain(a, unused_text, e.correlation_value, unused_number, 5);
      } else if (key == "Total Allocated") {
        first_time(2);
        if (ok(a.type()) == ondemand::json_type::number) {
          e.total_allocated_value = ok(a.get_number());
          e.total_allocated = Held::Number;
        } else {
          consume(a, 5);
          e.total_allocated = Held::Other;
        }
      } else if (key == "Device Type") {
        std::int64_t integer = 0;
        first_time(4), e.device_type = read_plain(a, unused_text, integer, e.device_type_value, 5);
      } else if (key == "Input Dims") {
        first_time(8), e.input_dims = to_json(a, 5);
      } else if (key == "Input type") {
        first_time(16), e.input_type = to_json(a, 5);
      } else {
        consume(a, 5);
      }
    }
  }

  // load_rank_file's rules (check_events), then the event into the store.
  void keep(const EventFields& e) {
    const bool memory = e.name == Held::Text && e.name_text == kMemorySampleName;
    if (e.ph == Held::Absent || e.ph == Held::Null) {
      if (memory) throw GiveWay{};  // unchecked, yet read as a sample: the reference path says how
      return;
    }
    if (e.ph != Held::Text) throw GiveWay{};
    for (const Held id : {e.pid, e.tid})
      if (id != Held::Absent && id != Held::Integer && id != Held::Text) throw GiveWay{};
    const bool complete = e.ph_text == "X";
    if (complete) {
      if (e.name != Held::Text || !is_number(e.ts) || !is_number(e.dur)) throw GiveWay{};
      if (timestamp_problem(e.ts_us) || duration_problem(e.dur_us)) throw GiveWay{};
      f_.first_us = std::min(f_.first_us, e.ts_us);
      f_.last_us = std::max(f_.last_us, e.ts_us);
    }
    if (memory && e.args == Held::Object && e.total_allocated != Held::Absent) keep_memory_sample(e);
    if (complete && e.pid == Held::Integer) keep_span(e);
  }

  static bool is_number(Held h) { return h == Held::Integer || h == Held::Number; }

  void keep_memory_sample(const EventFields& e) {
    if (!is_number(e.ts) || timestamp_problem(e.ts_us)) throw GiveWay{};
    if (e.total_allocated != Held::Number) throw GiveWay{};
    ondemand::number n = e.total_allocated_value;
    if (n.get_number_type() == ondemand::number_type::unsigned_integer) throw GiveWay{};
    const double bytes = n.as_double();
    if (bytes_problem(bytes)) throw GiveWay{};
    const bool host = !is_number(e.device_type) || e.device_type_value == 0;
    f_.events.memory.push_back(
        {e.ts_us, n.is_int64() ? n.get_int64() : static_cast<std::int64_t>(n.get_double()), host});
  }

  void keep_span(const EventFields& e) {
    TorchSpan s;
    if (e.cat != Held::Text || !torch_activity_of(e.cat_text, s.activity)) return;
    TorchEvents& store = f_.events;
    s.ts_us = e.ts_us;
    s.dur_us = e.dur_us;
    s.pid = e.pid_value;
    s.name = store.strings.intern(e.name_text);
    s.tid = e.tid == Held::Text      ? store.strings.intern(e.tid_text)
            : e.tid == Held::Integer ? store.strings.intern(std::to_string(e.tid_value))
                                     : store.strings.intern("0");
    if (e.args == Held::Object) {
      if (e.correlation == Held::Integer) s.has_correlation = true, s.correlation = e.correlation_value;
      const bool cpu = s.activity == TorchActivity::CpuOperator || s.activity == TorchActivity::UserAnnotation;
      if (cpu && (e.input_dims || e.input_type)) {
        json shapes = json::object();
        if (e.input_dims) shapes["Input Dims"] = *e.input_dims;
        if (e.input_type) shapes["Input type"] = *e.input_type;
        store.set_shapes(s, shapes);
      }
    }
    store.spans.push_back(s);
  }

  RankFile& f_;
  ondemand::parser parser_;
};

constexpr std::size_t kEventsPerReport = 1 << 12;

void read_events(JsonTopLevelScanner& scan, EventReader& reader, FileProgress& progress,
                 const std::function<void(std::uint64_t)>& passed) {
  scan.expect('[');
  if (scan.peek() == ']') {
    scan.expect(']');
    return;
  }
  for (std::size_t count = 1;; ++count) {
    if (scan.peek() != '{') throw GiveWay{};  // not an object: the reference parser names it
    int depth = 0;
    const std::string_view event = scan.value(depth);
    if (2 + depth > kMaxJsonDepth) throw GiveWay{};
    reader.read(event, scan.readable_end());
    if (count % kEventsPerReport == 0) {
      progress.at(scan.offset());
      passed(scan.offset());
    }
    const char c = scan.peek();
    scan.expect(c);
    if (c == ']') return;
    if (c != ',') throw GiveWay{};
  }
}

void read_text(JsonTopLevelScanner& scan, RankFile& f, FileProgress& progress,
               const std::function<void(std::uint64_t)>& passed) {
  EventReader reader(f);
  json header = json::object();
  bool saw_events = false;
  scan.expect('{');
  for (;;) {
    const std::string key(scan.key());  // a copy: the scanner moves on
    scan.expect(':');
    if (key == "traceEvents") {
      if (saw_events) throw GiveWay{};
      if (scan.peek() != '[') throw GiveWay{};
      read_events(scan, reader, progress, passed);
      saw_events = true;
    } else {
      int depth = 0;
      const std::string_view value = scan.value(depth);
      if (1 + depth > kMaxJsonDepth) throw GiveWay{};
      json parsed = json::parse(value.begin(), value.end(), nullptr, false);
      if (parsed.is_discarded()) throw GiveWay{};
      if (key == "distributedInfo" || key == "host_name") {
        if (header.contains(key)) throw GiveWay{};
        header[key] = std::move(parsed);
      }
    }
    const char c = scan.peek();
    scan.expect(c);
    if (c == '}') break;
    if (c != ',') throw GiveWay{};
  }
  if (!saw_events || !scan.at_end()) throw GiveWay{};
  read_torch_header(header, f);
}

// Runs the pass; false where it gives way.
template <class Pass>
bool fast_pass(Pass&& pass) {
  try {
    pass();
    return true;
  } catch (const GiveWay&) {
    return false;
  } catch (const ScanGivesWay&) {
    return false;
  } catch (const simdjson::simdjson_error&) {
    return false;
  } catch (const TraceError&) {
    return false;  // the reference path says it, in its order
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace torch_stream

bool read_torch_text_fast(std::string_view text, RankFile& f, FileProgress& progress,
                          const std::function<void(std::uint64_t)>& passed) {
  return torch_stream::fast_pass([&text, &f, &progress, &passed] {
    JsonTopLevelScanner scan(text);
    torch_stream::read_text(scan, f, progress, passed);
  });
}

bool read_torch_chunks_fast(TextChunks& chunks, RankFile& f, FileProgress& progress) {
  return torch_stream::fast_pass([&chunks, &f, &progress] {
    std::string window;
    JsonTopLevelScanner scan(chunks, window);
    torch_stream::read_text(scan, f, progress, [](std::uint64_t) {});
  });
}
#else
bool read_torch_text_fast(std::string_view, RankFile&, FileProgress&, const std::function<void(std::uint64_t)>&) {
  return false;
}
bool read_torch_chunks_fast(TextChunks&, RankFile&, FileProgress&) { return false; }
#endif

}  // namespace pipescope::traces::detail
