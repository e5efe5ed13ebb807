// The trace assembler (traces/src/trace_assembler.cpp) on events handed to it as a parser
// would: a pipescope trace's F on rank 1 lane 0 at 500 us (20 us) and its SEND_F on lane 1,
// a memory sample of 4096 bytes, a flow from the send to rank 0; times shift so that the
// earliest (the memory sample at 490 us) is 0: F at 10 us. The events carry the kind of their
// names. A plain trace's pids 9 and 3 become ranks 1 and 0 (ascending order), named "pid 9"
// and "pid 3". A begin without its end, an event without ph and a pid that is no rank are
// refused with the file and the event named.
#include <catch2/catch.hpp>

#include "trace_assembler.hpp"

using namespace pipescope::traces;
using namespace pipescope::traces::detail;

namespace {

PendingEvent pending(const std::string& ph, const std::string& name, std::int64_t pid, std::int64_t tid, double ts,
                     std::optional<double> dur = std::nullopt) {
  PendingEvent e;
  e.ph = ph;
  e.name = name;
  e.pid = RawId{false, pid, {}};
  e.tid = RawId{false, tid, {}};
  e.ts = ts;
  e.dur = dur;
  return e;
}

}  // namespace

TEST_CASE("trace assembler: a pipescope trace's events, memory and flows", "[assembler]") {
  TraceAssembler a("hand.json");
  a.set_other_data({{"format", "pipescope.trace/1"}, {"num_ranks", 2}, {"schedule", "1f1b"}, {"note", "kept"}});
  PendingEvent f = pending("X", "F", 1, 0, 500, 20);
  f.stage = 1;
  f.micro_batch = 0;
  a.add_event(f);
  PendingEvent send = pending("X", "SEND_F", 1, 1, 520, 5);
  send.peer_rank = 0;
  send.bytes = 1024;
  a.add_event(send);
  PendingEvent memory = pending("C", "memory", 1, 0, 490);
  memory.bytes = 4096;
  a.add_event(memory);
  PendingEvent start = pending("s", "transfer", 1, 1, 520), end = pending("f", "transfer", 0, 2, 530);
  start.has_id = end.has_id = true;
  start.id_text = end.id_text = "7";
  a.add_event(start);
  a.add_event(end);
  REQUIRE(a.event_index() == 5);
  const Trace t = a.finish();
  REQUIRE(t.meta.format == "pipescope.trace/1");
  REQUIRE(t.meta.schedule == "1f1b");
  REQUIRE(t.meta.num_ranks == 2);
  REQUIRE(t.meta.extra == nlohmann::json{{"note", "kept"}});
  REQUIRE(t.events.size() == 2);
  REQUIRE(t.events[0].rank == 1);
  REQUIRE(t.events[0].lane == 0);
  REQUIRE(t.events[0].kind == EventKind::Forward);
  REQUIRE(t.events[0].ts_us == 10);
  REQUIRE(t.events[0].stage == 1);
  REQUIRE(t.events[1].kind == EventKind::SendActivation);
  REQUIRE(t.events[1].bytes == 1024);
  REQUIRE(t.memory.size() == 1);
  REQUIRE(t.memory[0].ts_us == 0);
  REQUIRE(t.memory[0].bytes == 4096);
  REQUIRE(t.flows.size() == 1);
  REQUIRE(t.flows[0].from_rank == 1);
  REQUIRE(t.flows[0].to_rank == 0);
  REQUIRE(t.flows[0].to_lane == 2);
  REQUIRE(t.flows[0].to_ts_us == 40);
}

TEST_CASE("trace assembler: a plain trace's pids become ranks in ascending order", "[assembler]") {
  TraceAssembler a("plain.json");
  PendingEvent on_pid_9 = pending("X", "work", 9, 1, 0, 1), on_pid_3 = pending("X", "other work", 3, 1, 1, 1);
  a.add_event(on_pid_9);
  a.add_event(on_pid_3);
  const Trace t = a.finish();
  REQUIRE(t.events.size() == 2);
  REQUIRE(t.events[0].rank == 1);
  REQUIRE(t.events[1].rank == 0);
  REQUIRE(t.events[0].kind == EventKind::Other);
  REQUIRE(t.rank_names == std::vector<std::string>{"pid 3", "pid 9"});
}

TEST_CASE("trace assembler: refusals name the file and the event", "[assembler]") {
  SECTION("an event without ph") {
    TraceAssembler a("bad.json");
    PendingEvent e = pending("", "F", 0, 0, 0, 1);
    REQUIRE_THROWS_WITH(a.add_event(e), "bad.json: traceEvents[0] (\"F\"): field 'ph' is missing");
  }
  SECTION("a complete event without dur, after one good event") {
    TraceAssembler a("bad.json");
    PendingEvent good = pending("X", "F", 0, 0, 0, 1), bad = pending("X", "B", 0, 0, 1);
    a.add_event(good);
    REQUIRE_THROWS_WITH(a.add_event(bad), "bad.json: traceEvents[1] (\"B\"): field 'dur' is missing");
  }
  SECTION("a begin without its end") {
    TraceAssembler a("open.json");
    PendingEvent begin = pending("B", "forward", 0, 0, 0);
    a.add_event(begin);
    REQUIRE_THROWS_WITH(a.finish(), "open.json: begin event ('B') \"forward\" has no end event ('E')");
  }
  SECTION("a pid that is no rank in a pipescope trace") {
    TraceAssembler a("ranks.json");
    a.set_other_data({{"format", "pipescope.trace/1"}});
    PendingEvent e = pending("X", "F", -1, 0, 0, 1);
    a.add_event(e);
    REQUIRE_THROWS_WITH(a.finish(), "ranks.json: pid -1 is not a rank (a number from 0)");
  }
}
