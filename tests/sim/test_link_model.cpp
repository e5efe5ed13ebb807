// The link model alone (sim/src/link_model.cpp), without the event loop. Figures in bytes and
// seconds chosen so that every sum is exact in binary.
// - Unshared, or with no bytes: a post knows the arrival at once, latency + bytes / bandwidth.
// - Two 100-byte transfers posted together on a 100 B/s link: both finish at 2 s, arriving a
//   latency later, in the order they were posted.
// - Staggered: 100 bytes at 0 s, then 100 more at 0.5 s on the same link: the first has 50 left
//   and finishes at 1.5 s (50 B/s each), the second then runs alone and finishes at 2 s; the
//   event planned before the second post is stale and changes nothing.
// - Links are independent: a transfer on another link takes its whole bandwidth.
// - for_schedule: each transfer carries its sending stage's activation on the link compile gave
//   it, the bandwidth and latency of the topology's link between its ranks.
// - A bandwidth not > 0 and a transfer on a link that does not exist are refused.
#include <catch2/catch.hpp>

#include <optional>
#include <vector>

#include "link_model.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/sim/simulator.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

// Finishes the link's planned event, returning what it finished.
std::vector<FinishedTransfer> finish_next(LinkModel& links, std::int32_t link) {
  const std::optional<LinkEvent> event = links.next_event(link);
  REQUIRE(event.has_value());
  std::vector<FinishedTransfer> finished;
  REQUIRE(links.finish(*event, finished));
  return finished;
}

}  // namespace

TEST_CASE("link model: an unshared transfer or one with no bytes arrives at once") {
  LinkModel unshared({{100.0, 0.25}}, {0, 0}, {100.0, 50.0}, false);
  CHECK(unshared.post(0, 1.0) == std::optional<double>(2.25));
  CHECK(unshared.post(1, 1.0) == std::optional<double>(1.75));
  CHECK_FALSE(unshared.next_event(0).has_value());
  CHECK(unshared.unshared_time_s(0) == 1.25);

  LinkModel shared({{100.0, 0.25}}, {0, 0}, {0.0, 100.0}, true);
  CHECK(shared.post(0, 1.0) == std::optional<double>(1.25));
  CHECK_FALSE(shared.next_event(0).has_value());
  CHECK_FALSE(shared.post(1, 1.0).has_value());
  CHECK(shared.next_event(0).has_value());
}

TEST_CASE("link model: transfers posted together share the bandwidth and finish in posting order") {
  LinkModel links({{100.0, 0.25}}, {0, 0}, {100.0, 100.0}, true);
  CHECK_FALSE(links.post(1, 0.0).has_value());
  CHECK_FALSE(links.post(0, 0.0).has_value());
  const std::optional<LinkEvent> event = links.next_event(0);
  REQUIRE(event.has_value());
  CHECK(event->link == 0);
  CHECK(event->time_s == 2.0);
  const std::vector<FinishedTransfer> finished = finish_next(links, 0);
  REQUIRE(finished.size() == 2);
  CHECK(finished[0].transfer == 1);
  CHECK(finished[1].transfer == 0);
  CHECK(finished[0].arrival_s == 2.25);
  CHECK(finished[1].arrival_s == 2.25);
  CHECK_FALSE(links.next_event(0).has_value());
}

TEST_CASE("link model: a later post slows the transfer under way and makes its event stale") {
  LinkModel links({{100.0, 0.0}}, {0, 0}, {100.0, 100.0}, true);
  CHECK_FALSE(links.post(0, 0.0).has_value());
  const std::optional<LinkEvent> alone = links.next_event(0);
  REQUIRE(alone.has_value());
  CHECK(alone->time_s == 1.0);
  CHECK_FALSE(links.post(1, 0.5).has_value());
  std::vector<FinishedTransfer> finished;
  CHECK_FALSE(links.finish(*alone, finished));
  CHECK(finished.empty());

  const std::optional<LinkEvent> shared = links.next_event(0);
  REQUIRE(shared.has_value());
  CHECK(shared->time_s == 1.5);
  finished = finish_next(links, 0);
  REQUIRE(finished.size() == 1);
  CHECK(finished[0].transfer == 0);
  CHECK(finished[0].arrival_s == 1.5);

  const std::optional<LinkEvent> last = links.next_event(0);
  REQUIRE(last.has_value());
  CHECK(last->time_s == 2.0);
  finished = finish_next(links, 0);
  REQUIRE(finished.size() == 1);
  CHECK(finished[0].transfer == 1);
  CHECK(finished[0].arrival_s == 2.0);
}

TEST_CASE("link model: transfers on different links do not share") {
  LinkModel links({{100.0, 0.0}, {50.0, 0.5}}, {0, 1}, {100.0, 100.0}, true);
  CHECK_FALSE(links.post(0, 0.0).has_value());
  CHECK_FALSE(links.post(1, 0.0).has_value());
  REQUIRE(links.next_event(0).has_value());
  REQUIRE(links.next_event(1).has_value());
  CHECK(links.next_event(0)->time_s == 1.0);
  CHECK(links.next_event(1)->time_s == 2.0);
  CHECK(finish_next(links, 1).at(0).arrival_s == 2.5);
  CHECK(finish_next(links, 0).at(0).arrival_s == 1.0);
}

TEST_CASE("link model: a compiled schedule's transfers carry their sending stage's activation") {
  ScheduleParams params;
  params.num_ranks = 2;
  params.num_micro_batches = 2;
  const CompiledSchedule compiled = compile(make_schedule("gpipe", params));
  REQUIRE(compiled.links.size() == 2);
  Topology topology;
  topology.gpus_per_node = 1;  // the two ranks on two nodes: the inter-node link
  topology.inter_node = {1000.0, 0.5};
  const LinkModel links = LinkModel::for_schedule(compiled, {2000, 4000}, topology, true);
  for (std::size_t t = 0; t < compiled.transfers.size(); ++t) {
    const CompiledTransfer& transfer = compiled.transfers[t];
    const auto id = static_cast<std::int32_t>(t);
    CHECK(links.link_of(id) == transfer.link);
    const int stage = compiled.instructions[static_cast<std::size_t>(transfer.send_index)].stage;
    CHECK(links.unshared_time_s(id) == (stage == 0 ? 2.5 : 4.5));
  }
}

TEST_CASE("link model: a bandwidth not > 0 or a transfer on no link is refused") {
  CHECK_THROWS_AS(LinkModel({{0.0, 0.0}}, {}, {}, true), UsageError);
  CHECK_THROWS_AS(LinkModel({{-1.0, 0.0}}, {}, {}, true), UsageError);
  CHECK_THROWS_AS(LinkModel({{1.0, 0.0}}, {1}, {1.0}, true), UsageError);
  CHECK_THROWS_AS(LinkModel({{1.0, 0.0}}, {0}, {}, true), UsageError);
}
