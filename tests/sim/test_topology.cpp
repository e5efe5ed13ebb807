// The ring all-reduce: 2(n-1) steps of bytes/n. 8 GB over 8 ranks at 100 GB/s with 1 us per
// step: 14 x (1 us + 10 ms) = 140.014 ms; one rank or no bytes: 0. Pipeline ranks 0 and 1
// share a node with stride 1 and not with stride 8 (8 GPUs per node).
#include <catch2/catch.hpp>

#include "pipescope/sim/topology.hpp"

using namespace pipescope::sim;

TEST_CASE("ring all-reduce time") {
  const LinkSpec link{100e9, 1e-6};
  CHECK(ring_all_reduce_s(8'000'000'000, 8, link) == Approx(14 * (1e-6 + 10e-3)));
  CHECK(ring_all_reduce_s(8'000'000'000, 1, link) == 0.0);
  CHECK(ring_all_reduce_s(0, 8, link) == 0.0);
}

TEST_CASE("pipeline ranks map to devices and nodes") {
  Topology t;
  t.gpus_per_node = 8;
  CHECK(t.same_node(0, 7));
  CHECK_FALSE(t.same_node(7, 8));
  t.pipeline_rank_stride = 8;
  CHECK_FALSE(t.same_node(0, 1));
  CHECK(&t.link_between(0, 1) == &t.inter_node);
}

// The gradient all-reduce of a data-parallel group. Inside a node: one NVLink ring. Across
// nodes: a ring at k adapters' bandwidth (k members per node), or k/(k-1) NVLinks' if less;
// one member per node is the plain ring on the network.
TEST_CASE("data-parallel all-reduce inside and across nodes") {
  Topology t;
  t.gpus_per_node = 8;
  t.intra_node = LinkSpec{300e9, 0.0};
  t.inter_node = LinkSpec{25e9, 0.0};
  const std::int64_t bytes = 3'200'000'000;
  t.data_parallel = 8;
  CHECK(t.data_parallel_members_per_node() == 8);
  CHECK(data_parallel_all_reduce_s(bytes, t) == Approx(ring_all_reduce_s(bytes, 8, t.intra_node)));
  // 32 replicas on 4 nodes: 8 adapters per node carry the network's share (200 GB/s).
  t.data_parallel = 32;
  CHECK(data_parallel_all_reduce_s(bytes, t) == Approx(2.0 * 31 / 32 * bytes / 200e9));
  // Tensor parallelism 2: 4 members per node, 4 adapters.
  t.data_parallel_stride = 2;
  CHECK(t.data_parallel_members_per_node() == 4);
  CHECK(data_parallel_all_reduce_s(bytes, t) == Approx(2.0 * 31 / 32 * bytes / 100e9));
  // Tensor parallelism 8: one member per node, the network ring.
  t.data_parallel_stride = 8;
  CHECK(data_parallel_all_reduce_s(bytes, t) == Approx(ring_all_reduce_s(bytes, 32, t.inter_node)));
  // Fast adapters: NVLink, carrying 7 of the 8 rings, limits at 300 x 8/7 GB/s.
  t.data_parallel_stride = 1;
  t.inter_node = LinkSpec{100e9, 0.0};
  CHECK(data_parallel_all_reduce_s(bytes, t) == Approx(2.0 * 31 / 32 * bytes / (300e9 * 8 / 7)));
  // With latency: 2(n-1) steps of the network's latency.
  t.inter_node = LinkSpec{25e9, 5e-6};
  CHECK(data_parallel_all_reduce_s(bytes, t) == Approx(62 * 5e-6 + 2.0 * 31 / 32 * bytes / 200e9));
  t.data_parallel = 1;
  CHECK(data_parallel_all_reduce_s(bytes, t) == 0.0);
}
