// Ranks that share a GPU (shared_gpu.hpp): NCCL refuses two ranks of one communicator on one
// device unless each has a host identity of its own.
// Expected: GPUs are shared only when the node's ranks outnumber them (and never without a GPU
// or without LOCAL_WORLD_SIZE); each sharing rank then gets an identity of its own that names
// the host, and a user's NCCL_HOSTID is left as it is; the host name is never empty; the
// notice is one line naming the ranks and the GPUs.
#include <catch2/catch.hpp>

#include <set>

#include "shared_gpu.hpp"

using namespace pipescope::exec;

TEST_CASE("ranks share GPUs only when they outnumber them", "[shared_gpu]") {
  CHECK(ranks_share_gpus(4, 1));
  CHECK(ranks_share_gpus(3, 2));
  CHECK_FALSE(ranks_share_gpus(2, 2));
  CHECK_FALSE(ranks_share_gpus(1, 8));
  CHECK_FALSE(ranks_share_gpus(4, 0));  // no GPU: nothing to share (the CUDA device fails by itself)
  CHECK_FALSE(ranks_share_gpus(0, 1));  // LOCAL_WORLD_SIZE unknown: NCCL is left as it is
}

TEST_CASE("each rank that shares a GPU gets a host identity of its own", "[shared_gpu]") {
  std::set<std::string> ids;
  for (int rank = 0; rank < 4; ++rank) {
    const auto id = nccl_host_id_for_shared_gpu(rank, 4, 1, nullptr, "node7");
    REQUIRE(id);
    CHECK(id->starts_with("node7/"));
    ids.insert(*id);
  }
  CHECK(ids.size() == 4);
}

TEST_CASE("NCCL's own host identity stays where GPUs are not shared or the user set one", "[shared_gpu]") {
  CHECK_FALSE(nccl_host_id_for_shared_gpu(1, 2, 2, nullptr, "node7"));
  CHECK_FALSE(nccl_host_id_for_shared_gpu(1, 4, 1, "chosen", "node7"));
  CHECK_FALSE(this_host_name().empty());
}

TEST_CASE("the notice names the ranks and the GPUs in one line", "[shared_gpu]") {
  CHECK(shared_gpu_notice(4, 1).starts_with("pprun: 4 ranks share 1 GPU on this node: NCCL connects them"));
  CHECK(shared_gpu_notice(3, 2).starts_with("pprun: 3 ranks share 2 GPUs on this node"));
  const std::string one = shared_gpu_notice(4, 1);
  CHECK(one.find('\n') == one.size() - 1);
}
