// The experts' all-to-all as its own work in the simulator (costs.hpp ExpertAllToAll,
// sim/src/expert_layer_overlap.cpp, sim/src/simulator.cpp).
// - Hand-computed steps, one MoE layer each (a pass: compute halves around dispatch and
//   combine; the backward in reverse; pieces placed as soon as their pass and their resource
//   allow, the backward's first on a tie):
//   * F compute 4, dispatch 1, combine 1; B compute 8, 1 and 1. Compute: F 0-2, B 2-6, F 6-8,
//     B 8-12; link: B's combine 0-1, F's dispatch 2-3, B's dispatch 6-7, F's combine 8-9.
//     The step ends at 12 = compute F + B (the all-to-all all hidden), not 16; F ends at 9.
//   * Link-bound: F compute 2, 3 and 3; B the same. The step takes 12, the all-to-all's sum.
//   * A pass alone takes its compute plus its all-to-all: F 4 + 2 = 6.
// - Mixtral 8x7B on H100, 4 ranks x 2 chunks, DP 8, EP 8 over two nodes of 4, 16 micro-batches:
//   DualPipeV's marked F&B steps hide part of the all-to-all and predict a shorter iteration than
//   the same order without the marks; Llama 3 8B (dense) predicts exactly the same with or
//   without them.
// - 1F1B of the MoE model without --overlap-moe-expert-parallel-comm predicts exactly what the
//   same costs predict with the all-to-all folded into the passes (today's model); with it, its
//   13 + 14 + 15 steady-state pairs overlap; interleaved 1F1B's pairs hide some and its iteration
//   is shorter; a dense model is unchanged.
// - ppsim simulate: the summary line says how much was hidden (0 % without pairs; none for a
//   dense model); the flag is refused in one line for 1f1b, zbv, a dense model and explicit costs.
// - The trace shows ALL_TO_ALL_DISPATCH_F/COMBINE_F/DISPATCH_B/COMBINE_B on the all-to-all
//   lane with their bytes and the expert-parallel group's size (8) in args; in an overlapped
//   step some run while the rank computes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "pipescope/core/generators.hpp"
#include "pipescope/core/passes.hpp"
#include "pipescope/sim/model.hpp"
#include "pipescope/sim/simulator.hpp"
#include "ppsim_run.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

ExpertAllToAll one_layer(double dispatch_s, double combine_s) {
  ExpertAllToAll a;
  a.dispatch_f_s = a.dispatch_b_s = dispatch_s;
  a.combine_f_s = a.combine_b_s = combine_s;
  a.moe_layers = 1;
  a.group_size = 8;
  return a;
}

ParallelConfig moe_overlap_layout(int chunks) {
  ParallelConfig p;
  p.pipeline = 4;
  p.chunks = chunks;
  p.data_parallel = 8;
  p.expert_parallel = 8;
  return p;
}

ScheduleParams moe_overlap_params(int chunks) {
  ScheduleParams params;
  params.num_ranks = 4;
  params.num_micro_batches = 16;
  params.chunks = chunks;
  return params;
}

// Nodes of 4 GPUs: the EP group of 8 spans two nodes, and half of each all-to-all crosses the
// network, where there is something to hide.
Topology nodes_of_4() {
  Topology t;
  t.gpus_per_node = 4;
  return t;
}

// The order as generated, or with DualPipeV's F&B marks taken off.
CompiledSchedule dualpipev_compiled(bool marked) {
  ComputeOrder order = dualpipev_order(moe_overlap_params(2));
  if (!marked)
    for (auto& ops : order.per_rank)
      for (Instruction& instr : ops) instr.overlaps_next_backward = false;
  return compile(std::move(order));
}

}  // namespace

TEST_CASE("an overlapped F&B step takes the longer of its compute and its all-to-all: hand-computed cases") {
  const OverlappedStep step = overlapped_step(4, one_layer(1, 1), 8, one_layer(1, 1));
  CHECK(step.length_s() == 12);
  CHECK(step.forward_end_s == 9);
  CHECK(step.backward_end_s == 12);
  REQUIRE(step.pieces.size() == 4);
  using Kind = AllToAllPiece::Kind;
  CHECK((step.pieces[0].kind == Kind::CombineB && step.pieces[0].start_s == 0 && step.pieces[0].end_s == 1));
  CHECK((step.pieces[1].kind == Kind::DispatchF && step.pieces[1].start_s == 2 && step.pieces[1].end_s == 3));
  CHECK((step.pieces[2].kind == Kind::DispatchB && step.pieces[2].start_s == 6 && step.pieces[2].end_s == 7));
  CHECK((step.pieces[3].kind == Kind::CombineF && step.pieces[3].start_s == 8 && step.pieces[3].end_s == 9));

  CHECK(overlapped_step(2, one_layer(3, 3), 2, one_layer(3, 3)).length_s() == 12);
  const OverlappedStep alone = overlapped_step(4, one_layer(1, 1), 0, {});
  CHECK(alone.length_s() == 6);
  CHECK(alone.backward_end_s == 0);
  // Two layers: four slices of the same work interleave no worse than one.
  ExpertAllToAll two = one_layer(2, 2);
  two.moe_layers = 2;
  CHECK(overlapped_step(8, two, 16, two).length_s() <= 16 + 8);
  CHECK(overlapped_step(8, two, 16, two).length_s() >= 24);
  CHECK(all_to_all_event_kind(Kind::CombineB) == traces::EventKind::AllToAllCombineBackward);
  CHECK(traces::event_kind_name(all_to_all_event_kind(Kind::DispatchF)) == "ALL_TO_ALL_DISPATCH_F");
}

TEST_CASE("DualPipeV's F&B steps hide a MoE model's all-to-all, and change nothing for a dense model") {
  const DeviceSpec h100 = device_preset("h100");
  const Topology topology = nodes_of_4();
  const CostModel moe = derive_costs(resolve_model("mixtral-8x7b"), h100, topology, moe_overlap_layout(2));
  REQUIRE(moe.stages.size() == 8);
  CHECK(moe.stages[0].all_to_all.moe_layers == 4);
  CHECK(moe.stages[0].all_to_all.group_size == 8);
  CHECK(moe.stages[0].all_to_all.forward_s() > 0);
  CHECK(moe.stages[0].all_to_all.dispatch_bytes == 4096LL * 2 * 4096 * 2);

  const SimResult overlapped =
      simulate(dualpipev_compiled(true), moe, with_parallel_layout(topology, moe_overlap_layout(2)));
  const SimResult serial =
      simulate(dualpipev_compiled(false), moe, with_parallel_layout(topology, moe_overlap_layout(2)));
  CHECK(overlapped.all_to_all.overlapped_pairs > 0);
  CHECK(overlapped.all_to_all.hidden_s > 0);
  CHECK(overlapped.all_to_all.hidden_s < overlapped.all_to_all.total_s);
  CHECK(serial.all_to_all.overlapped_pairs == 0);
  CHECK(serial.all_to_all.hidden_s == 0);
  CHECK(serial.all_to_all.total_s == Approx(overlapped.all_to_all.total_s));
  CHECK(overlapped.summary.iteration_time_s < serial.summary.iteration_time_s);

  ParallelConfig dense_layout = moe_overlap_layout(2);
  dense_layout.expert_parallel = 1;
  const CostModel dense = derive_costs(resolve_model("llama-3-8b"), h100, Topology{}, dense_layout);
  const SimResult dense_marked = simulate(dualpipev_compiled(true), dense, Topology{});
  const SimResult dense_unmarked = simulate(dualpipev_compiled(false), dense, Topology{});
  CHECK(dense_marked.all_to_all.overlapped_pairs == 0);
  CHECK(dense_marked.all_to_all.total_s == 0);
  CHECK(dense_marked.summary.iteration_time_s == dense_unmarked.summary.iteration_time_s);
  CHECK(dense_marked.trace.events.size() == dense_unmarked.trace.events.size());
}

TEST_CASE("1F1B predicts what it did before unless Megatron's all-to-all overlap is asked for") {
  const CostModel moe =
      derive_costs(resolve_model("mixtral-8x7b"), device_preset("h100"), Topology{}, moe_overlap_layout(1));
  CostModel folded = moe;
  for (StageCost& c : folded.stages) c.all_to_all = {};
  const CompiledSchedule one_f_one_b = compile(lower(one_f_one_b_order(moe_overlap_params(1))));
  const SimResult plain = simulate(one_f_one_b, moe, Topology{});
  const SimResult today = simulate(one_f_one_b, folded, Topology{});
  CHECK(plain.summary.iteration_time_s == today.summary.iteration_time_s);
  CHECK(plain.summary.ranks[0].peak_memory_bytes == today.summary.ranks[0].peak_memory_bytes);
  CHECK(plain.all_to_all.hidden_s == 0);
  CHECK(plain.all_to_all.total_s > 0);

  // 1F1B's pairs: rank r's steady state, 16 - (4 - r - 1) forwards each followed by a backward (the
  // last rank's of one micro-batch, which cannot overlap). Each waits for its backward's input.
  CostModel megatron = moe;
  megatron.overlap_moe_all_to_all = true;
  const SimResult paired = simulate(one_f_one_b, megatron, Topology{});
  CHECK(paired.all_to_all.overlapped_pairs == 13 + 14 + 15);
  CHECK(paired.all_to_all.hidden_s > 0);
  // Interleaved 1F1B, where Megatron offers the overlap: its pairs hide some and the step is shorter.
  const Topology topology = with_parallel_layout(nodes_of_4(), moe_overlap_layout(2));
  const CostModel moe2 =
      derive_costs(resolve_model("mixtral-8x7b"), device_preset("h100"), nodes_of_4(), moe_overlap_layout(2));
  CostModel megatron2 = moe2;
  megatron2.overlap_moe_all_to_all = true;
  const CompiledSchedule interleaved = compile(lower(interleaved_1f1b_order(moe_overlap_params(2))));
  const SimResult interleaved_plain = simulate(interleaved, moe2, topology);
  const SimResult interleaved_overlapped = simulate(interleaved, megatron2, topology);
  CHECK(interleaved_plain.all_to_all.overlapped_pairs == 0);
  CHECK(interleaved_overlapped.all_to_all.overlapped_pairs > 0);
  CHECK(interleaved_overlapped.all_to_all.hidden_s > 0);
  CHECK(interleaved_overlapped.summary.iteration_time_s < interleaved_plain.summary.iteration_time_s);
  // The flag changes nothing for a dense model.
  CostModel dense = derive_costs(resolve_model("llama-3-8b"), device_preset("h100"), Topology{}, [] {
    ParallelConfig p = moe_overlap_layout(1);
    p.expert_parallel = 1;
    return p;
  }());
  const double dense_plain = simulate(one_f_one_b, dense, Topology{}).summary.iteration_time_s;
  dense.overlap_moe_all_to_all = true;
  CHECK(simulate(one_f_one_b, dense, Topology{}).summary.iteration_time_s == dense_plain);
}

TEST_CASE("ppsim simulate's --overlap-moe-expert-parallel-comm: interleaved-1f1b of a MoE model only, said in one line",
          "[cli]") {
  const std::string mixtral =
      "simulate --stages 4 --micro-batches 16 --model mixtral-8x7b --data-parallel 8 "
      "--expert-parallel 8 --gpus-per-node 4 ";
  const ppsim_test::PpsimRun plain = ppsim_test::run_ppsim(mixtral + "--schedule interleaved-1f1b");
  const ppsim_test::PpsimRun overlapped =
      ppsim_test::run_ppsim(mixtral + "--schedule interleaved-1f1b --overlap-moe-expert-parallel-comm");
  const ppsim_test::PpsimRun dualpipev = ppsim_test::run_ppsim(mixtral + "--schedule dualpipev");
  INFO(plain.err << overlapped.err << dualpipev.err);
  REQUIRE(plain.status == 0);
  REQUIRE(overlapped.status == 0);
  REQUIRE(dualpipev.status == 0);
  CHECK(plain.out.find("of it hidden behind compute (0.0 %, 0 overlapped F&B steps)") != std::string::npos);
  CHECK(overlapped.out.find("(0.0 %") == std::string::npos);
  CHECK(overlapped.out.find("all-to-all ") != std::string::npos);
  CHECK(dualpipev.out.find("all-to-all ") != std::string::npos);
  CHECK(dualpipev.out.find("(0.0 %") == std::string::npos);
  const ppsim_test::PpsimRun json = ppsim_test::run_ppsim(mixtral + "--schedule dualpipev --json");
  REQUIRE(json.status == 0);
  CHECK(json.out.find("\"all_to_all_hidden_per_rank_s\"") != std::string::npos);

  const ppsim_test::PpsimRun dense = ppsim_test::run_ppsim(
      "simulate --schedule dualpipev --stages 4 --micro-batches 16 --model llama-3-8b --data-parallel 8");
  REQUIRE(dense.status == 0);
  CHECK(dense.out.find("all-to-all") == std::string::npos);

  for (const std::string& bad :
       {mixtral + "--schedule 1f1b --overlap-moe-expert-parallel-comm",
        mixtral + "--schedule zbv --overlap-moe-expert-parallel-comm",
        std::string("simulate --schedule interleaved-1f1b --stages 4 --micro-batches 8 --model llama-3-8b "
                    "--overlap-moe-expert-parallel-comm"),
        std::string("simulate --schedule interleaved-1f1b --overlap-moe-expert-parallel-comm")}) {
    const ppsim_test::PpsimRun refused = ppsim_test::run_ppsim(bad);
    INFO(bad << " -> " << refused.err);
    CHECK(refused.status == 2);
    CHECK(refused.err.find("--overlap-moe-expert-parallel-comm") != std::string::npos);
    CHECK(refused.one_error_line());
  }
}

TEST_CASE("the predicted trace shows the all-to-all on its own lane, beside another micro-batch's compute") {
  const CostModel moe =
      derive_costs(resolve_model("mixtral-8x7b"), device_preset("h100"), nodes_of_4(), moe_overlap_layout(2));
  const SimResult r =
      simulate(dualpipev_compiled(true), moe, with_parallel_layout(nodes_of_4(), moe_overlap_layout(2)));
  std::set<std::string> names;
  const traces::TraceEvent* overlapped_combine = nullptr;
  for (const traces::TraceEvent& e : r.trace.events) {
    if (e.name.rfind("ALL_TO_ALL_", 0) != 0) continue;
    names.insert(e.name);
    CHECK(e.lane == static_cast<int>(traces::Lane::AllToAll));
    CHECK(traces::is_all_to_all(e.kind));
    CHECK(e.category == "collective");
    CHECK(e.bytes > 0);
    CHECK(e.dur_us > 0);
    // A backward's first all-to-all (the combine's reverse) while the rank computes the forward of
    // another micro-batch: the compute lane draws an F&B step as its F, then its B from where F's
    // last piece ends.
    if (e.name != "ALL_TO_ALL_COMBINE_B" || overlapped_combine) continue;
    for (const traces::TraceEvent& c : r.trace.events)
      if (c.rank == e.rank && c.lane == static_cast<int>(traces::Lane::Compute) && c.name == "F" &&
          c.micro_batch != e.micro_batch && c.ts_us < e.end_us() && e.ts_us < c.end_us())
        overlapped_combine = &e;
  }
  const std::set<std::string> expected{"ALL_TO_ALL_COMBINE_B", "ALL_TO_ALL_COMBINE_F", "ALL_TO_ALL_DISPATCH_B",
                                       "ALL_TO_ALL_DISPATCH_F"};
  CHECK(names == expected);
  REQUIRE(overlapped_combine != nullptr);
  const std::string* args = r.trace.args_of(static_cast<std::size_t>(overlapped_combine - r.trace.events.data()));
  REQUIRE(args != nullptr);
  CHECK(*args == R"({"group_size": 8})");
  // Per rank and lane the events stay in time order.
  for (std::size_t i = 1; i < r.trace.events.size(); ++i) {
    const traces::TraceEvent& a = r.trace.events[i - 1];
    const traces::TraceEvent& b = r.trace.events[i];
    if (a.rank == b.rank && a.lane == b.lane) CHECK(a.ts_us <= b.ts_us);
  }
}
