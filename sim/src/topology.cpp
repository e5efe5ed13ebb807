#include "pipescope/sim/topology.hpp"

namespace pipescope::sim {

double ring_all_reduce_s(std::int64_t bytes, int group_size, const LinkSpec& link) {
  if (group_size <= 1 || bytes <= 0) return 0.0;
  // Reduce-scatter then all-gather: 2(n-1) steps, each moving bytes/n over every ring link.
  const double steps = 2.0 * (group_size - 1);
  const double chunk_bytes = static_cast<double>(bytes) / group_size;
  return steps * (link.latency_s + chunk_bytes / link.bandwidth_bytes_per_s);
}

}  // namespace pipescope::sim
