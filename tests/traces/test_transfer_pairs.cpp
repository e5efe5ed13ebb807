// Sends paired with their receives from the events alone (traces/transfer_pairs.hpp).
// measured.json (pprun, zb-h1, 2 ranks, 8 micro-batches): 16 sends and 16 receives (F and B of
// each micro-batch), all paired, each send on the peer of its receive with the same
// micro-batch and the receive on the neighbouring stage. Rank 1's RECV_F of micro-batch 0 was
// posted at 475.6 us and rank 0's SEND_F started at 2513.7 us: it waited 2038.1 us.
// Two iterations of one transfer pair in time order; a send without a stage still pairs on
// rank, peer, direction and micro-batch; a receive with no send stays alone.
#include <catch2/catch.hpp>

#include <filesystem>

#include "pipescope/traces/trace_io.hpp"
#include "pipescope/traces/transfer_pairs.hpp"

using namespace pipescope::traces;
namespace fs = std::filesystem;

namespace {

TraceEvent transfer(const std::string& name, int rank, int peer, int stage, int micro_batch, double ts_us, double dur_us) {
  TraceEvent e;
  e.rank = rank;
  e.lane = name.rfind("SEND_", 0) == 0 ? 1 : 2;
  e.name = name;
  e.kind = event_kind_from_name(e.name);  // as a reader would parse it
  e.ts_us = ts_us;
  e.dur_us = dur_us;
  e.stage = stage;
  e.micro_batch = micro_batch;
  e.peer_rank = peer;
  return e;
}

}  // namespace

TEST_CASE("every transfer of a measured trace is paired with its peer's", "[transfer_pairs]") {
  const Trace t = read_trace((fs::path(PIPESCOPE_SOURCE_DIR) / "traces/examples/measured.json").string());
  std::size_t sends = 0, receives = 0;
  for (const auto& e : t.events) {
    sends += e.name.rfind("SEND_", 0) == 0;
    receives += e.name.rfind("RECV_", 0) == 0;
  }
  REQUIRE(sends == 16);
  REQUIRE(receives == 16);
  const auto pairs = pair_transfers(t);
  REQUIRE(pairs.size() == 16);
  bool found_waiting_receive = false;
  for (const auto& p : pairs) {
    const TraceEvent& s = t.events[p.send];
    const TraceEvent& r = t.events[p.receive];
    INFO(s.name << " mb " << s.micro_batch << " rank " << s.rank << " -> " << r.name << " rank " << r.rank);
    REQUIRE(s.name.substr(5) == r.name.substr(5));
    REQUIRE(s.peer_rank == r.rank);
    REQUIRE(r.peer_rank == s.rank);
    REQUIRE(s.micro_batch == r.micro_batch);
    REQUIRE(r.stage == (s.name == "SEND_F" ? s.stage + 1 : s.stage - 1));
    const Flow f = flow_of(t, p);
    REQUIRE(f.from_rank == s.rank);
    REQUIRE(f.from_lane == 1);
    REQUIRE(f.from_ts_us == s.ts_us);
    REQUIRE(f.to_rank == r.rank);
    REQUIRE(f.to_lane == 2);
    REQUIRE(f.to_ts_us == r.end_us());
    if (r.name == "RECV_F" && r.micro_batch == 0) {
      found_waiting_receive = true;
      REQUIRE(s.ts_us - r.ts_us == Approx(2038.104).margin(1e-3));
    }
  }
  REQUIRE(found_waiting_receive);
}

TEST_CASE("repeated transfers pair in time order, missing stages on the other fields", "[transfer_pairs]") {
  Trace t;
  t.events.push_back(transfer("SEND_F", 0, 1, 0, 0, 0, 5));     // 0: first iteration
  t.events.push_back(transfer("RECV_F", 1, 0, 1, 0, 0, 10));    // 1
  t.events.push_back(transfer("RECV_F", 1, 0, 1, 0, 100, 10));  // 2: second iteration
  t.events.push_back(transfer("SEND_F", 0, 1, 0, 0, 95, 5));    // 3
  t.events.push_back(transfer("SEND_B", 1, 0, -1, 3, 50, 5));   // 4: no stage
  t.events.push_back(transfer("RECV_B", 0, 1, 0, 3, 40, 20));   // 5
  t.events.push_back(transfer("RECV_B", 0, 1, 0, 7, 60, 20));   // 6: nobody sent it
  const auto pairs = pair_transfers(t);
  REQUIRE(pairs.size() == 3);
  REQUIRE(pairs[0].send == 0);
  REQUIRE(pairs[0].receive == 1);
  REQUIRE(pairs[1].send == 3);
  REQUIRE(pairs[1].receive == 2);
  REQUIRE(pairs[2].send == 4);
  REQUIRE(pairs[2].receive == 5);
}
