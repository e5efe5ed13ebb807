// Why the step took this long: each rank's idle time split into the schedule's own bubble (what
// the same order of work leaves idle when every rank has the same costs) and the excess, and
// the excess traced to whom the rank waited for: a receive waited on a peer's send, which waited
// on that peer's compute, which may have waited on another receive, and so on back to the rank
// that was busy (the root). The one rank (or transfer) that held the step back is the largest
// excess on the critical path: the chain of waits that ends at the step's last event.
// `ppsim compare --explain` prints it; the viewer's ranks table and details pane show it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipescope/traces/trace.hpp"

namespace pipescope::traces {

// Whom one of a rank's waits was for: the receive that ended it, the peer's send that fed it,
// and the root (the rank and compute event whose work the chain of waits leads back to).
struct WaitCause {
  std::size_t receive = 0;     // into trace.events
  std::size_t send = 0;        // the paired send on the peer
  int root_rank = -1;          // -1 when the chain could not be followed
  std::size_t root_event = 0;  // the busy compute at the chain's start
  std::size_t root_via = 0;    // the root rank's event the chain left it through (usually a send)
  bool slow_transfer = false;  // the transfer itself took well over its bytes over the link rate
};

// One gap of a rank's compute lane, and what ended it when a receive did.
struct IdleGap {
  int rank = 0;
  double start_us = 0;
  double end_us = 0;
  bool waited = false;  // a receive ended it; then `cause` says on whom
  WaitCause cause;
};

struct RankAttribution {
  int rank = 0;
  double idle_us = 0;                     // the compute lane's idle time within the step
  double schedule_bubble_us = 0;          // idle time with equal costs on every rank (replay)
  double waited_on_slow_rank_us = 0;      // excess idle spent waiting for another rank's work
  double waited_on_transfer_us = 0;       // excess idle spent on transfers slower than their bytes allow
  double own_us = 0;                      // the rest of the excess: idle time no peer caused (a stall of its own)
  std::vector<double> waited_on_rank_us;  // per root rank, all of the rank's waits
  int waited_most_on = -1;                // the other root rank it waited on longest; -1 when none
  double compute_ratio = 1;               // its compute time over what the other ranks take for the same work
};

// The rank (or the transfer) that held the step back, and by how much.
struct Culprit {
  bool found = false;
  bool transfer = false;         // a slow transfer rather than a slow rank
  int rank = -1;                 // the slow rank, or the transfer's sender
  int to_rank = -1;              // a transfer's receiver
  std::size_t event = 0;         // its action with the largest excess on the critical path
  double held_back_us = 0;       // its excess on the critical path
  double compute_excess_us = 0;  // of which its computes over the other ranks' same work
  // Of which its stalls on the critical path: neither computing nor with a transfer outstanding.
  double stalled_us = 0;
  double kind_ratio = 1;       // its mean duration of that action's kind over the other ranks'
  std::vector<int> waiters;    // ranks that waited on it (directly or through others)
  std::size_t waited_via = 0;  // the culprit's event most of their waiting went through
  bool has_waited_via = false;
};

struct StepAttribution {
  int step = 0;                       // meta.iteration
  double step_us = 0;                 // first event start to last event end
  double replay_step_us = 0;          // the same order of work with equal costs on every rank
  double link_rate_bytes_per_us = 0;  // median over the transfers; 0 without any
  std::vector<RankAttribution> ranks;
  std::vector<IdleGap> gaps;
  std::vector<std::size_t> critical_path;  // event indices, from the step's first to its last
  Culprit culprit;
};

// Culprits whose excess is below this share of the step (or below kMinimumCulpritUs) are not
// named: the step is the schedule's own bubble, within measurement noise.
inline constexpr double kCulpritStepShare = 0.05;
inline constexpr double kMinimumCulpritUs = 20.0;

StepAttribution attribute_step(const Trace& trace);

// Whom event `index` waited for when it is a receive (or a compute right after one): nullptr
// when it is no wait.
const IdleGap* gap_ended_by(const StepAttribution& attribution, const Trace& trace, std::size_t index);

// The one line: "step 9: rank 1 held the step back by 41.2 ms (its F computes were 1.8x the
// other ranks'; rank 0 waited on its SEND_F)".
std::string explain_step(const StepAttribution& attribution, const Trace& trace);

// "rank 2's SEND_F stage 1 mb 3" for an event.
std::string describe_action(const Trace& trace, std::size_t index);

// The same as fields, for --json.
nlohmann::json attribution_to_json(const StepAttribution& attribution, const Trace& trace);

// The replay behind schedule_bubble_us: the trace's order of work on each rank and its
// transfers, every compute taking the mean of its kind over all ranks and every transfer the
// median transit. Returns each rank's idle time in the replayed step and sets `replay_step_us`.
std::vector<double> equal_cost_idle_us(const Trace& trace, double& replay_step_us);

}  // namespace pipescope::traces
