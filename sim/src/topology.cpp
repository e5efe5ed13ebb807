#include "pipescope/sim/topology.hpp"

#include <algorithm>

namespace pipescope::sim {

double ring_all_reduce_s(std::int64_t bytes, int group_size, const LinkSpec& link) {
  if (group_size <= 1 || bytes <= 0) return 0.0;
  // Reduce-scatter then all-gather: 2(n-1) steps, each moving bytes/n over every ring link.
  const double steps = 2.0 * (group_size - 1);
  const double chunk_bytes = static_cast<double>(bytes) / group_size;
  return steps * (link.latency_s + chunk_bytes / link.bandwidth_bytes_per_s);
}

int Topology::data_parallel_members_per_node() const {
  return std::clamp(gpus_per_node / std::max(data_parallel_stride, 1), 1, std::max(data_parallel, 1));
}

namespace {

// The ring the data-parallel group's collectives run on.
LinkSpec data_parallel_ring(const Topology& topology) {
  const int n = topology.data_parallel;
  if (n * std::max(topology.data_parallel_stride, 1) <= topology.gpus_per_node) return topology.intra_node;
  // Across nodes NCCL runs one ring per network adapter (its channels), and each ring leaves a
  // node through a different member's adapter. With k members on a node the bytes cross the
  // network split k ways, and each member's NVLink carries the other k - 1 rings' share: a ring
  // whose links run at k adapters' bandwidth, or k / (k - 1) NVLinks' if that is less.
  const int k = topology.data_parallel_members_per_node();
  double bandwidth = k * topology.inter_node.bandwidth_bytes_per_s;
  if (k > 1) bandwidth = std::min(bandwidth, topology.intra_node.bandwidth_bytes_per_s * k / (k - 1));
  return LinkSpec{bandwidth, topology.inter_node.latency_s};
}

}  // namespace

double data_parallel_all_reduce_s(std::int64_t bytes, const Topology& topology) {
  return ring_all_reduce_s(bytes, topology.data_parallel, data_parallel_ring(topology));
}

double data_parallel_reduce_scatter_s(std::int64_t bytes, const Topology& topology) {
  const int n = topology.data_parallel;
  if (n <= 1 || bytes <= 0) return 0.0;
  const LinkSpec ring = data_parallel_ring(topology);
  return (n - 1) * (ring.latency_s + static_cast<double>(bytes) / n / ring.bandwidth_bytes_per_s);
}

double data_parallel_all_gather_s(std::int64_t bytes, const Topology& topology) {
  return data_parallel_reduce_scatter_s(bytes, topology);
}

}  // namespace pipescope::sim
