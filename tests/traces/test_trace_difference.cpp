// trace_difference (traces/trace_difference.hpp): two equal traces have none; a trace with
// one event's duration changed from 5 to 6 differs at "events[1].dur_us: 5 vs 6"; one more
// event, at "events.size(): 2 vs 3"; otherData and kinds are compared too.
#include <catch2/catch.hpp>

#include "pipescope/traces/trace_difference.hpp"

using namespace pipescope::traces;

namespace {

Trace two_events() {
  Trace t;
  for (const char* name : {"F", "B"}) {
    TraceEvent e;
    e.name = name;
    e.kind = event_kind_from_name(e.name);
    e.ts_us = t.events.size() * 10.0;
    e.dur_us = 5;
    t.events.push_back(e);
  }
  return t;
}

}  // namespace

TEST_CASE("trace_difference: the first field that differs", "[difference]") {
  const Trace a = two_events();
  REQUIRE_FALSE(trace_difference(a, a));
  Trace longer = a;
  longer.events[1].dur_us = 6;
  REQUIRE(trace_difference(a, longer) == std::optional<std::string>("events[1].dur_us: 5 vs 6"));
  Trace more = a;
  more.events.push_back(a.events[0]);
  REQUIRE(trace_difference(a, more) == std::optional<std::string>("events.size(): 2 vs 3"));
  Trace kind = a;
  kind.events[0].kind = EventKind::Other;
  REQUIRE(trace_difference(a, kind) == std::optional<std::string>("events[0].kind: F (kind) vs  (kind)"));
  Trace extra = a;
  extra.meta.extra["note"] = 1;
  REQUIRE(trace_difference(a, extra) == std::optional<std::string>("meta.extra: {} vs {\"note\":1}"));
}
