// The routed experts of a MoE layer on one rank (sim/src/expert_layer.cpp) and what derive_costs
// makes of them. Scenario: Mixtral 8x7B (h 4096, FFN 14336, 8 experts, top 2), s 4096, b 1, T 1.
// - Rows the rank's experts take: 4096 tokens x 2 = 8192; x 1.5 with --moe-imbalance 1.5; a
//   capacity factor of 1.25 caps that at 10240 (tokens beyond capacity are dropped).
// - Dispatch and combine: each rank sends 4096 x 2 x 4096 x 2 bytes = 134,217,728, an eighth to
//   each of 8 members; on one node of 8, 7/8 of it on NVLink (450 GB/s, 2 us):
//   117,440,512 / 450e9 + 2e-6 s each. On nodes of 4 the 4 off-node eighths go through the
//   rank's 50 GB/s adapter: 67,108,864 / 50e9 + 5e-6 s. FP8 dispatch halves the dispatch's bytes.
// - Parameters: one expert is 3 x 4096 x 14336 = 176,160,768; EP 8 holds one per rank, and so
//   does EP 4 with expert TP 2 (two experts, each halved).
// - Memory: with EP 8 a stage of 8 layers holds 7 experts a layer fewer than with EP 1, 20 bytes
//   each parameter (16-bit weights and gradients, Adam state): 8 x 7 x 176,160,768 x 20 bytes.
// - EP 1 has no all-to-all; the dense model's costs are what they were (test_model*.cpp).
#include <catch2/catch.hpp>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/expert_layer.hpp"
#include "pipescope/sim/model.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

ParallelConfig mixtral_layout(int expert_parallel) {
  ParallelConfig p;
  p.pipeline = 4;
  p.data_parallel = 8;
  p.expert_parallel = expert_parallel;
  return p;
}

const ExpertLinks kNodeOf8{{450e9, 2e-6}, {50e9, 5e-6}, 8};

}  // namespace

TEST_CASE("the busiest rank's experts take top_k copies of its tokens, imbalance and capacity applied") {
  const ModelSpec m = resolve_model("mixtral-8x7b");
  ParallelConfig p = mixtral_layout(8);
  CHECK(expert_rows_on_rank(m, p) == 8192);
  p.moe_imbalance = 1.5;
  CHECK(expert_rows_on_rank(m, p) == 12288);
  ModelSpec capped = m;
  capped.capacity_factor = 1.25;
  CHECK(expert_rows_on_rank(capped, p) == 10240);
}

TEST_CASE("dispatch and combine are all-to-alls on NVLink inside a node and the network across") {
  const ModelSpec m = resolve_model("mixtral-8x7b");
  const DeviceSpec h100 = device_preset("h100");
  const double bytes = 4096.0 * 2 * 4096 * 2;
  CHECK(all_to_all_s(bytes, 8, 8, kNodeOf8) == Approx(bytes * 7 / 8 / 450e9 + 2e-6));
  CHECK(all_to_all_s(bytes, 8, 4, kNodeOf8) == Approx(bytes * 4 / 8 / 50e9 + 5e-6));
  CHECK(all_to_all_s(bytes, 1, 8, kNodeOf8) == 0);

  const ExpertTimes one = expert_times(m, h100, kNodeOf8, mixtral_layout(1));
  CHECK(one.all_to_all_f_s == 0);
  const ExpertTimes in_node = expert_times(m, h100, kNodeOf8, mixtral_layout(8));
  CHECK(in_node.all_to_all_f_s == Approx(2 * (bytes * 7 / 8 / 450e9 + 2e-6)));
  CHECK(in_node.all_to_all_b_s == Approx(in_node.all_to_all_f_s));
  const ExpertTimes across = expert_times(m, h100, ExpertLinks{kNodeOf8.intra_node, kNodeOf8.inter_node, 4},
                                          mixtral_layout(8));
  CHECK(across.all_to_all_f_s == Approx(2 * (bytes * 4 / 8 / 50e9 + 5e-6)));
  CHECK(across.f_s > in_node.f_s);

  ParallelConfig fp8 = mixtral_layout(8);
  fp8.fp8_dispatch = true;
  CHECK(expert_times(m, h100, kNodeOf8, fp8).all_to_all_f_s ==
        Approx(bytes / 2 * 7 / 8 / 450e9 + 2e-6 + bytes * 7 / 8 / 450e9 + 2e-6));
  ParallelConfig busy = mixtral_layout(8);
  busy.moe_imbalance = 2;
  const ExpertTimes imbalanced = expert_times(m, h100, kNodeOf8, busy);
  CHECK(imbalanced.all_to_all_f_s == Approx(2 * (2 * bytes * 7 / 8 / 450e9 + 2e-6)));
  CHECK(imbalanced.f_s > 1.5 * (in_node.f_s - in_node.all_to_all_f_s));
}

TEST_CASE("expert weights are split over EP and expert TP; the stage's memory follows") {
  const ModelSpec m = resolve_model("mixtral-8x7b");
  CHECK(expert_parameters_on_rank(m, mixtral_layout(8)) == 176160768);
  ParallelConfig folded = mixtral_layout(4);
  folded.expert_tensor_parallel = 2;
  CHECK(expert_parameters_on_rank(m, folded) == 176160768);
  CHECK(expert_parameters_on_rank(m, mixtral_layout(1)) == 8 * 176160768LL);

  const DeviceSpec h100 = device_preset("h100");
  const Topology nodes;
  const CostModel ep1 = derive_costs(m, h100, nodes, mixtral_layout(1));
  const CostModel ep8 = derive_costs(m, h100, nodes, mixtral_layout(8));
  REQUIRE(ep1.stages.size() == 4);
  CHECK(static_cast<double>(ep1.stages[1].static_bytes - ep8.stages[1].static_bytes) ==
        Approx(8.0 * 7 * 176160768 * 20));
  // The same FLOPs on each rank, in fewer, larger groups, plus the all-to-all.
  CHECK(ep8.stages[1].f_s != ep1.stages[1].f_s);
  // The distributed optimizer shards the experts over the expert data-parallel group: with EP 8
  // of 8 GPUs it is one GPU, so their 16 bytes stay whole while the dense part's shrink by 8.
  ParallelConfig sharded = mixtral_layout(8);
  sharded.zero1 = true;
  CHECK(sharded.expert_data_parallel() == 1);
  CHECK(derive_costs(m, h100, nodes, sharded).stages[1].static_bytes < ep8.stages[1].static_bytes);
}

TEST_CASE("expert parallelism that Megatron would refuse is named in one line") {
  const ModelSpec m = resolve_model("mixtral-8x7b");
  ParallelConfig p = mixtral_layout(3);
  CHECK(expert_parallel_problem(m, p, 8).value_or("") == "--expert-parallel 3: does not divide the 8 experts of mixtral-8x7b");
  p = mixtral_layout(8);
  p.data_parallel = 4;
  CHECK(expert_parallel_problem(m, p, 8).value_or("") ==
        "--expert-parallel 8: EP x expert TP = 8 does not divide the 4 GPUs of a pipeline stage (tensor x context x "
        "data parallel), as Megatron requires");
  p = mixtral_layout(2);
  p.tensor_parallel = 2;
  CHECK(expert_parallel_problem(m, p, 8).value_or("") ==
        "--tensor-parallel 2: a MoE model needs --sequence-parallel with tensor parallelism, as Megatron requires");
  p.sequence_parallel = true;
  CHECK_FALSE(expert_parallel_problem(m, p, 8));
  CHECK(expert_parallel_problem(resolve_model("gpt-7b"), mixtral_layout(2), 8).value_or("") ==
        "--expert-parallel 2: gpt-7b has no experts (a dense model)");
  CHECK_THROWS_AS(derive_costs(m, device_preset("h100"), Topology{}, mixtral_layout(3)), UsageError);
}

// A measured routing of 16 tokens over 8 experts, [4, 1, 1, 1, 1, 1, 1, 6]: EP ranks hold
// consecutive experts, so EP 2 sees 7 and 9 of a mean 8 (1.125), EP 4 sees 5, 2, 2, 7 of a mean 4
// (1.75), EP 8 the busiest expert's 6 of a mean 2 (3); a capacity factor of 2 caps each expert at
// 4 tokens, so EP 8's busiest takes 4 (2).
TEST_CASE("a measured routing histogram gives each EP size its own load factor") {
  ModelSpec m = resolve_model("mixtral-8x7b");
  ParallelConfig p = mixtral_layout(2);
  p.expert_tokens = {4, 1, 1, 1, 1, 1, 1, 6};
  CHECK(expert_load_factor(m, p) == Approx(1.125));
  p.expert_parallel = 4;
  CHECK(expert_load_factor(m, p) == Approx(1.75));
  p.expert_parallel = 8;
  CHECK(expert_load_factor(m, p) == Approx(3));
  m.capacity_factor = 2;
  CHECK(expert_load_factor(m, p) == Approx(2));
  p.expert_tokens.pop_back();
  CHECK(expert_parallel_problem(m, p, 8).value_or("") == "--moe-routing: 7 expert counts for the 8 experts of mixtral-8x7b");
}
