// The viewer's search (timeline_search.hpp). Queries: "B mb 3" pins micro-batch 3 and asks
// for "b" in the name; "stage=2", "rank:1" part at '=' and ':'; "stage" with no number after
// it is a word of the name; a query of spaces is not valid. On the synthetic 1F1B pair (4
// ranks, 8 micro-batches, the measured twin with rank 2 1.5x slower) "B mb 3" finds B, SEND_B
// and RECV_B of micro-batch 3: 4 + 3 + 3 per series, 20 in start order; on a hand-made trace
// of three events, hits come in start order, the earlier series first at one start.
#include <catch2/catch.hpp>

#include <vector>

#include "pipescope/gui/timeline_model.hpp"
#include "pipescope/gui/timeline_search.hpp"
#include "pipeline_trace_fixture.hpp"
#include "pipescope/traces/synthetic.hpp"

using namespace pipescope::gui;
using namespace pipescope::traces;
using pipeline_trace_fixture::predicted_and_slow_measured_1f1b;

namespace {

TraceEvent search_test_event(const char* name, int rank, int stage, int micro_batch, double ts_us) {
  TraceEvent e;
  e.name = name;
  e.kind = event_kind_from_name(e.name);
  e.rank = rank;
  e.stage = stage;
  e.micro_batch = micro_batch;
  e.ts_us = ts_us;
  e.dur_us = 10;
  return e;
}

}  // namespace

TEST_CASE("a query pins stage, micro-batch and rank and keeps the other words for the name", "[search]") {
  const SearchQuery q = parse_search_query("Send_F  mb 3 stage=2 rank:1");
  CHECK(q.valid);
  CHECK(q.name_parts == std::vector<std::string>{"send_f"});
  CHECK(q.micro_batch == 3);
  CHECK(q.stage == 2);
  CHECK(q.rank == 1);

  const SearchQuery aliases = parse_search_query("micro_batch 4 F");
  CHECK(aliases.micro_batch == 4);
  CHECK(aliases.name_parts == std::vector<std::string>{"f"});
  CHECK(parse_search_query("micro-batch 5").micro_batch == 5);

  // A field word without a number after it is part of the name.
  const SearchQuery word = parse_search_query("stage x");
  CHECK(word.stage == -1);
  CHECK(word.name_parts == std::vector<std::string>{"stage", "x"});
  CHECK_FALSE(parse_search_query(" \t ").valid);
  CHECK_FALSE(parse_search_query("").valid);
}

TEST_CASE("a query matches fields exactly and name parts anywhere, ignoring case", "[search]") {
  const TraceEvent send = search_test_event("SEND_F", 1, 1, 3, 0);
  CHECK(parse_search_query("send").matches(send));
  CHECK(parse_search_query("nd_f mb 3").matches(send));
  CHECK(parse_search_query("rank 1 stage 1").matches(send));
  CHECK_FALSE(parse_search_query("send mb 2").matches(send));
  CHECK_FALSE(parse_search_query("send recv").matches(send));
  CHECK_FALSE(parse_search_query("rank 0").matches(send));
}

TEST_CASE("search_events returns hits of every series in start order", "[search]") {
  Trace first, second;
  first.events = {search_test_event("F", 0, 0, 0, 20), search_test_event("F", 0, 0, 1, 5),
                  search_test_event("B", 0, 0, 0, 1)};
  second.events = {search_test_event("F", 0, 0, 0, 5)};
  const std::vector<const Trace*> series{&first, &second};
  const auto hits = search_events(series, "f");
  REQUIRE(hits.size() == 3);
  CHECK((hits[0].series == 0 && hits[0].event == 1));  // at 5 us, the earlier series first
  CHECK((hits[1].series == 1 && hits[1].event == 0));  // at 5 us
  CHECK((hits[2].series == 0 && hits[2].event == 0));  // at 20 us
  CHECK(search_events(series, "   ").empty());
}

TEST_CASE("search by text with field filters", "[search]") {
  auto [p, m] = predicted_and_slow_measured_1f1b();
  TimelineModel model;
  model.set_traces(p, m);
  const auto hits = model.search("B mb 3");
  REQUIRE(hits.size() == 20);
  for (std::size_t i = 1; i < hits.size(); ++i)
    REQUIRE(model.trace(hits[i - 1].series).events[hits[i - 1].event].ts_us <=
            model.trace(hits[i].series).events[hits[i].event].ts_us);
  REQUIRE(model.search("send_f rank 0").size() == 16);  // 8 micro-batches x 2 series
  REQUIRE(model.search("optimizer").size() == 8);
  REQUIRE(model.search("F stage 3 mb 7").size() == 4);  // F and RECV_F, both series
  REQUIRE(model.search("nothing like this").empty());
  REQUIRE(model.search("   ").empty());
}
