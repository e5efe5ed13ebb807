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
  t.data_parallel = 16;
  CHECK(&t.data_parallel_link() == &t.inter_node);
}
