// An overlapped F&B step with the compute slowed beside the all-to-all (sim/src/pair_timeline.cpp,
// sim/src/expert_layer_overlap.cpp, Megatron's combined step in sim/src/megatron_combined_step.cpp).
// - One MoE layer each: F compute 4, dispatch 1, combine 1; B compute 8, 1 and 1 (the worked
//   example of docs/MODEL.md, which takes 12 with F ending at 9). The all-to-all kernel takes 16
//   of 132 SMs (NCCL across H100 nodes): compute beside it runs 132/116 times longer, so each
//   second of a link piece that a compute piece runs beside adds 16/132 s to it. Compute: F
//   0-2.121 (beside B's combine 0-1), B 2.121-6.242 (beside F's dispatch), F 6.242-8.364
//   (beside B's dispatch), B 8.364-12.485 (beside F's combine): 12 + 4 x 16/132; F's combine
//   ends at 9 + 3 x 16/132. DualPipeV's order (first ready, the backward's on a tie) and
//   Megatron's stream order give the same step here, with and without the slowdown.
// - A pass alone never runs compute beside its own all-to-all: 4 + 2 = 6 whatever the SMs.
// - A link-bound pair (compute 2, all-to-all 3 + 3 each) takes 12, the all-to-all's sum; slowed,
//   never less. A pair with nothing on the link is not slowed at all.
// - DualPipeV's free interleaving with delayed weight gradients (F compute 4, dispatch and
//   combine 3; B compute 8 of which 4 weight gradients, 3 and 3): B's combine 0-3, F 0-2, F's
//   dispatch 3-6 beside B's experts' data gradients 3-5, their weight gradients 5-7 filling the
//   compute (F waits for its dispatch), B's dispatch 6-9, F 7-9, F's combine 9-12 beside B's
//   data gradients 9-11, the last weight gradients 11-13: 13 with F's combine ending at 12,
//   against 14 and 13 with B's dispatch waiting for its experts' whole backward.
// - Mixtral 8x7B, interleaved 1F1B with Megatron's overlap, EP 8 over nodes of 4 on H100: the
//   slowed pairs hide less and the iteration is longer than the same costs with no SMs taken.
#include <catch2/catch.hpp>

#include <vector>

#include "pair_timeline.hpp"
#include "pipescope/core/generators.hpp"
#include "pipescope/core/passes.hpp"
#include "pipescope/sim/model.hpp"
#include "pipescope/sim/simulator.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

constexpr double kSmsTaken = 16;
constexpr double kSms = 132;
constexpr double kSlowdown = kSms / (kSms - kSmsTaken);

ExpertAllToAll pair_layer(double dispatch_s, double combine_s, double slowdown) {
  ExpertAllToAll a;
  a.dispatch_f_s = a.dispatch_b_s = dispatch_s;
  a.combine_f_s = a.combine_b_s = combine_s;
  a.moe_layers = 1;
  a.group_size = 32;
  a.compute_slowdown = slowdown;
  return a;
}

// The worked example in Megatron's stream order: communication combine_b, dispatch_f,
// dispatch_b, combine_f; computation pre_dispatch_f, mlp_b, mlp_f, pre_dispatch_b.
std::vector<detail::PairPiece> megatron_issue_order() {
  using detail::PairResource;
  using Kind = AllToAllPiece::Kind;
  return {{PairResource::Link, true, 1, Kind::CombineB},
          {PairResource::Compute, false, 2},
          {PairResource::Compute, true, 4},
          {PairResource::Link, false, 1, Kind::DispatchF},
          {PairResource::Link, true, 1, Kind::DispatchB},
          {PairResource::Compute, false, 2},
          {PairResource::Link, false, 1, Kind::CombineF},
          {PairResource::Compute, true, 4}};
}

ParallelConfig mixtral_interleaved() {
  ParallelConfig p;
  p.pipeline = 4;
  p.chunks = 2;
  p.data_parallel = 8;
  p.expert_parallel = 8;
  return p;
}

}  // namespace

TEST_CASE("compute beside an all-to-all runs SMs / (SMs - taken) times longer in an overlapped pair") {
  const OverlappedStep plain = overlapped_step(4, pair_layer(1, 1, 1), 8, pair_layer(1, 1, 1));
  CHECK(plain.length_s() == 12);
  CHECK(plain.forward_end_s == 9);

  const OverlappedStep slowed = overlapped_step(4, pair_layer(1, 1, kSlowdown), 8, pair_layer(1, 1, kSlowdown));
  const double per_second_beside = kSmsTaken / kSms;
  CHECK(slowed.length_s() == Approx(12 + 4 * per_second_beside));
  CHECK(slowed.forward_end_s == Approx(9 + 3 * per_second_beside));
  REQUIRE(slowed.pieces.size() == 4);
  // The link pieces start when their passes' slowed compute lets them: F's dispatch at 2.121.
  CHECK(slowed.pieces[0].kind == AllToAllPiece::Kind::CombineB);
  CHECK(slowed.pieces[0].start_s == 0);
  CHECK(slowed.pieces[1].kind == AllToAllPiece::Kind::DispatchF);
  CHECK(slowed.pieces[1].start_s == Approx(2 + per_second_beside));
  CHECK(slowed.pieces[1].end_s == Approx(3 + per_second_beside));

  // Either pass's figure slows the pair (both share the rank's EP group).
  CHECK(overlapped_step(4, pair_layer(1, 1, kSlowdown), 8, pair_layer(1, 1, 1)).length_s() ==
        Approx(slowed.length_s()));
}

TEST_CASE("Megatron's stream order gives the same slowed step as DualPipeV's on the worked example") {
  const detail::PairTimeline plain =
      detail::run_pair_timeline(megatron_issue_order(), detail::PairOrder::IssueOrder, 1);
  CHECK(plain.backward_end_s == 12);
  CHECK(plain.link_free_s == 9);
  const detail::PairTimeline slowed =
      detail::run_pair_timeline(megatron_issue_order(), detail::PairOrder::IssueOrder, kSlowdown);
  const double per_second_beside = kSmsTaken / kSms;
  CHECK(slowed.backward_end_s == Approx(12 + 4 * per_second_beside));
  CHECK(slowed.compute_free_s == Approx(12 + 4 * per_second_beside));
  CHECK(slowed.link_free_s == Approx(9 + 3 * per_second_beside));
  REQUIRE(slowed.link_pieces.size() == 4);
  CHECK(slowed.link_pieces[2].kind == AllToAllPiece::Kind::DispatchB);
  CHECK(slowed.link_pieces[2].start_s == Approx(6 + 2 * per_second_beside));
}

TEST_CASE("a pass alone is not slowed by its own all-to-all, and a slowed pair is never shorter") {
  CHECK(overlapped_step(4, pair_layer(1, 1, kSlowdown), 0, {}).length_s() == 6);
  CHECK(overlapped_step(0, {}, 8, pair_layer(1, 1, kSlowdown)).length_s() == 10);
  const double link_bound = overlapped_step(2, pair_layer(3, 3, 1), 2, pair_layer(3, 3, 1)).length_s();
  CHECK(link_bound == 12);
  CHECK(overlapped_step(2, pair_layer(3, 3, kSlowdown), 2, pair_layer(3, 3, kSlowdown)).length_s() >= link_bound);
  // A compute-only pair (a dense stage) has nothing on the link: no slowdown applies.
  CHECK(overlapped_step(4, pair_layer(0, 0, kSlowdown), 8, pair_layer(0, 0, kSlowdown)).length_s() == 12);
}

TEST_CASE("DualPipeV's pairs run delayed weight gradients where the compute has nothing else ready") {
  const OverlappedStep whole = overlapped_step(4, pair_layer(3, 3, 1), 8, pair_layer(3, 3, 1));
  CHECK(whole.length_s() == 14);
  CHECK(whole.forward_end_s == 13);
  const OverlappedStep delayed = overlapped_step(4, pair_layer(3, 3, 1), 8, pair_layer(3, 3, 1), 4);
  CHECK(delayed.length_s() == 13);
  CHECK(delayed.forward_end_s == 12);
  REQUIRE(delayed.pieces.size() == 4);
  CHECK(delayed.pieces[2].kind == AllToAllPiece::Kind::DispatchB);
  CHECK(delayed.pieces[2].start_s == 6);
}

TEST_CASE("Megatron's overlapped pairs hide less once the all-to-all's SMs are priced") {
  Topology topology;
  topology.gpus_per_node = 4;
  const ParallelConfig layout = mixtral_interleaved();
  CostModel slowed = derive_costs(resolve_model("mixtral-8x7b"), device_preset("h100"), topology, layout);
  slowed.overlap_moe_all_to_all = true;
  REQUIRE(slowed.stages[0].all_to_all.compute_slowdown == Approx(kSlowdown));
  CostModel unslowed = slowed;
  for (StageCost& c : unslowed.stages) c.all_to_all.compute_slowdown = 1;

  ScheduleParams params;
  params.num_ranks = 4;
  params.num_micro_batches = 16;
  params.chunks = 2;
  const CompiledSchedule interleaved = compile(lower(interleaved_1f1b_order(params)));
  const Topology placed = with_parallel_layout(topology, layout);
  const SimResult with_sms = simulate(interleaved, slowed, placed);
  const SimResult without_sms = simulate(interleaved, unslowed, placed);
  CHECK(with_sms.all_to_all.overlapped_pairs == without_sms.all_to_all.overlapped_pairs);
  CHECK(with_sms.all_to_all.total_s == Approx(without_sms.all_to_all.total_s));
  CHECK(with_sms.all_to_all.hidden_s < without_sms.all_to_all.hidden_s);
  CHECK(with_sms.summary.iteration_time_s > without_sms.summary.iteration_time_s);
}
