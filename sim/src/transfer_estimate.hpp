// What zb-auto's constructors expect one stage-to-stage transfer to take before the simulator
// times it for real: c with the fixed-delay model, else the link's latency and bandwidth for
// the stage's activation (no sharing with other transfers).
#pragma once

#include "pipescope/sim/costs.hpp"
#include "pipescope/sim/topology.hpp"

namespace pipescope::sim {

inline double transfer_estimate_s(const CostModel& costs, const Topology& topology, int from_rank, int to_rank,
                                  int stage) {
  if (from_rank == to_rank) return 0.0;
  if (costs.transfer_model == TransferModel::FixedDelay) return costs.c_s;
  const LinkSpec& link = topology.link_between(from_rank, to_rank);
  return link.latency_s + static_cast<double>(costs.stage(stage).activation_bytes) / link.bandwidth_bytes_per_s;
}

}  // namespace pipescope::sim
