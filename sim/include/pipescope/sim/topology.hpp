// Where the pipeline ranks live and how fast they talk: GPUs per node, NVLink inside a node,
// the network between nodes. The simulator asks it for the link between two pipeline ranks;
// the cost model asks it for the data-parallel gradient all-reduce.
#pragma once

#include <cstdint>

namespace pipescope::sim {

struct LinkSpec {
  double bandwidth_bytes_per_s = 450e9;
  double latency_s = 2e-6;
};

struct Topology {
  int gpus_per_node = 8;
  LinkSpec intra_node{450e9, 2e-6};  // NVLink 4, per direction
  LinkSpec inter_node{50e9, 5e-6};   // InfiniBand NDR 400 Gb/s per NIC
  // Devices between two consecutive pipeline ranks. Megatron orders data parallelism inside
  // pipeline parallelism, so with DP size d pipeline rank r sits on device r * d.
  int pipeline_rank_stride = 1;
  // The group of the gradient reduction (data-parallel replicas, times the context-parallel ranks
  // when there are any), and the devices between two neighbouring members: the tensor-parallel
  // size, as Megatron puts tensor parallelism innermost and context parallelism next to it.
  int data_parallel = 1;
  int data_parallel_stride = 1;

  int device_of_rank(int pipeline_rank) const { return pipeline_rank * pipeline_rank_stride; }
  int node_of_device(int device) const { return device / gpus_per_node; }
  bool same_node(int rank_a, int rank_b) const {
    return node_of_device(device_of_rank(rank_a)) == node_of_device(device_of_rank(rank_b));
  }
  // The link that carries a transfer between two pipeline ranks.
  const LinkSpec& link_between(int rank_a, int rank_b) const {
    return same_node(rank_a, rank_b) ? intra_node : inter_node;
  }
  // Members of one data-parallel group on a node: the whole group while it fits in one.
  int data_parallel_members_per_node() const;
};

// Ring all-reduce of `bytes` over `group_size` members: 2(n-1) steps of bytes/n each.
double ring_all_reduce_s(std::int64_t bytes, int group_size, const LinkSpec& link);

// The gradient all-reduce of `bytes` over the topology's data-parallel group: one ring on NVLink
// inside a node; across nodes, NCCL's rings split over the network adapters of the group's
// members on each node (one adapter per GPU).
double data_parallel_all_reduce_s(std::int64_t bytes, const Topology& topology);
// Its halves, on the same rings: the distributed optimizer's reduce-scatter of the gradients and
// all-gather of the updated parameters (`bytes`: the whole buffer).
double data_parallel_reduce_scatter_s(std::int64_t bytes, const Topology& topology);
double data_parallel_all_gather_s(std::int64_t bytes, const Topology& topology);

}  // namespace pipescope::sim
