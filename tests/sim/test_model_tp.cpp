// Tensor and sequence parallelism and recomputation in the first-principles costs, on GPT-3
// 175B (s = 2048, h = 12288, a = 96, b = 1, so sbh = 25,165,824) split over T = 8 GPUs:
// - activations per layer, Korthikanti et al. 2022 Table 2: sbh(10 + 24/t + 5as/(ht)) = 23 sbh
//   = 578,813,952 bytes without recomputation; sbh/t (34 + 5as/h) = 14.25 sbh with sequence
//   parallelism; selective 13 sbh and 34/8 sbh; full 2 sbh and 2 sbh/8;
// - at a constant efficiency T = 2 halves a layer's times exactly; priced by shape it halves them
//   less well, and a small model (gpt-1.3b at T = 8) loses more than a large one;
// - the collectives: two all-reduces of 2 sbh bytes per pass over 8 GPUs on NVLink (450 GB/s,
//   2 us): 2 x 14 x (2 us + 50,331,648 / 8 / 450e9 s) = 447.4 us, the same bytes with sequence
//   parallelism; on the collectives lane of the trace, ending with each pass;
// - a stage sends 2 sbh bytes, 2 sbh / 8 with sequence parallelism; a layer's parameters on a
//   rank are 12h^2/8 + 7h/8 (the split biases) + 6h (norms and row-parallel biases).
#include <catch2/catch.hpp>

#include <algorithm>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/sim/layer_costs.hpp"
#include "pipescope/sim/model.hpp"
#include "pipescope/sim/simulator.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

ParallelConfig tensor_parallel(int t, bool sequence_parallel = false, Recomputation recomputation = Recomputation::none) {
  ParallelConfig p;
  p.pipeline = 4;
  p.tensor_parallel = t;
  p.sequence_parallel = sequence_parallel;
  p.recomputation = recomputation;
  return p;
}

const LinkSpec kNvlink{450e9, 2e-6};

}  // namespace

TEST_CASE("activations per layer follow Korthikanti et al. 2022, Table 2") {
  const ModelSpec gpt3 = resolve_model("gpt3-175b");
  const double s = 2048, b = 1, h = 12288, a = 96, t = 8, sbh = s * b * h;
  auto held = [&](Recomputation r, bool sp) { return layer_memory(gpt3, tensor_parallel(8, sp, r)).held_bytes; };
  CHECK(held(Recomputation::none, false) == static_cast<std::int64_t>(sbh * (10 + 24 / t + 5 * a * s / (h * t))));
  CHECK(held(Recomputation::none, false) == 578'813'952);
  CHECK(held(Recomputation::none, true) == static_cast<std::int64_t>(sbh / t * (34 + 5 * a * s / h)));
  CHECK(held(Recomputation::selective, false) == static_cast<std::int64_t>(sbh * (10 + 24 / t)));
  CHECK(held(Recomputation::selective, true) == static_cast<std::int64_t>(sbh * 34 / t));
  CHECK(held(Recomputation::full, false) == static_cast<std::int64_t>(2 * sbh));
  CHECK(held(Recomputation::full, true) == static_cast<std::int64_t>(2 * sbh / t));
  // What recomputation rebuilds, one layer at a time: the attention core, or the whole layer.
  CHECK(layer_memory(gpt3, tensor_parallel(8, false, Recomputation::selective)).rebuilt_bytes ==
        static_cast<std::int64_t>(5 * a * s * s * b / t));
  CHECK(layer_memory(gpt3, tensor_parallel(8, false, Recomputation::full)).rebuilt_bytes == 578'813'952);
  CHECK(layer_memory(gpt3, tensor_parallel(8)).rebuilt_bytes == 0);
  // At T = 1, the Zero Bubble paper's sb(34h + 5as).
  CHECK(layer_memory(gpt3, tensor_parallel(1)).held_bytes == layer_figures(gpt3, 1).activation_bytes);

  // Grouped-query attention and SwiGLU (llama-3-70b: kv width 1024, FFN 28672, no dropout):
  // K and V take 2 sb kv each, the MLP 6 sbf, the attention core without FlashAttention only its
  // softmax output, with it the fp32 log-sum-exp (4 asb), which selective recomputation keeps.
  ModelSpec llama = resolve_model("llama-3-70b");
  REQUIRE(llama.flash_attention);
  const double ls = 8192, lh = 8192, kv = 1024, f = 28672, la = 64;
  const double llama_split = 4 * ls * lh + 4 * ls * kv + 6 * ls * f;
  CHECK(layer_memory(llama, tensor_parallel(8)).held_bytes ==
        static_cast<std::int64_t>(8 * ls * lh + (llama_split + 4 * la * ls) / 8));
  CHECK(layer_memory(llama, tensor_parallel(8, false, Recomputation::selective)).held_bytes ==
        layer_memory(llama, tensor_parallel(8)).held_bytes);
  llama.flash_attention = false;
  CHECK(layer_memory(llama, tensor_parallel(8)).held_bytes ==
        static_cast<std::int64_t>(8 * ls * lh + (llama_split + 2 * la * ls * ls) / 8));
  CHECK(layer_memory(llama, tensor_parallel(8, false, Recomputation::selective)).held_bytes ==
        static_cast<std::int64_t>(8 * ls * lh + llama_split / 8));
}

TEST_CASE("tensor parallelism divides a layer's work: exactly at a constant efficiency, less well by shape") {
  const ModelSpec gpt3 = resolve_model("gpt3-175b");
  DeviceSpec constant = device_preset("a100");
  constant.efficiency = 0.5;
  const LayerTimes one = layer_times(gpt3, constant, kNvlink, tensor_parallel(1));
  const LayerTimes two = layer_times(gpt3, constant, kNvlink, tensor_parallel(2));
  CHECK(one.f_s == Approx(layer_figures(gpt3, 1).f_flops / (312e12 * 0.5)));
  CHECK(two.f_s == Approx(one.f_s / 2));
  CHECK(two.b_s == Approx(one.b_s / 2));
  CHECK(two.w_s == Approx(one.w_s / 2));

  const DeviceSpec a100 = device_preset("a100");
  auto forward_ratio = [&](const ModelSpec& model, int t) {
    return layer_times(model, a100, kNvlink, tensor_parallel(t)).f_s / layer_times(model, a100, kNvlink, tensor_parallel(1)).f_s;
  };
  const double gpt3_by_2 = forward_ratio(gpt3, 2);
  CHECK(gpt3_by_2 > 0.5);
  CHECK(gpt3_by_2 < 0.55);
  const double weights_by_2 = layer_times(gpt3, a100, kNvlink, tensor_parallel(2)).w_s /
                              layer_times(gpt3, a100, kNvlink, tensor_parallel(1)).w_s;
  CHECK(weights_by_2 >= 0.5);
  CHECK(weights_by_2 < 0.52);
  // Thin products of a small model lose more of the split than a large model's.
  const double small_by_8 = forward_ratio(resolve_model("gpt-1.3b"), 8);
  CHECK(small_by_8 > forward_ratio(gpt3, 8));
  CHECK(small_by_8 > 1.0 / 8);
  // Sequence parallelism also splits the layer norms and residual adds.
  CHECK(layer_times(gpt3, a100, kNvlink, tensor_parallel(8, true)).f_s < layer_times(gpt3, a100, kNvlink, tensor_parallel(8)).f_s);
}

TEST_CASE("tensor-parallel collectives: two all-reduces of the hidden state per pass, on the node's link") {
  const ModelSpec gpt3 = resolve_model("gpt3-175b");
  const DeviceSpec a100 = device_preset("a100");
  const double hidden_state_bytes = 2.0 * 2048 * 12288;
  const double expected = 2 * 14 * (2e-6 + hidden_state_bytes / 8 / 450e9);
  const LayerTimes plain = layer_times(gpt3, a100, kNvlink, tensor_parallel(8));
  CHECK(plain.tp_f_s == Approx(expected));
  CHECK(plain.tp_f_s == Approx(2 * ring_all_reduce_s(static_cast<std::int64_t>(hidden_state_bytes), 8, kNvlink)));
  CHECK(plain.tp_b_s == Approx(expected));
  const LayerTimes sequence = layer_times(gpt3, a100, kNvlink, tensor_parallel(8, true));
  CHECK(sequence.tp_f_s == Approx(expected));  // all-gather + reduce-scatter = all-reduce
  CHECK(layer_times(gpt3, a100, kNvlink, tensor_parallel(1)).tp_f_s == 0.0);

  // In the stage's passes, not overlapped; full recomputation runs the forward's again.
  Topology topology;
  topology.intra_node = kNvlink;
  const CostModel costs = derive_costs(gpt3, a100, topology, tensor_parallel(8));
  const StageCost& middle = costs.stages[1];  // 24 layers
  CHECK(middle.tensor_parallel_f_s == Approx(24 * expected));
  CHECK(middle.f_s == Approx(24 * (plain.f_s + plain.tp_f_s)));
  CHECK(middle.b_s == Approx(24 * (plain.b_s + plain.tp_b_s)));
  CHECK(middle.w_s == Approx(24 * plain.w_s));
  const CostModel recomputed = derive_costs(gpt3, a100, topology, tensor_parallel(8, false, Recomputation::full));
  CHECK(recomputed.stages[1].tensor_parallel_b_s == Approx(2 * 24 * expected));
  CHECK(recomputed.stages[1].b_s == Approx(24 * (plain.b_s + plain.f_s + 2 * expected)));
  const CostModel selective = derive_costs(gpt3, a100, topology, tensor_parallel(8, false, Recomputation::selective));
  CHECK(selective.stages[1].b_s > middle.b_s);
  CHECK(selective.stages[1].b_s < recomputed.stages[1].b_s);
}

TEST_CASE("stage transfers, parameters and the data-parallel ring under tensor parallelism") {
  const ModelSpec gpt3 = resolve_model("gpt3-175b");
  const DeviceSpec a100 = device_preset("a100");
  const double h = 12288;
  const CostModel plain = derive_costs(gpt3, a100, Topology{}, tensor_parallel(8));
  const CostModel sequence = derive_costs(gpt3, a100, Topology{}, tensor_parallel(8, true));
  CHECK(plain.stages[1].activation_bytes == 2LL * 2048 * 12288);
  CHECK(sequence.stages[1].activation_bytes == 2LL * 2048 * 12288 / 8);

  const std::int64_t on_rank = layer_parameters_on_rank(gpt3, 8);
  CHECK(on_rank == static_cast<std::int64_t>(12 * h * h / 8 + 7 * h / 8 + 6 * h));
  CHECK(layer_parameters_on_rank(gpt3, 1) == gpt3.layer_parameters());
  CHECK(plain.stages[1].static_bytes == 24 * on_rank * 20);
  // The vocabulary-parallel embedding and the fp32 logits are split too.
  const std::int64_t embedding_on_rank = 50257LL * 12288 / 8;
  CHECK(plain.stages[0].static_bytes == (24 * on_rank + embedding_on_rank) * 20);
  CHECK(plain.stages[3].f_mem_bytes ==
        24 * layer_memory(gpt3, tensor_parallel(8)).held_bytes + static_cast<std::int64_t>(4.0 * 2048 * 50257 / 8));

  // 8 x 2 GPUs per stage do not fit a node of 8: the gradient ring crosses nodes.
  ParallelConfig replicated = tensor_parallel(8);
  replicated.data_parallel = 2;
  Topology topology;
  const CostModel two_nodes = derive_costs(gpt3, a100, topology, replicated);
  CHECK(two_nodes.stages[1].reduce_grads_s == Approx(ring_all_reduce_s(24 * on_rank * 2, 2, topology.inter_node)));
  CHECK(with_parallel_layout(topology, replicated).pipeline_rank_stride == 16);
  ParallelConfig small = tensor_parallel(4);
  small.data_parallel = 2;
  CHECK(derive_costs(gpt3, a100, topology, small).stages[1].reduce_grads_s ==
        Approx(ring_all_reduce_s(24 * layer_parameters_on_rank(gpt3, 4) * 2, 2, topology.intra_node)));
}

TEST_CASE("tensor parallelism that cannot run is refused with its reason") {
  const ModelSpec llama = resolve_model("llama-3-70b");  // 64 heads, 8 kv heads, FFN 28672
  CHECK_FALSE(tensor_parallel_problem(llama, tensor_parallel(8), 8));
  CHECK(tensor_parallel_problem(llama, tensor_parallel(16), 8).value_or("") ==
        "--tensor-parallel 16: more than the 8 GPUs of a node (tensor parallelism stays on one node's links)");
  CHECK(tensor_parallel_problem(llama, tensor_parallel(3), 8).value_or("") ==
        "--tensor-parallel 3: does not divide the 64 attention heads of llama-3-70b");
  CHECK_THAT(tensor_parallel_problem(llama, tensor_parallel(16), 16).value_or(""), Catch::Contains("8 key/value heads"));
  ModelSpec odd_ffn = llama;
  odd_ffn.ffn_hidden = 28670;
  CHECK_THAT(tensor_parallel_problem(odd_ffn, tensor_parallel(4), 8).value_or(""), Catch::Contains("28670 FFN columns"));
  CHECK_THAT(tensor_parallel_problem(llama, tensor_parallel(1, true), 8).value_or(""), Catch::Contains("--sequence-parallel"));
  CHECK_THROWS_WITH(derive_costs(llama, device_preset("h100"), Topology{}, tensor_parallel(3)),
                    Catch::Contains("64 attention heads"));
}

TEST_CASE("a fused backward hides its tensor-parallel input-gradient collectives behind the weight gradients") {
  const ModelSpec gpt3 = resolve_model("gpt3-175b");
  const DeviceSpec a100 = device_preset("a100");
  const LinkSpec nvlink = Topology{}.intra_node;
  ParallelConfig parallel = tensor_parallel(8);
  const LayerTimes layer = layer_times(gpt3, a100, nvlink, parallel);
  // QKV's and the MLP's first matrix's: each at most its collective and its weight gradient.
  CHECK(layer.tp_b_hidden_s > 0);
  CHECK(layer.tp_b_hidden_s <= layer.tp_b_s);
  CHECK(layer.tp_b_hidden_s <= layer.w_s);
  const StageCost fused = derive_costs(gpt3, a100, Topology{}, parallel).stages[1];
  CHECK(fused.full_backward_s == Approx(fused.b_s + fused.w_s - 24 * layer.tp_b_hidden_s));
  CHECK(fused.tensor_parallel_b_s == Approx(24 * layer.tp_b_s));  // a split B still waits for them
  // Megatron before 2022 (--no-async-tensor-model-parallel-allreduce), and T = 1: nothing hidden.
  parallel.async_tensor_parallel_backward = false;
  CHECK(layer_times(gpt3, a100, nvlink, parallel).tp_b_hidden_s == 0.0);
  CHECK(derive_costs(gpt3, a100, Topology{}, parallel).stages[1].full_backward_s == 0.0);
  CHECK(layer_times(gpt3, a100, nvlink, tensor_parallel(1)).tp_b_hidden_s == 0.0);
}

TEST_CASE("the predicted trace shows the tensor-parallel collectives on the collectives lane") {
  const ModelSpec gpt3 = resolve_model("gpt3-175b");
  const ParallelConfig parallel = tensor_parallel(8, true);
  const CostModel costs = derive_costs(gpt3, device_preset("a100"), Topology{}, parallel);
  ScheduleParams params;
  params.num_ranks = 4;
  params.num_micro_batches = 4;
  const SimResult result = simulate(make_schedule("1f1b", params), costs, with_parallel_layout(Topology{}, parallel));
  int forwards = 0, backwards = 0;
  for (const auto& e : result.trace.events) {
    if (e.name != "TP_F" && e.name != "TP_B") continue;
    CHECK(e.lane == static_cast<int>(traces::Lane::Collective));
    const bool forward = e.name == "TP_F";
    (forward ? forwards : backwards)++;
    const StageCost& stage = costs.stages[static_cast<std::size_t>(e.stage)];
    CHECK(e.dur_us == Approx(1e6 * (forward ? stage.tensor_parallel_f_s : stage.tensor_parallel_b_s)));
    // It ends where its pass's own part ends.
    const auto pass = std::find_if(result.trace.events.begin(), result.trace.events.end(), [&](const traces::TraceEvent& p) {
      return p.lane == 0 && p.stage == e.stage && p.micro_batch == e.micro_batch && p.name == (forward ? "F" : "B");
    });
    REQUIRE(pass != result.trace.events.end());
    CHECK(e.ts_us + e.dur_us == Approx(pass->ts_us + 1e6 * (forward ? stage.f_s : stage.b_s)));
  }
  CHECK(forwards == 16);
  CHECK(backwards == 16);
  // Part of the passes' time, not extra busy time.
  double compute_s = 0;
  for (const auto& st : costs.stages) compute_s += 4 * (st.f_s + st.backward_pass_s());
  double busy_s = 0;
  for (const auto& r : result.summary.ranks) busy_s += r.busy_s;
  CHECK(busy_s == Approx(compute_s));
}
