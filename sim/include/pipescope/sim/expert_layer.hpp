// The routed experts of one MoE layer on one rank, as Megatron-Core runs them with expert
// parallelism: the router, the token dispatch and combine (all-to-all over the EP group), the
// experts' grouped products and what they keep for the backward. The layer's dense part
// (attention, shared experts) is an ordinary layer (layer_costs.hpp, ModelSpec::moe_layer_dense_part);
// derive_costs adds the two. Formulas: docs/MODEL.md, "Mixture of experts".
#pragma once

#include <cstdint>

#include "pipescope/sim/model.hpp"

namespace pipescope::sim {

// The tokens the busiest rank's experts take, over the mean: --moe-imbalance, capped by the
// capacity factor when experts drop what exceeds it.
double expert_load_factor(const ModelSpec& model, const ParallelConfig& parallel);

// Rows (token copies) the rank's local experts take in one micro-batch: its tokens (s b / C, split
// by T under the sequence parallelism MoE needs with T > 1), top_k copies each, gathered over the
// expert-tensor-parallel group, times the load factor.
double expert_rows_on_rank(const ModelSpec& model, const ParallelConfig& parallel);

// Seconds of the routed part of one MoE layer on the busiest rank.
struct ExpertTimes {
  double f_s = 0;  // router, permutation, the experts' products, dispatch and combine
  double b_s = 0;  // their input gradients and the all-to-alls' reverse
  double w_s = 0;  // the experts' and the router's weight gradients
  // Of f_s and b_s: the dispatch and combine all-to-all (and expert TP's all-gather and
  // reduce-scatter), exposed when a pass runs alone; an overlapped F&B step hides them
  // (costs.hpp, ExpertAllToAll). all_to_all_f_s = dispatch_f_s + combine_f_s, and likewise b.
  double all_to_all_f_s = 0;
  double all_to_all_b_s = 0;
  double dispatch_f_s = 0;
  double combine_f_s = 0;
  double dispatch_b_s = 0;  // the dispatch's reverse
  double combine_b_s = 0;   // the combine's reverse
  // What the rank sends in one dispatch and in one combine (the busiest rank's token copies).
  double dispatch_bytes = 0;
  double combine_bytes = 0;
  // How much longer the rank's compute runs while one of these all-to-alls is on the wire
  // (compute_slowdown_beside_all_to_all); 1 without expert parallelism.
  double compute_slowdown = 1;
};

// The links of the expert-parallel group: NVLink among the members on one node, the network
// (one adapter per GPU) to the others; and what NCCL's all-to-all achieves on them (the device's
// figures; by default the links' full rates and no SMs taken).
struct ExpertLinks {
  LinkSpec intra_node;
  LinkSpec inter_node;
  int gpus_per_node = 8;
  AllToAllFigures achieved{};
};
ExpertTimes expert_times(const ModelSpec& model, const DeviceSpec& device, const ExpertLinks& links,
                         const ParallelConfig& parallel);

// One all-to-all in which each of `group` members sends `bytes_per_rank` spread evenly over the
// group (its own share stays), `members_per_node` of them on each node: the in-node shares on
// NVLink and the rest on the rank's adapter, at once, each at the link's bandwidth as given.
double all_to_all_s(double bytes_per_rank, int group, int members_per_node, const ExpertLinks& links);

// The links at what NCCL's all-to-all achieves on them: each bandwidth times its fraction
// (ExpertLinks::achieved). expert_times prices the dispatch and combine on these.
ExpertLinks achieved_all_to_all_links(const ExpertLinks& links);

// How much longer compute runs beside one all-to-all of a group of `group` members,
// `members_per_node` of them on each node: its kernel holds some of the device's SMs
// (ExpertLinks::achieved, in a node or across nodes) and the compute runs on the rest,
// SMs / (SMs - taken), as userbuffer_slowdown prices Transformer Engine's. 1 for a group of one.
double compute_slowdown_beside_all_to_all(const DeviceSpec& device, const ExpertLinks& links, int group,
                                          int members_per_node);

// Bytes the routed part of one MoE layer keeps from F until B on the rank (the router's
// probabilities, the permuted tokens, the experts' hidden activations, their outputs for the
// combine's backward), sized for the load factor.
std::int64_t expert_activation_bytes(const ModelSpec& model, const ParallelConfig& parallel);

// The routed experts' activation function on the rank, one micro-batch of one MoE layer: its
// output's bytes (the second product's input, FP8 under FP8: what --recompute-modules moe_act
// drops) and what its kernel reads and writes (what running it again costs).
struct ExpertActivation {
  double output_bytes = 0;
  double moved_bytes = 0;
};
ExpertActivation expert_activation(const ModelSpec& model, const ParallelConfig& parallel);

// Parameters of the routed experts of one MoE layer on one rank: num_experts / EP experts, each
// split over expert tensor parallelism. The router (replicated) is counted with the dense part.
std::int64_t expert_parameters_on_rank(const ModelSpec& model, const ParallelConfig& parallel);

}  // namespace pipescope::sim
