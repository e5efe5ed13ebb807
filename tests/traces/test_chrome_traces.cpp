// Plain Chrome traces read as what they are (no pipescope otherData). The trace below has a
// process "python3 trainer" (pid 7) with a thread "main thread" (tid 42): a "step" X slice
// at 1000 us (100 us) holding a B/E "forward" slice 1010..1050 us, an instant "checkpoint"
// at 1060 us on that thread, an instant "epoch" on a thread with no slices (it marks the whole
// process: lane -1, no lane made for it), a counter "queue" {depth: 4} and a counter "mem"
// {allocated: 10, reserved: 20}. Times shift so that the earliest is 0: the instant is at 60 us. The names come from the
// metadata; args the typed fields do not hold stay with their event as JSON (nested ones
// too); counters other than memory become one series per value ("queue", "mem.allocated",
// "mem.reserved").
#include <catch2/catch.hpp>

#include <algorithm>

#include "pipescope/traces/trace_io.hpp"

using namespace pipescope::traces;

namespace {

constexpr const char* kPlainTrace = R"({"traceEvents": [
 {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "python3 trainer"}},
 {"ph": "M", "name": "thread_name", "pid": 7, "tid": 42, "args": {"name": "main thread"}},
 {"ph": "X", "name": "step", "cat": "user", "pid": 7, "tid": 42, "ts": 1000, "dur": 100,
  "args": {"step": 3, "phase": "train", "shape": [2, 3], "ok": true}},
 {"ph": "B", "name": "forward", "pid": 7, "tid": 42, "ts": 1010, "args": {"module": "Linear"}},
 {"ph": "E", "pid": 7, "tid": 42, "ts": 1050},
 {"ph": "i", "name": "checkpoint", "pid": 7, "tid": 42, "ts": 1060, "s": "t"},
 {"ph": "i", "name": "epoch", "pid": 7, "tid": 9, "ts": 1070, "s": "p"},
 {"ph": "C", "name": "queue", "pid": 7, "ts": 1020, "args": {"depth": 4}},
 {"ph": "C", "name": "mem", "pid": 7, "ts": 1030, "args": {"allocated": 10, "reserved": 20}}
]})";

}  // namespace

TEST_CASE("a plain Chrome trace keeps its names, args, instants and counters", "[chrome]") {
  const Trace t = parse_trace(kPlainTrace, "plain.json");
  REQUIRE(t.meta.format.empty());
  REQUIRE(t.rank_names.size() == 1);
  REQUIRE(t.rank_names[0] == "python3 trainer");
  REQUIRE(t.lane_names[0][0] == "main thread");

  REQUIRE(t.events.size() == 2);
  const auto step = std::find_if(t.events.begin(), t.events.end(), [](const auto& e) { return e.name == "step"; });
  const auto forward = std::find_if(t.events.begin(), t.events.end(), [](const auto& e) { return e.name == "forward"; });
  REQUIRE(step != t.events.end());
  REQUIRE(forward != t.events.end());
  REQUIRE(step->ts_us == 0);
  REQUIRE(forward->ts_us == 10);
  REQUIRE(forward->dur_us == 40);

  const std::string* step_args = t.args_of(static_cast<std::size_t>(step - t.events.begin()));
  REQUIRE(step_args != nullptr);
  REQUIRE(nlohmann::json::parse(*step_args) == nlohmann::json::parse(R"({"step": 3, "phase": "train", "shape": [2, 3], "ok": true})"));
  const std::string* forward_args = t.args_of(static_cast<std::size_t>(forward - t.events.begin()));
  REQUIRE(forward_args != nullptr);
  REQUIRE(nlohmann::json::parse(*forward_args) == nlohmann::json::parse(R"({"module": "Linear"})"));

  REQUIRE(t.instants.size() == 2);
  REQUIRE(t.instants[1].name == "epoch");
  REQUIRE(t.instants[1].lane == -1);
  REQUIRE(t.lane_names[0].size() == 1);
  REQUIRE(t.instants[0].name == "checkpoint");
  REQUIRE(t.instants[0].ts_us == 60);
  REQUIRE(t.instants[0].rank == 0);
  REQUIRE(t.instants[0].lane == 0);

  REQUIRE(t.counters.size() == 3);
  REQUIRE(t.counters[0].name == "queue");
  REQUIRE(t.counters[0].value == 4);
  REQUIRE(t.counters[0].ts_us == 20);
  REQUIRE(t.counters[1].name == "mem.allocated");
  REQUIRE(t.counters[1].value == 10);
  REQUIRE(t.counters[2].name == "mem.reserved");
  REQUIRE(t.counters[2].value == 20);
  REQUIRE(t.memory.empty());
}

TEST_CASE("the reference parser keeps the same args, nested ones whole", "[chrome]") {
  // An escaped key ("n\u0061me" is "name") sends the file to the reference parser.
  std::string text = kPlainTrace;
  const std::string plain_key = R"("name": "step")";
  text.replace(text.find(plain_key), plain_key.size(), R"("n\u0061me": "step")");
  const Trace t = parse_trace(text, "escaped.json");
  REQUIRE(t.events.size() == 2);
  REQUIRE(t.events[0].name == "step");
  const std::string* step_args = t.args_of(0);
  REQUIRE(step_args != nullptr);
  REQUIRE(nlohmann::json::parse(*step_args) == nlohmann::json::parse(R"({"step": 3, "phase": "train", "shape": [2, 3], "ok": true})"));
  REQUIRE(t.instants.size() == 2);
  REQUIRE(t.counters.size() == 3);
}

TEST_CASE("a pipescope trace has no args beyond its typed fields", "[chrome]") {
  const Trace t = parse_trace(R"({"otherData": {"format": "pipescope.trace/1", "source": "predicted"}, "traceEvents": [
    {"ph": "X", "name": "F", "pid": 0, "tid": 0, "ts": 0, "dur": 5, "args": {"stage": 0, "micro_batch": 1}}]})",
                              "p.json");
  REQUIRE(t.events.size() == 1);
  REQUIRE(t.args.empty());
  REQUIRE(t.args_of(0) == nullptr);
}
