// Megatron's combined 1F1B step under --overlap-moe-expert-parallel-comm, as its code runs it
// (sim/src/megatron_combined_step.cpp, run by sim/src/simulator_overlap.cpp; docs/MODEL.md, "Overlapped F&B steps"):
// the forward's layer i beside the backward's layer n-1-i, in one fixed order on a compute and a
// communication stream, and the forward's output sent only after the step's last all-to-all.
// - Mixtral 8x7B, interleaved 1F1B on 4 ranks x 2 chunks (4 MoE layers a chunk, rank 0's first
//   chunk taken as one), EP 8 over two nodes of 4: in every overlapped step the forward (drawn
//   first on the compute lane) ends no earlier than every all-to-all piece that runs during the
//   step, its backward's included, also where the backward has more layers than the forward;
//   the free interleaving of DualPipeV's steps would let that forward end after its one layer.
// - A pair that is link-bound: the step takes at least both passes' all-to-all, one after the
//   other, as both run on one communication stream.
#include <catch2/catch.hpp>

#include <vector>

#include "pipescope/core/generators.hpp"
#include "pipescope/core/passes.hpp"
#include "pipescope/sim/model.hpp"
#include "pipescope/sim/simulator.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

ParallelConfig megatron_overlap_layout() {
  ParallelConfig p;
  p.pipeline = 4;
  p.chunks = 2;
  p.data_parallel = 8;
  p.expert_parallel = 8;
  return p;
}

Topology megatron_overlap_nodes_of_4() {
  Topology t;
  t.gpus_per_node = 4;
  return with_parallel_layout(t, megatron_overlap_layout());
}

// Per rank, the overlapped steps' forward events (F followed at once by a B of another
// micro-batch on the compute lane) and how many all-to-all pieces end after their F.
struct PairsSeen {
  int pairs = 0;
  int pieces_after_forward = 0;
};

PairsSeen pieces_after_each_forward(const traces::Trace& trace) {
  std::vector<const traces::TraceEvent*> compute;
  std::vector<const traces::TraceEvent*> all_to_all;
  for (const traces::TraceEvent& e : trace.events) {
    if (e.lane == static_cast<int>(traces::Lane::Compute) && (e.name == "F" || e.name == "B")) compute.push_back(&e);
    if (traces::is_all_to_all(e.kind)) all_to_all.push_back(&e);
  }
  PairsSeen seen;
  for (std::size_t i = 0; i + 1 < compute.size(); ++i) {
    const traces::TraceEvent& f = *compute[i];
    const traces::TraceEvent& b = *compute[i + 1];
    if (f.name != "F" || b.name != "B" || f.rank != b.rank || f.micro_batch == b.micro_batch) continue;
    if (b.ts_us != Approx(f.end_us()).margin(1e-6)) continue;
    ++seen.pairs;
    for (const traces::TraceEvent* a : all_to_all)
      if (a->rank == f.rank && a->ts_us > f.ts_us - 1e-3 && a->ts_us < b.end_us() - 1e-3 &&
          a->end_us() > f.end_us() + 1e-3)
        ++seen.pieces_after_forward;
  }
  return seen;
}

}  // namespace

TEST_CASE("Megatron's combined 1F1B step sends its forward's output after the step's last all-to-all") {
  CostModel costs = derive_costs(resolve_model("mixtral-8x7b"), device_preset("h100"), megatron_overlap_nodes_of_4(),
                                 megatron_overlap_layout());
  REQUIRE(costs.stages[0].all_to_all.moe_layers == 4);
  // Rank 0's first chunk as one MoE layer (its all-to-all in one slice), its second as four:
  // the steps that pair a forward of the first with a backward of the second run one layer
  // pair, then the backward's three other layers alone, and only then send the forward's output.
  // Interleaving the slices freely, that forward would end, and send, after one layer.
  costs.stages[0].all_to_all.moe_layers = 1;
  costs.overlap_moe_all_to_all = true;
  ScheduleParams params;
  params.num_ranks = 4;
  params.num_micro_batches = 16;
  params.chunks = 2;
  SimOptions options;
  options.build_trace = true;
  const SimResult r =
      simulate(compile(lower(interleaved_1f1b_order(params))), costs, megatron_overlap_nodes_of_4(), options);
  REQUIRE(r.all_to_all.overlapped_pairs > 0);
  const PairsSeen seen = pieces_after_each_forward(r.trace);
  CHECK(seen.pairs > 0);
  CHECK(seen.pieces_after_forward == 0);
  CHECK(r.all_to_all.hidden_s > 0);
  CHECK(r.all_to_all.hidden_s < r.all_to_all.total_s);
}

TEST_CASE("a link-bound Megatron pair takes both passes' all-to-all one after the other") {
  CostModel costs = derive_costs(resolve_model("mixtral-8x7b"), device_preset("h100"), megatron_overlap_nodes_of_4(),
                                 megatron_overlap_layout());
  // Compute next to nothing: every step is its two passes' all-to-all on one stream.
  for (StageCost& c : costs.stages) {
    c.f_s = c.all_to_all.forward_s() + 1e-6;
    c.b_s = c.all_to_all.backward_s() + 2e-6;
    c.w_s = 0;
    c.full_backward_s = 0;
  }
  costs.overlap_moe_all_to_all = true;
  ScheduleParams params;
  params.num_ranks = 4;
  params.num_micro_batches = 16;
  params.chunks = 2;
  const SimResult r = simulate(compile(lower(interleaved_1f1b_order(params))), costs, megatron_overlap_nodes_of_4());
  REQUIRE(r.all_to_all.overlapped_pairs > 0);
  // Nothing to hide the link behind: at most the few microseconds of compute are saved a pair.
  CHECK(r.all_to_all.hidden_s <= 3e-6 * r.all_to_all.overlapped_pairs + 1e-9);
}

TEST_CASE("the overlap's extra warm-up forward holds one more micro-batch's activations on every rank") {
  // p = 4, v = 2, m = 8 (G = 4): ranks warm up with 10, 8, 6, 4 forwards, 11, 9, 7, 5 with the
  // overlap; each forward keeps 2 bytes until its backward, so the peaks (warm-up + 1 in flight
  // before the first backward frees) go from 22, 18, 14, 10 to 24, 20, 16, 12.
  ScheduleParams params;
  params.num_ranks = 4;
  params.num_micro_batches = 8;
  params.chunks = 2;
  const CostModel costs = CostModel::uniform(1, 1, 1, 0, 2, -1, -1);
  const SimResult plain = simulate(compile(lower(interleaved_1f1b_order(params))), costs, Topology{});
  params.overlap_moe_expert_parallel_comm = true;
  const SimResult warmed = simulate(compile(lower(interleaved_1f1b_order(params))), costs, Topology{});
  const std::vector<std::int64_t> plain_peaks{22, 18, 14, 10};
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(plain.summary.ranks[r].peak_memory_bytes == plain_peaks[r]);
    CHECK(warmed.summary.ranks[r].peak_memory_bytes == plain_peaks[r] + 2);
  }
}
