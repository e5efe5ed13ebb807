// What NCCL's all-to-all achieves on H100 nodes, and the SMs its kernel takes (sim/src/efficiency.cpp
// hopper_all_to_all, sim/src/expert_layer.cpp; sources in docs/MODEL.md, "Mixture of experts").
// - The H100 preset: in-node shares at 370 of NVLink's 450 GB/s, off-node shares at 48.5 of the
//   adapter's 50 GB/s; the kernel takes 32 SMs in a group inside one node, 16 across nodes.
// - Qwen3-235B-A22B's shape (EP 32, 8 members a node: 24 of each rank's 32 shares cross the
//   network): 134,217,728 bytes a rank (2048 tokens x 8 copies x 4096 x 2 bytes) take
//   100,663,296 / 48.5e9 + 5 us = 2.0805 ms against 2.0183 ms at the line rate; the in-node
//   shares (29,360,128 bytes at 370 GB/s, 79 us) hide under them. Compute beside it runs
//   132 / 116 = 1.138 times longer; beside EP 8 inside a node, 132 / 100 = 1.32.
// - Mixtral 8x7B, EP 8 on one node of 8 and over two of 4: expert_times prices its dispatch and
//   combine at those rates, and derive_costs hands the slowdown to the stages.
// - A dense model's costs and prediction are the same with the H100's all-to-all figures as
//   without them; a device without figures (B200) keeps the links' full rates and no slowdown.
#include <catch2/catch.hpp>

#include "pipescope/core/generators.hpp"
#include "pipescope/core/passes.hpp"
#include "pipescope/sim/expert_layer.hpp"
#include "pipescope/sim/model.hpp"
#include "pipescope/sim/simulator.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

ExpertLinks nodes_of(int gpus_per_node, const DeviceSpec& device) {
  return ExpertLinks{{450e9, 2e-6}, {50e9, 5e-6}, gpus_per_node, device.all_to_all};
}

ParallelConfig mixtral_ep8() {
  ParallelConfig p;
  p.pipeline = 4;
  p.data_parallel = 8;
  p.expert_parallel = 8;
  return p;
}

}  // namespace

TEST_CASE("the H100's all-to-all figures: NCCL's achieved rates and its kernel's SMs") {
  const AllToAllFigures a = device_preset("h100").all_to_all;
  CHECK(a.nvlink_fraction * 450e9 == Approx(370e9));
  CHECK(a.network_fraction * 50e9 == Approx(48.5e9));
  CHECK(a.sms_in_node == 32);
  CHECK(a.sms_across_nodes == 16);
  CHECK(device_preset("h200").all_to_all.sms_across_nodes == 16);
  const AllToAllFigures none = device_preset("b200").all_to_all;
  CHECK(none.nvlink_fraction == 1);
  CHECK(none.network_fraction == 1);
  CHECK(none.sms_in_node == 0);
}

TEST_CASE("an all-to-all of 32 ranks over four nodes runs at one adapter's achieved rate") {
  const DeviceSpec h100 = device_preset("h100");
  const ExpertLinks achieved = achieved_all_to_all_links(nodes_of(8, h100));
  CHECK(achieved.intra_node.bandwidth_bytes_per_s == Approx(370e9));
  CHECK(achieved.inter_node.bandwidth_bytes_per_s == Approx(48.5e9));
  CHECK(achieved.inter_node.latency_s == 5e-6);
  const double bytes = 2048.0 * 8 * 4096 * 2;
  CHECK(all_to_all_s(bytes, 32, 8, achieved) == Approx(bytes * 24 / 32 / 48.5e9 + 5e-6));
  CHECK(all_to_all_s(bytes, 32, 8, achieved) == Approx(2.0805e-3).epsilon(1e-4));
  CHECK(all_to_all_s(bytes, 32, 8, nodes_of(8, h100)) == Approx(2.0183e-3).epsilon(1e-4));
  CHECK(all_to_all_s(bytes, 8, 8, achieved) == Approx(bytes * 7 / 8 / 370e9 + 2e-6));

  CHECK(compute_slowdown_beside_all_to_all(h100, nodes_of(8, h100), 32, 8) == Approx(132.0 / 116));
  CHECK(compute_slowdown_beside_all_to_all(h100, nodes_of(8, h100), 8, 8) == Approx(132.0 / 100));
  CHECK(compute_slowdown_beside_all_to_all(h100, nodes_of(8, h100), 8, 4) == Approx(132.0 / 116));
  CHECK(compute_slowdown_beside_all_to_all(h100, nodes_of(8, h100), 1, 8) == 1);
  CHECK(compute_slowdown_beside_all_to_all(h100, ExpertLinks{{450e9, 2e-6}, {50e9, 5e-6}, 8}, 32, 8) == 1);
}

TEST_CASE("a MoE layer's dispatch and combine are priced at the achieved rates, its stages carry the slowdown") {
  const ModelSpec m = resolve_model("mixtral-8x7b");
  const DeviceSpec h100 = device_preset("h100");
  const double bytes = 4096.0 * 2 * 4096 * 2;
  const ExpertTimes in_node = expert_times(m, h100, nodes_of(8, h100), mixtral_ep8());
  CHECK(in_node.all_to_all_f_s == Approx(2 * (bytes * 7 / 8 / 370e9 + 2e-6)));
  CHECK(in_node.compute_slowdown == Approx(1.32));
  const ExpertTimes across = expert_times(m, h100, nodes_of(4, h100), mixtral_ep8());
  CHECK(across.all_to_all_f_s == Approx(2 * (bytes * 4 / 8 / 48.5e9 + 5e-6)));
  CHECK(across.compute_slowdown == Approx(132.0 / 116));

  Topology nodes_of_4;
  nodes_of_4.gpus_per_node = 4;
  const CostModel costs = derive_costs(m, h100, nodes_of_4, mixtral_ep8());
  CHECK(costs.stages[0].all_to_all.compute_slowdown == Approx(132.0 / 116));
  CHECK(costs.stages[0].all_to_all.dispatch_f_s == Approx(8 * (bytes * 4 / 8 / 48.5e9 + 5e-6)));
  const CostModel b200 = derive_costs(m, device_preset("b200"), nodes_of_4, mixtral_ep8());
  CHECK(b200.stages[0].all_to_all.compute_slowdown == 1);
  CHECK(b200.stages[0].all_to_all.dispatch_f_s == Approx(8 * (bytes * 4 / 8 / 50e9 + 5e-6)));
}

TEST_CASE("a dense model's costs and prediction do not depend on the all-to-all figures") {
  const ModelSpec llama = resolve_model("llama-3-8b");
  const DeviceSpec h100 = device_preset("h100");
  DeviceSpec without = h100;
  without.all_to_all = AllToAllFigures{};
  ParallelConfig p;
  p.pipeline = 4;
  p.data_parallel = 8;
  const CostModel with_figures = derive_costs(llama, h100, Topology{}, p);
  const CostModel without_figures = derive_costs(llama, without, Topology{}, p);
  REQUIRE(with_figures.stages.size() == without_figures.stages.size());
  for (std::size_t st = 0; st < with_figures.stages.size(); ++st) {
    CHECK(with_figures.stages[st].f_s == without_figures.stages[st].f_s);
    CHECK(with_figures.stages[st].b_s == without_figures.stages[st].b_s);
    CHECK(with_figures.stages[st].w_s == without_figures.stages[st].w_s);
    CHECK_FALSE(with_figures.stages[st].all_to_all.any());
  }
  ScheduleParams params;
  params.num_ranks = 4;
  params.num_micro_batches = 16;
  const CompiledSchedule schedule = compile(lower(one_f_one_b_order(params)));
  CHECK(simulate(schedule, with_figures, Topology{}).summary.iteration_time_s ==
        simulate(schedule, without_figures, Topology{}).summary.iteration_time_s);
}
