// Where a rank's iteration went, by kind of operation, and what its receives cost. Set side by
// side for a prediction and a measurement (ppsim compare), they tell a compute error (a slower
// backward) from a communication one (receives that cost more than the transport was
// calibrated for), which an iteration-time error alone cannot.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "pipescope/traces/trace.hpp"

namespace pipescope::traces {

// The events of one name on one rank: how many, and their summed duration.
struct OperationTime {
  int rank = 0;
  std::string name;
  std::size_t count = 0;
  double total_us = 0;
};

// Every (rank, name) of the trace's events, ordered by rank, then name.
std::vector<OperationTime> time_by_operation(const Trace& trace);

// The receives (RECV_F, RECV_B) matched with their sends (SEND_F, SEND_B on the peer rank, the
// same micro-batch, the neighbouring stage), in two kinds:
// - ready: the send was posted before the receive began, so the data was on its way or there;
//   the receive's duration is the transport's own work on the receiving side (and whatever
//   kept that work from running);
// - waited: the send was posted after the receive began; from the post to the receive's end
//   is what the message took (latency).
struct ReceiveCosts {
  std::size_t ready = 0;
  double ready_total_us = 0;
  std::size_t waited = 0;
  double waited_total_us = 0;  // post to end
  std::size_t unmatched = 0;   // receives with no matching send in the trace
  double ready_mean_us() const;   // NaN without any
  double waited_mean_us() const;  // NaN without any
};

ReceiveCosts receive_costs(const Trace& trace);

}  // namespace pipescope::traces
