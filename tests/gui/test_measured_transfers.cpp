// Measured traces get arrows and a critical path that crosses ranks, from their sends and
// receives paired (traces/transfer_pairs.hpp); predicted ones keep their own flow events.
// measured.json (pprun, zb-h1, 2 ranks): no flow events, 16 transfers, so 16 arrows, each from
// a send's start to its receive's end. Rank 1's RECV_F of micro-batch 0 waited 2038.1 us for
// rank 0's SEND_F: the receive's wait names that send and rank 0. The measured critical path
// visits both ranks, and wherever it reaches a receive that waited, the step before it is the
// paired send on the peer, never the wait on the receive's own rank.
// A synthetic measured 1F1B run of 4 ranks with its flow events removed (rank 2 1.5x slower):
// 48 transfers paired into 48 arrows, and the critical path crosses all four ranks.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include "pipescope/gui/timeline_model.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "pipescope/traces/trace_io.hpp"

using namespace pipescope::gui;
using namespace pipescope::traces;
namespace fs = std::filesystem;

namespace {

Trace example(const char* name) { return read_trace((fs::path(PIPESCOPE_SOURCE_DIR) / "traces/examples" / name).string()); }

bool is_receive(const TraceEvent& e) { return e.name.rfind("RECV_", 0) == 0; }

// Every receive on the path that waited for its send is entered from that send.
void require_path_crosses_at_waiting_receives(const TimelineModel& model, int series, const std::vector<std::size_t>& path) {
  const auto& events = model.trace(series).events;
  std::size_t crossings = 0;
  for (std::size_t i = 0; i < path.size(); ++i) {
    const TraceEvent& e = events[path[i]];
    if (!is_receive(e)) continue;
    const auto wait = model.receive_wait(series, path[i]);
    if (!wait || wait->waited_for_send_us <= 0) continue;
    INFO("receive " << e.name << " mb " << e.micro_batch << " on rank " << e.rank);
    REQUIRE(i > 0);
    REQUIRE(path[i - 1] == wait->send_event);
    REQUIRE(events[path[i - 1]].rank != e.rank);
    ++crossings;
  }
  REQUIRE(crossings > 0);
}

}  // namespace

TEST_CASE("a measured trace gets arrows from its paired sends and receives", "[transfers]") {
  TimelineModel model;
  model.set_traces(example("measured.json"));
  REQUIRE(model.trace(0).flows.empty());
  const auto& flows = model.flows_by_start(0);
  REQUIRE(flows.size() == 16);
  for (const auto& f : flows) {
    REQUIRE(f.from_rank != f.to_rank);
    REQUIRE(f.from_lane == static_cast<int>(Lane::Send));
    REQUIRE(f.to_lane == static_cast<int>(Lane::Recv));
  }
  REQUIRE(model.longest_flow_us(0) > 0);

  const auto& events = model.trace(0).events;
  std::optional<std::size_t> receive;
  for (std::size_t i = 0; i < events.size(); ++i)
    if (events[i].name == "RECV_F" && events[i].rank == 1 && events[i].micro_batch == 0) receive = i;
  REQUIRE(receive);
  const auto wait = model.receive_wait(0, *receive);
  REQUIRE(wait);
  REQUIRE(wait->peer_rank == 0);
  REQUIRE(events[wait->send_event].name == "SEND_F");
  REQUIRE(events[wait->send_event].micro_batch == 0);
  REQUIRE(wait->waited_for_send_us == Approx(2038.104).margin(1e-3));
  REQUIRE(wait->data_after_us == Approx(events[*receive].end_us() - events[wait->send_event].ts_us));
  REQUIRE(model.transfer_partner(0, wait->send_event) == receive);
  // A compute event is in no pair and is no receive.
  for (std::size_t i = 0; i < events.size(); ++i)
    if (events[i].name == "F") {
      REQUIRE_FALSE(model.transfer_partner(0, i));
      REQUIRE_FALSE(model.receive_wait(0, i));
      break;
    }
}

TEST_CASE("the measured critical path moves to the sender of a receive that waited", "[transfers]") {
  TimelineModel model;
  model.set_traces(example("predicted.json"), example("measured.json"));
  // The predicted trace keeps the flows it was written with.
  REQUIRE(model.flows_by_start(0).size() == model.trace(0).flows.size());
  REQUIRE(model.flows_by_start(1).size() == 16);

  const auto path = model.critical_path(1);
  REQUIRE(path.size() >= 4);
  const auto& events = model.trace(1).events;
  std::set<int> ranks;
  for (const auto i : path) ranks.insert(events[i].rank);
  REQUIRE(ranks.size() == 2);
  REQUIRE(events[path.back()].end_us() == Approx(model.trace(1).end_us()));
  require_path_crosses_at_waiting_receives(model, 1, path);
}

TEST_CASE("a 4-rank measured run without flow events is paired and its path crosses every rank", "[transfers]") {
  SyntheticPipeline pp;
  pp.slow_rank = 2;
  pp.slow_factor = 1.5;
  pp.source = "measured";
  Trace measured = make_1f1b_trace(pp);
  const std::size_t written_flows = measured.flows.size();
  measured.flows.clear();
  TimelineModel model;
  model.set_traces(std::move(measured));
  REQUIRE(written_flows == 48);
  REQUIRE(model.flows_by_start(0).size() == written_flows);
  const auto path = model.critical_path(0);
  std::set<int> ranks;
  for (const auto i : path) ranks.insert(model.trace(0).events[i].rank);
  REQUIRE(ranks.size() == 4);
}
