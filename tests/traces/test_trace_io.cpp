// Trace files (SPEC.md section 5). A two-rank trace with compute and transfer events, memory
// counters, a flow and otherData extras is written and read back unchanged (plain and gzip).
// Times are shifted so the earliest event is at 0 (a trace starting at 100 us reads back
// starting at 0). Plain Chrome traces (PyTorch-style pids 4242/977, string tids, B/E pairs)
// get dense ranks 0, 1 and lanes in ascending order of tid. Broken files (empty, not JSON,
// truncated, wrong types) throw TraceError naming the file and the place.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/traces/trace_io.hpp"

using namespace pipescope::traces;
namespace fs = std::filesystem;

namespace {

Trace two_rank_trace() {
  Trace t;
  t.meta.source = "predicted";
  t.meta.schedule = "1f1b";
  t.meta.num_ranks = 2;
  t.meta.num_stages = 2;
  t.meta.num_micro_batches = 1;
  t.meta.extra["cost_model"] = "uniform";
  auto add = [&](int rank, int lane, std::string name, double ts, double dur, int stage, int mb, int peer = -1,
                 std::int64_t bytes = -1) {
    TraceEvent e;
    e.rank = rank;
    e.lane = lane;
    e.name = std::move(name);
    e.kind = event_kind_from_name(e.name);  // as a reader would parse it
    e.ts_us = ts;
    e.dur_us = dur;
    e.stage = stage;
    e.micro_batch = mb;
    e.peer_rank = peer;
    e.bytes = bytes;
    t.events.push_back(e);
  };
  add(0, 0, "F", 0, 812.5, 0, 0);
  add(0, 1, "SEND_F", 812.5, 40.125, 0, 0, 1, 4194304);
  add(1, 2, "RECV_F", 812.5, 40.125, 1, 0, 0, 4194304);
  add(1, 0, "F", 852.625, 800, 1, 0);
  add(1, 0, "B", 1652.625, 1600, 1, 0);
  add(0, 0, "B", 3300, 1600.25, 0, 0);
  t.memory = {{0, 0, 0}, {0, 812.5, 1073741824}, {0, 4900.25, 0}, {1, 852.625, 2147483648LL}};
  t.flows = {{0, 1, 812.5, 1, 2, 852.625}};
  for (auto& e : t.events) e.category = default_category(e.kind);
  return t;
}

void require_same(const Trace& a, const Trace& b) {
  REQUIRE(a.meta.format == b.meta.format);
  REQUIRE(a.meta.source == b.meta.source);
  REQUIRE(a.meta.schedule == b.meta.schedule);
  REQUIRE(a.meta.num_ranks == b.meta.num_ranks);
  REQUIRE(a.meta.num_micro_batches == b.meta.num_micro_batches);
  REQUIRE(a.meta.extra == b.meta.extra);
  REQUIRE(a.events.size() == b.events.size());
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    const auto &x = a.events[i], &y = b.events[i];
    INFO("event " << i);
    REQUIRE(x.rank == y.rank);
    REQUIRE(x.lane == y.lane);
    REQUIRE(x.name == y.name);
    REQUIRE(x.category == y.category);
    REQUIRE(x.ts_us == y.ts_us);
    REQUIRE(x.dur_us == y.dur_us);
    REQUIRE(x.stage == y.stage);
    REQUIRE(x.micro_batch == y.micro_batch);
    REQUIRE(x.peer_rank == y.peer_rank);
    REQUIRE(x.bytes == y.bytes);
  }
  REQUIRE(a.memory.size() == b.memory.size());
  for (std::size_t i = 0; i < a.memory.size(); ++i) {
    REQUIRE(a.memory[i].rank == b.memory[i].rank);
    REQUIRE(a.memory[i].ts_us == b.memory[i].ts_us);
    REQUIRE(a.memory[i].bytes == b.memory[i].bytes);
  }
  REQUIRE(a.flows.size() == b.flows.size());
  for (std::size_t i = 0; i < a.flows.size(); ++i) {
    REQUIRE(a.flows[i].from_rank == b.flows[i].from_rank);
    REQUIRE(a.flows[i].from_lane == b.flows[i].from_lane);
    REQUIRE(a.flows[i].from_ts_us == b.flows[i].from_ts_us);
    REQUIRE(a.flows[i].to_rank == b.flows[i].to_rank);
    REQUIRE(a.flows[i].to_lane == b.flows[i].to_lane);
    REQUIRE(a.flows[i].to_ts_us == b.flows[i].to_ts_us);
  }
}

std::string temp_path(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("pipescope_test_traces_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

std::string error_of(std::string_view text, const std::string& source = "t.json") {
  try {
    parse_trace(text, source);
  } catch (const TraceError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("a trace survives to_trace_json and parse_trace unchanged", "[trace_io]") {
  const Trace original = two_rank_trace();
  const Trace back = parse_trace(to_trace_json(original), "memory");
  require_same(original, back);
  REQUIRE(back.rank_count() == 2);
  REQUIRE(back.end_us() == Approx(4900.25));
  REQUIRE(back.rank_names == std::vector<std::string>{"rank 0", "rank 1"});
  REQUIRE(back.lane_names.at(1).at(2) == "receive");
}

TEST_CASE("an event's further args are written beside its typed ones and read back", "[trace_io]") {
  Trace original = two_rank_trace();
  REQUIRE(original.events.size() >= 2);
  original.args.push_back({1, R"({"layer": 3, "peers": [0, 1], "tokens_per_expert": [5, 7]})"});
  const std::string json = to_trace_json(original);
  const Trace back = parse_trace(json, "memory");
  REQUIRE(back.args.size() == 1);
  CHECK(back.args[0].event == 1);
  CHECK(nlohmann::json::parse(back.args[0].json) == nlohmann::json::parse(original.args[0].json));
  CHECK(back.events[1].stage == original.events[1].stage);  // the typed ones stay typed
  // Written again, nothing is lost or doubled; from then on the text is stable (the reader keeps
  // args in compact JSON, so the first round may change their spacing).
  const std::string again = to_trace_json(back);
  CHECK(again.find("\"layer\"") != std::string::npos);
  CHECK(again.find("\"layer\"") == again.rfind("\"layer\""));
  CHECK(to_trace_json(parse_trace(again, "memory")) == again);
}

TEST_CASE("write_trace and read_trace round-trip plain and gzip files", "[trace_io]") {
  const Trace original = two_rank_trace();
  for (const std::string name : {"round.json", "round.json.gz"}) {
    const std::string path = temp_path(name);
    write_trace(original, path);
    const std::string bytes = pipescope::read_file(path);
    const bool gz = name.size() > 3 && name.substr(name.size() - 3) == ".gz";
    REQUIRE((static_cast<unsigned char>(bytes[0]) == 0x1f) == gz);
    require_same(original, read_trace(path));
  }
}

TEST_CASE("the written file is the SPEC.md section 5 layout", "[trace_io]") {
  const auto doc = nlohmann::json::parse(to_trace_json(two_rank_trace()));
  REQUIRE(doc["otherData"]["format"] == "pipescope.trace/1");
  REQUIRE(doc["otherData"]["source"] == "predicted");
  REQUIRE(doc["otherData"]["cost_model"] == "uniform");
  const auto& events = doc["traceEvents"];
  // 2 process_name + 8 thread_name + 6 X + 4 C + 2 flow.
  REQUIRE(events.size() == 22);
  REQUIRE(events[0] == nlohmann::json::parse(R"({"ph":"M","name":"process_name","pid":0,"args":{"name":"rank 0"}})"));
  const auto send = std::find_if(events.begin(), events.end(), [](const auto& e) { return e["name"] == "SEND_F"; });
  REQUIRE(*send ==
          nlohmann::json::parse(R"({"ph":"X","name":"SEND_F","cat":"p2p","pid":0,"tid":1,"ts":812.5,"dur":40.125,
      "args":{"stage":0,"micro_batch":0,"peer_rank":1,"bytes":4194304}})"));
  const auto counter = std::find_if(events.begin(), events.end(), [](const auto& e) { return e["ph"] == "C"; });
  REQUIRE((*counter)["args"]["bytes"] == 0);
}

TEST_CASE("times are shifted so that the earliest event is at 0", "[trace_io]") {
  Trace t = two_rank_trace();
  for (auto& e : t.events) e.ts_us += 100;
  for (auto& m : t.memory) m.ts_us += 100;
  for (auto& f : t.flows) f.from_ts_us += 100, f.to_ts_us += 100;
  const Trace back = parse_trace(to_trace_json(t), "shifted");
  require_same(two_rank_trace(), back);

  const Trace late = parse_trace(R"({"traceEvents":[{"ph":"X","name":"F","pid":0,"tid":0,"ts":1000,"dur":5},
      {"ph":"X","name":"B","pid":0,"tid":0,"ts":1010,"dur":7}]})",
                                 "late");
  REQUIRE(late.events[0].ts_us == 0);
  REQUIRE(late.events[1].ts_us == 10);
}

TEST_CASE("plain Chrome traces fall back to name, pid and tid", "[trace_io]") {
  // A PyTorch-profiler-like trace: OS pids, a string tid, B/E pairs, no otherData.
  const char* text = R"([
    {"ph":"M","name":"process_name","pid":4242,"args":{"name":"python"}},
    {"ph":"X","name":"aten::mm","cat":"cpu_op","pid":4242,"tid":31,"ts":1000.5,"dur":20,"args":{"External id":3}},
    {"ph":"B","name":"step","pid":977,"tid":"stream 7","ts":1001},
    {"ph":"i","name":"marker","pid":977,"tid":1,"ts":1002,"s":"t"},
    {"ph":"E","pid":977,"tid":"stream 7","ts":1031},
    {"ph":"X","name":"kernel","pid":977,"tid":5,"ts":1003,"dur":4}
  ])";
  const Trace t = parse_trace(text, "torch.json");
  REQUIRE(t.meta.format.empty());
  REQUIRE(t.events.size() == 3);
  REQUIRE(t.rank_count() == 2);
  REQUIRE(t.rank_names == std::vector<std::string>{"pid 977", "python"});
  const auto& mm = t.events[0];
  REQUIRE(mm.name == "aten::mm");
  REQUIRE(mm.rank == 1);
  REQUIRE(mm.lane == 0);
  REQUIRE(mm.ts_us == 0);
  REQUIRE(mm.stage == -1);
  // On pid 977 the timeline tids are 5 and "stream 7" (the instant event on tid 1 is not a
  // slice): numbers first, ascending.
  // Events are kept in file order; a B/E slice counts where its E is.
  const auto& kernel = t.events[2];
  REQUIRE(kernel.name == "kernel");
  REQUIRE(kernel.lane == 0);
  REQUIRE(kernel.ts_us == Approx(2.5));
  const auto& step = t.events[1];
  REQUIRE(step.name == "step");
  REQUIRE(step.rank == 0);
  REQUIRE(step.lane == 1);
  REQUIRE(step.dur_us == 30);
  REQUIRE(t.lane_names.at(0) == std::vector<std::string>{"tid 5", "tid stream 7"});
}

TEST_CASE("broken traces are refused with the file and the place named", "[trace_io]") {
  using Catch::Matchers::Contains;
  REQUIRE_THAT(error_of(""), Contains("t.json") && Contains("empty"));
  REQUIRE_THAT(error_of("  \n "), Contains("empty"));
  REQUIRE_THAT(error_of("this is not json"), Contains("t.json: line 1, column") && Contains("not valid JSON"));
  REQUIRE_THAT(error_of("{\"traceEvents\": [\n{\"ph\": \"X\", \"name\": \"F\",\n \"ts\": 1"),
               Contains("line 3") && Contains("truncated"));
  REQUIRE_THAT(error_of(R"({"displayTimeUnit": "ns"})"), Contains("no traceEvents"));
  REQUIRE_THAT(error_of(R"({"traceEvents": {}})"), Contains("traceEvents must be an array"));
  REQUIRE_THAT(error_of(R"({"traceEvents": [{"ph":"X","name":"F","pid":0,"tid":0,"ts":"soon","dur":1}]})"),
               Contains("traceEvents[0]") && Contains("\"F\"") && Contains("'ts' must be a number"));
  REQUIRE_THAT(
      error_of(
          R"({"traceEvents": [{"ph":"M"}, {"ph":"X","name":"F","pid":0,"tid":0,"ts":1,"dur":1,"args":{"stage":"zero"}}]})"),
      Contains("traceEvents[1]") && Contains("'args.stage' must be an integer"));
  REQUIRE_THAT(error_of(R"({"traceEvents": [{"ph":"X","name":"F","pid":0,"tid":0,"ts":1}]})"),
               Contains("'dur' is missing"));
  REQUIRE_THAT(error_of(R"({"traceEvents": [{"ph":"X","name":"F","pid":0,"tid":0,"ts":1,"dur":-2}]})"),
               Contains("negative"));
  REQUIRE_THAT(error_of(R"({"traceEvents": [{"ph":"X","name":"F","pid":0,"tid":0,"ts":1,"dur":2,"args":5}]})"),
               Contains("'args' must be an object"));
  REQUIRE_THAT(error_of(R"({"traceEvents": [17]})"), Contains("traceEvents[0]") && Contains("must be an object"));
  REQUIRE_THAT(error_of(R"({"otherData": {"format": "pipescope.trace/1"},
      "traceEvents": [{"ph":"X","name":"F","pid":-1,"tid":0,"ts":1,"dur":2}]})"),
               Contains("pid -1 is not a rank"));
  REQUIRE_THAT(error_of(R"({"otherData": {"format": "pipescope.trace/1", "num_ranks": "four"}, "traceEvents": []})"),
               Contains("otherData.num_ranks must be an integer"));
  REQUIRE_THAT(error_of(R"({"traceEvents": [{"ph":"B","name":"F","pid":0,"tid":0,"ts":1}]})"),
               Contains("no end event"));
}

TEST_CASE("JSON errors hidden where the reader looks at nothing are still refused", "[trace_io]") {
  // The fast reader parses on demand, which checks only what it is asked for: each of these
  // is broken inside a value the trace ignores (an unknown field, extra args, nested data)
  // or after the top-level value, and must be refused like any other broken JSON.
  using Catch::Matchers::Contains;
  const std::string good_event = R"({"ph":"X","name":"F","pid":0,"tid":0,"ts":1,"dur":2})";
  const std::vector<std::string> broken = {
      R"({"traceEvents": [{"ph":"X","name":"F","pid":0,"tid":0,"ts":1,"dur":2,"extra":[1, tru]}]})",
      R"({"traceEvents": [{"ph":"X","name":"F","pid":0,"tid":0,"ts":1,"dur":2,"args":{"deep":{"x":nul}}}]})",
      R"({"traceEvents": [{"ph":"X","name":"F","pid":0,"tid":0,"ts":1,"dur":2,"args":{"note":"a\qb"}}]})",
      R"({"traceEvents": [{"ph":"X","name":"F","pid":0,"tid":0,"ts":1,"dur":2,"args":{"n":1.2.3}}]})",
      R"({"traceEvents": [{"ph":"X","name":"F","pid":0,"tid":0,"ts":1,"dur":2,"args":{"n":-}}]})",
      R"({"traceEvents": [)" + good_event + R"(], "stackFrames": {"1": [falsey]}})",
      R"({"traceEvents": [)" + good_event + R"(], "otherData": {"a": [1,]}})",
      R"({"traceEvents": [)" + good_event + R"(]} {"traceEvents": []})",
      R"({"traceEvents": [)" + good_event + R"(]}})",
      R"({"traceEvents": [)" + good_event + R"(]} x)",
      R"([)" + good_event + R"(] ])",
      R"({"traceEvents": [)" + good_event + R"(,]})",
      R"({"traceEvents": [)" + good_event + R"( )" + good_event + R"(]})",
      R"({"traceEvents": [{"ph":"X","name":"F" "pid":0,"tid":0,"ts":1,"dur":2}]})",
  };
  for (const std::string& text : broken) {
    INFO(text);
    REQUIRE_THAT(error_of(text), Contains("t.json: line 1, column"));
  }
  // The same events, well-formed, with unknown fields of every kind, read the same as plain.
  const Trace plain = parse_trace(R"({"traceEvents": [)" + good_event + R"(]})", "plain");
  const Trace extras = parse_trace(
      R"({"meta": {"a": [true, false, null, -1.5e3, "s\u00e9"]}, "traceEvents": [{"ph":"X","name":"F","pid":0,"tid":0,"ts":1,"dur":2,)"
      R"("extra":{"k":[{}, []]},"args":{"note":"x","list":[1,2],"stage":null}}], "displayTimeUnit": "ms"})",
      "extras");
  REQUIRE(extras.events.size() == 1);
  REQUIRE(extras.events[0].name == plain.events[0].name);
  REQUIRE(extras.events[0].dur_us == plain.events[0].dur_us);
  REQUIRE(extras.events[0].stage == -1);
}

TEST_CASE("escaped keys and names, and integers written as floats, read as the reference parser reads them",
          "[trace_io]") {
  // "n\u0061me" is the key "name"; pid 1.0 is the integer 1 (the fast reader hands both to
  // the reference parser); a name with an escaped quote keeps it.
  const Trace t = parse_trace(
      R"({"traceEvents": [{"ph":"X","n\u0061me":"F\"1","pid":1.0,"tid":0,"ts":5,"dur":2,"args":{"stage":3}}]})", "e");
  REQUIRE(t.events.size() == 1);
  REQUIRE(t.events[0].name == "F\"1");
  REQUIRE(t.events[0].stage == 3);
  REQUIRE(t.rank_count() == 1);
}

TEST_CASE("read_trace names the file for missing, truncated gzip and broken files", "[trace_io]") {
  using Catch::Matchers::Contains;
  const std::string missing = temp_path("does-not-exist.json");
  REQUIRE_THROWS_WITH(read_trace(missing), Contains("does-not-exist.json"));

  const std::string gz = temp_path("cut.json.gz");
  write_trace(two_rank_trace(), gz);
  std::string bytes = pipescope::read_file(gz);
  pipescope::write_file_atomic(gz, std::string_view(bytes).substr(0, bytes.size() / 2));
  REQUIRE_THROWS_AS(read_trace(gz), TraceError);
  REQUIRE_THROWS_WITH(read_trace(gz), Contains("cut.json.gz"));

  const std::string broken = temp_path("broken.json");
  pipescope::write_file_atomic(broken, "{\"traceEvents\": [{\"ph\": ");
  REQUIRE_THROWS_WITH(read_trace(broken), Contains("broken.json: line 1"));
}

TEST_CASE("an empty event list is a valid, empty trace", "[trace_io]") {
  const Trace t =
      parse_trace(R"({"otherData": {"format": "pipescope.trace/1", "num_ranks": 3}, "traceEvents": []})", "e");
  REQUIRE(t.events.empty());
  REQUIRE(t.rank_count() == 3);
  REQUIRE(t.end_us() == 0);
}

TEST_CASE("writing refuses non-finite times and negative durations", "[trace_io]") {
  Trace t = two_rank_trace();
  t.events[2].dur_us = -1;
  REQUIRE_THROWS_AS(to_trace_json(t), TraceError);
  t = two_rank_trace();
  t.memory[0].ts_us = std::nan("");
  REQUIRE_THROWS_AS(to_trace_json(t), TraceError);
}
