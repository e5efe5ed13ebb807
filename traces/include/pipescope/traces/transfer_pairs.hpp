// Which send fed which receive, found from the events themselves: a SEND_x on rank r to peer p
// and a RECV_x on rank p from peer r of the same micro-batch, the receive on the neighbouring
// stage (x = F: the next one, x = B: the previous one; the key receive_costs uses). Measured
// traces carry no flow events, so this is how they get arrows and a critical path that
// crosses ranks, the same as predicted ones.
#pragma once

#include <cstddef>
#include <vector>

#include "pipescope/traces/trace.hpp"

namespace pipescope::traces {

struct TransferPair {
  std::size_t send = 0;     // index into trace.events
  std::size_t receive = 0;  // index into trace.events
};

// The pairs, ordered by send. Repeated keys (several iterations) pair in time order, the k-th
// send with the k-th receive. A send or receive whose stage is missing or does not fit the
// neighbouring-stage rule is paired on rank, peer, direction and micro-batch alone, in time
// order, with what is left; what still has no partner is in no pair.
std::vector<TransferPair> pair_transfers(const Trace& trace);

// The flow of a pair as the simulator draws it: from the send's start on the sender's lane to
// the receive's end (when the data was there) on the receiver's lane.
Flow flow_of(const Trace& trace, const TransferPair& pair);

}  // namespace pipescope::traces
