// Today's options in the first-principles costs (docs/MODEL.md), on Llama 3 8B (s = 8192, h =
// 4096, 32 heads, 8 kv heads: kv = 1024, f = 14336 SwiGLU, FlashAttention) and GPT-3 175B:
// - context parallelism C = 2: every layer holds the activations of s/C tokens (half, exactly);
//   the attention core does half the FLOPs at the curve's speed for 4096 keys instead of 8192;
//   the ring's step moves the rank's keys and values, 2 x 2 x 4096 x 1024 = 16,777,216 bytes:
//   2 us + 37.28 us on NVLink, hidden behind the forward's blocks; the backward's last transfer
//   (the gradients home) stays: 39.28 us; the all-gather variant exposes one ring step each way;
//   across nodes (50 GB/s) the forward's step outlasts its block;
// - --cp-comm-type a2a (Ulysses): the core is CP 1's with half the heads, the all-to-alls move
//   half of Q, K, V (2 x 4096 x (4096 + 2 x 1024) bytes) and of the output (2 x 4096 x 4096) each
//   way, nothing hidden, at NCCL's all-to-all rate on NVLink; it needs the heads and the key/value
//   heads of a tensor-parallel rank to divide by C, and it runs sliding windows;
// - --cp-comm-type a2a+p2p, C = 8 in groups of A = 2: the core is that of a ring of 4 with twice
//   the heads' divisor; the exchange is the all-to-all of the rank's Q, K, V and output among 2
//   (half sent, at the all-to-all link) plus that ring's exposed transfers (on the ring's link);
//   A = C is a2a exactly; A must divide the heads of a TP rank and C, and windows are refused;
// - gradients over DP x CP: T = 2, C = 2, DP = 4 put 8 members T apart in the gradients' group,
//   pipeline neighbours 16 apart; the distributed optimizer shards over the 8;
// - C = 3 does not split 8192 in 6 chunks: refused naming --context-parallel 3;
// - FP8: the layer keeps (3h + f) x 8192 = 218,103,808 bytes fewer (the products' inputs in one
//   byte); a stage keeps 2 more bytes per linear weight (the FP8 copy and its transpose), none
//   with --fp8-param-gather; the linear products run faster; the A100 is refused;
// - the distributed optimizer reduce-scatters: half the all-reduce's time; with
//   --overlap-param-gather the first chunk waits for one of its n per-layer buckets of the gather
//   G (G / n instead of G; interleaved, less the forwards before the rank's first), later chunks
//   for none while the gathers keep up with the forwards; on a slow network the gathers run one
//   after another and rank 0's second chunk's first forward ends just after the last of them
//   (G0 + G2 + f2 / n less the undelayed 2 f0 + f2); --ddp-bucket-size buckets only stage 0, as
//   Megatron's DDP; with
//   --overlap-param-gather-with-optimizer-step the first chunk's whole gather runs beside the
//   rank's later chunks' optimizer steps;
// - --tp-comm-overlap: each collective c beside its product g leaves max(0, c - g) + c / T, and the
//   attention output's forward product takes 132 / (132 - 24) as long; it needs sequence
//   parallelism, and --overlap-param-gather the distributed optimizer.
#include <catch2/catch.hpp>

#include <cmath>
#include <nlohmann/json.hpp>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/layer_costs.hpp"
#include "pipescope/sim/model.hpp"
#include "ppsim_run.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

const LinkSpec kH100Nvlink{450e9, 2e-6};
const LinkSpec kNdrAdapter{50e9, 5e-6};

ParallelConfig h100_parallel(int tp = 1, int cp = 1) {
  ParallelConfig p;
  p.pipeline = 1;
  p.tensor_parallel = tp;
  p.sequence_parallel = tp > 1;
  p.context_parallel = cp;
  return p;
}

// Llama 3 8B's 32 layers on 2 pipeline ranks of 2 chunks (8 layers a stage), 4 replicas.
// One GPU a node on a slow network (5 GB/s): a chunk's parameter gather far outlasts its forward.
Topology one_gpu_nodes_on_a_slow_network() {
  Topology slow;
  slow.gpus_per_node = 1;
  slow.inter_node = LinkSpec{5e9, 5e-6};
  return slow;
}

// Stage 0 of two_ranks_of_two_chunks on one GPU of tensor parallelism: the embedding and 8 layers.
std::int64_t first_stage_parameters(const ModelSpec& llama) {
  return llama.embedding_parameters() + 8 * layer_parameters_on_rank(llama, 1);
}

ParallelConfig two_ranks_of_two_chunks() {
  ParallelConfig p = h100_parallel(1, 1);
  p.pipeline = 2;
  p.chunks = 2;
  p.data_parallel = 4;
  return p;
}

}  // namespace

TEST_CASE("context parallelism halves a layer's tokens and hides its key/value ring on NVLink") {
  const ModelSpec llama = resolve_model("llama-3-8b");
  const DeviceSpec h100 = device_preset("h100");
  const LayerMemory one = layer_memory(llama, h100_parallel(1, 1));
  const LayerMemory two = layer_memory(llama, h100_parallel(1, 2));
  CHECK(two.held_bytes * 2 == one.held_bytes);
  // Half the FLOPs, each block against 4096 keys: cuDNN's 517 TFLOP/s at 4k against 545 at 8k,
  // and half the blocks (32 heads x 32 blocks of 128 queries: 7.8 waves, one of tail) where CP 1
  // has as many as the curve was measured with.
  const double core_one = attention_core_forward_s(llama, h100, h100_parallel(1, 1));
  const double core_two = attention_core_forward_s(llama, h100, h100_parallel(1, 2));
  const double waves = 1024.0 / 132;
  const double reference = 2048.0 / 132;
  CHECK(core_two == Approx(core_one / 2 * 545.0 / 517.0 * (waves + 1) / waves * reference / (reference + 1)));
  const double step_s = 2e-6 + 16'777'216 / 450e9;
  const ContextParallelExchange ring = context_parallel_exchange(llama, h100, kH100Nvlink, h100_parallel(1, 2));
  CHECK(ring.forward_s == 0.0);
  CHECK(ring.backward_s == Approx(step_s));
  ParallelConfig gather = h100_parallel(1, 2);
  gather.context_parallel_comm = ContextParallelComm::all_gather;
  const ContextParallelExchange gathered = context_parallel_exchange(llama, h100, kH100Nvlink, gather);
  CHECK(gathered.forward_s == Approx(step_s));
  CHECK(gathered.backward_s == Approx(step_s));
  // Eight ranks on the network: each step's transfer outlasts its attention block.
  ParallelConfig wide = h100_parallel(1, 8);
  CHECK(context_parallel_exchange(llama, h100, kNdrAdapter, wide).forward_s > 0.0);
  CHECK(context_parallel_exchange(llama, h100, kH100Nvlink, h100_parallel(1, 1)).backward_s == 0.0);
}

TEST_CASE("--cp-comm-type a2a gives each rank the whole sequence of a C-th of the heads") {
  const ModelSpec llama = resolve_model("llama-3-8b");
  const DeviceSpec h100 = device_preset("h100");
  ParallelConfig ulysses = h100_parallel(1, 2);
  ulysses.context_parallel_comm = ContextParallelComm::a2a;
  // The core: what one GPU without context parallelism spends on 16 of its 32 heads.
  CHECK(attention_core_forward_s(llama, h100, ulysses) ==
        Approx(attention_core_forward_s(llama, h100, h100_parallel(2, 1))));
  CHECK(attention_core_backward_s(llama, h100, ulysses) ==
        Approx(attention_core_backward_s(llama, h100, h100_parallel(2, 1))));
  // Q, K and V of the rank's 4096 tokens, half of them sent; then the output's half.
  const double qkv_s = 2e-6 + 0.5 * 2.0 * 4096 * (4096 + 2 * 1024) / 450e9;
  const double output_s = 2e-6 + 0.5 * 2.0 * 4096 * 4096 / 450e9;
  const ContextParallelExchange exchange = context_parallel_exchange(llama, h100, kH100Nvlink, ulysses);
  CHECK(exchange.forward_s == Approx(qkv_s + output_s));
  CHECK(exchange.backward_s == Approx(qkv_s + output_s));
  // In a run the link is NVLink at what NCCL's all-to-all achieves there (370 of 450 GB/s).
  ParallelConfig run = ulysses;
  run.data_parallel = 4;
  const CostModel costs = derive_costs(llama, h100, Topology{}, run);
  ParallelConfig ring = run;
  ring.context_parallel_comm = ContextParallelComm::p2p;
  CHECK(costs.stage(0).f_s > derive_costs(llama, h100, Topology{}, ring).stage(0).f_s);
  // The heads and the key/value heads of a tensor-parallel rank must divide by C: 8 kv heads over
  // T = 4 leave 2, which C = 4 cannot split.
  ParallelConfig too_wide = h100_parallel(4, 4);
  too_wide.context_parallel_comm = ContextParallelComm::a2a;
  const auto problem = context_parallel_problem(llama, too_wide);
  REQUIRE(problem);
  CHECK(*problem ==
        "--context-parallel 4 with --cp-comm-type a2a: does not divide the 2 key/value heads of llama-3-8b on a "
        "tensor-parallel rank (each CP rank attends with a C-th of them)");
  // It runs a sliding window, which the ring refuses.
  const ModelSpec gpt_oss = resolve_model("gpt-oss-20b");
  ParallelConfig windowed = ulysses;
  CHECK_FALSE(context_parallel_problem(gpt_oss, windowed));
  windowed.context_parallel_comm = ContextParallelComm::p2p;
  CHECK(context_parallel_problem(gpt_oss, windowed));
}

TEST_CASE("--cp-comm-type a2a+p2p: all-to-alls inside groups of A, then a ring over C / A") {
  const ModelSpec llama = resolve_model("llama-3-8b");
  const DeviceSpec h100 = device_preset("h100");
  ParallelConfig hierarchical = h100_parallel(1, 8);
  hierarchical.context_parallel_comm = ContextParallelComm::a2a_p2p;
  hierarchical.context_parallel_a2a = 2;
  CHECK(hierarchical.context_parallel_all_to_all() == 2);
  CHECK(hierarchical.context_parallel_ring() == 4);
  // The core: a ring of 4 over 16 of the 32 heads.
  const ParallelConfig ring = h100_parallel(2, 4);
  CHECK(attention_core_forward_s(llama, h100, hierarchical) == Approx(attention_core_forward_s(llama, h100, ring)));
  CHECK(attention_core_backward_s(llama, h100, hierarchical) == Approx(attention_core_backward_s(llama, h100, ring)));
  // The rank's 1024 tokens of Q, K, V, half sent to the other member of its group, then the
  // output's half, on the all-to-all's link; the ring's exposed transfers on the network.
  const double qkv_s = 2e-6 + 0.5 * 2.0 * 1024 * (4096 + 2 * 1024) / 450e9;
  const double output_s = 2e-6 + 0.5 * 2.0 * 1024 * 4096 / 450e9;
  const ContextParallelExchange ring_alone = context_parallel_exchange(llama, h100, kNdrAdapter, ring);
  REQUIRE(ring_alone.forward_s > 0.0);
  const ContextParallelExchange exchange =
      context_parallel_exchange(llama, h100, ContextParallelLinks{kNdrAdapter, kH100Nvlink}, hierarchical);
  CHECK(exchange.forward_s == Approx(qkv_s + output_s + ring_alone.forward_s));
  CHECK(exchange.backward_s == Approx(qkv_s + output_s + ring_alone.backward_s));
  // A = C is a2a.
  ParallelConfig whole = h100_parallel(1, 2);
  whole.context_parallel_comm = ContextParallelComm::a2a_p2p;
  whole.context_parallel_a2a = 2;
  ParallelConfig ulysses = h100_parallel(1, 2);
  ulysses.context_parallel_comm = ContextParallelComm::a2a;
  CHECK(context_parallel_exchange(llama, h100, kH100Nvlink, whole).forward_s ==
        context_parallel_exchange(llama, h100, kH100Nvlink, ulysses).forward_s);
  CHECK(attention_core_forward_s(llama, h100, whole) == attention_core_forward_s(llama, h100, ulysses));
  // What it needs: A dividing C and a TP rank's key/value heads; no window.
  ParallelConfig uneven = hierarchical;
  uneven.context_parallel_a2a = 3;
  REQUIRE(context_parallel_problem(llama, uneven));
  CHECK(context_parallel_problem(llama, uneven)->find("no all-to-all group size A given or fitting") !=
        std::string::npos);
  ParallelConfig too_wide = hierarchical;
  too_wide.tensor_parallel = 8;  // one key/value head a TP rank
  REQUIRE(context_parallel_problem(llama, too_wide));
  CHECK(*context_parallel_problem(llama, too_wide) ==
        "--context-parallel 8 with --cp-comm-type a2a+p2p: does not divide the 1 key/value heads of llama-3-8b on "
        "a tensor-parallel rank (each rank of an all-to-all group of 2 attends with 1/2 of them)");
  const ModelSpec gpt_oss = resolve_model("gpt-oss-20b");
  ParallelConfig windowed = h100_parallel(1, 4);
  windowed.context_parallel_comm = ContextParallelComm::a2a_p2p;
  windowed.context_parallel_a2a = 2;
  CHECK(context_parallel_problem(gpt_oss, windowed));
}

TEST_CASE("gradients are reduced over data x context parallelism, and C must split the sequence") {
  ParallelConfig p = h100_parallel(2, 2);
  p.data_parallel = 4;
  p.pipeline = 2;
  const Topology topology = with_parallel_layout(Topology{}, p);
  CHECK(topology.data_parallel == 8);
  CHECK(topology.data_parallel_stride == 2);
  CHECK(topology.pipeline_rank_stride == 16);
  CHECK(p.gpus() == 32);
  const ModelSpec llama = resolve_model("llama-3-8b");
  CHECK(context_parallel_problem(llama, h100_parallel(1, 4)) == std::nullopt);
  const auto problem = context_parallel_problem(llama, h100_parallel(1, 3));
  REQUIRE(problem);
  CHECK_THAT(*problem, Catch::Contains("--context-parallel 3") && Catch::Contains("8192"));
  // The distributed optimizer shards its 16 bytes a parameter over the 8.
  p.zero1 = true;
  ParallelConfig unsharded = p;
  unsharded.zero1 = false;
  Topology node;
  node.gpus_per_node = 8;
  const DeviceSpec h100 = device_preset("h100");
  const CostModel sharded = derive_costs(llama, h100, node, p);
  const CostModel whole = derive_costs(llama, h100, node, unsharded);
  const double parameters =
      (static_cast<double>(whole.stages[0].static_bytes) - sharded.stages[0].static_bytes) / (16.0 - 2.0);
  CHECK(parameters == Approx(static_cast<double>(whole.stages[0].static_bytes) / 20.0));
}

TEST_CASE("FP8 keeps the products' inputs in one byte, copies the weights, and needs FP8 tensor cores") {
  const ModelSpec llama = resolve_model("llama-3-8b");
  ParallelConfig fp8 = h100_parallel();
  fp8.fp8 = Fp8Format::hybrid;
  CHECK(layer_memory(llama, h100_parallel()).held_bytes - layer_memory(llama, fp8).held_bytes == 218'103'808);
  const DeviceSpec h100 = device_preset("h100");
  CHECK(layer_times(llama, h100, kH100Nvlink, fp8).f_s < layer_times(llama, h100, kH100Nvlink, h100_parallel()).f_s);
  Topology node;
  const std::int64_t bf16_static = derive_costs(llama, h100, node, h100_parallel()).stages[0].static_bytes;
  const std::int64_t fp8_static = derive_costs(llama, h100, node, fp8).stages[0].static_bytes;
  CHECK(fp8_static - bf16_static == 2 * 32 * llama.layer_matrix_parameters());
  fp8.fp8_param_gather = true;
  CHECK(derive_costs(llama, h100, node, fp8).stages[0].static_bytes == bf16_static);
  CHECK_THROWS_WITH(derive_costs(llama, device_preset("a100"), node, fp8),
                    Catch::Contains("--fp8-format hybrid: the a100"));
}

TEST_CASE("the distributed optimizer reduce-scatters, and gathers the parameters beside the next forward") {
  const ModelSpec llama = resolve_model("llama-3-8b");
  const DeviceSpec h100 = device_preset("h100");
  Topology node;
  ParallelConfig p = two_ranks_of_two_chunks();
  const CostModel all_reduce = derive_costs(llama, h100, node, p);
  p.zero1 = true;
  const CostModel sharded = derive_costs(llama, h100, node, p);
  for (std::size_t st = 0; st < sharded.stages.size(); ++st)
    CHECK(sharded.stages[st].reduce_grads_s == Approx(all_reduce.stages[st].reduce_grads_s / 2));
  p.overlap_param_gather = true;
  const CostModel overlapped = derive_costs(llama, h100, node, p);
  // Stage 1 is the first chunk of rank 1 (a middle stage) with n per-layer buckets of its gather
  // G. Interleaved, every rank's gather starts at the step's start, and rank 1's first forward
  // comes after rank 0's: it waits for what of its first bucket, G / n, outlasts that forward.
  // Stage 2 is rank 0's second chunk: it waits for none.
  const Topology ring = with_parallel_layout(node, p);
  const int n = stage_layers(llama, p)[1];
  const double gather_s = data_parallel_all_gather_s(n * layer_parameters_on_rank(llama, 1) * 2, ring);
  const double waited_s = std::max(0.0, gather_s / n - overlapped.stages[0].f_s);
  CHECK(sharded.stages[1].optimizer_s - overlapped.stages[1].optimizer_s == Approx(gather_s - waited_s));
  CHECK(sharded.stages[2].optimizer_s - overlapped.stages[2].optimizer_s == Approx(gather_s));
  // Without interleaving each rank launches its gather at its own first forward: G / n waited
  // (stage 1 of 4, a middle stage).
  ParallelConfig plain = p;
  plain.pipeline = 4;
  plain.chunks = 1;
  plain.overlap_param_gather = false;
  const CostModel plain_sharded = derive_costs(llama, h100, node, plain);
  plain.overlap_param_gather = true;
  const int layers = stage_layers(llama, plain)[1];
  const double plain_gather_s = data_parallel_all_gather_s(layers * layer_parameters_on_rank(llama, 1) * 2, ring);
  CHECK(plain_sharded.stages[1].optimizer_s - derive_costs(llama, h100, node, plain).stages[1].optimizer_s ==
        Approx(plain_gather_s * (layers - 1) / layers));
  ParallelConfig without_optimizer = p;
  without_optimizer.zero1 = false;
  CHECK_THROWS_WITH(derive_costs(llama, h100, node, without_optimizer), Catch::Contains("--use-distributed-optimizer"));
}

TEST_CASE("a later chunk waits where the parameter gathers before it outlast its rank's forwards") {
  const ModelSpec llama = resolve_model("llama-3-8b");
  const DeviceSpec h100 = device_preset("h100");
  const Topology slow = one_gpu_nodes_on_a_slow_network();
  ParallelConfig p = two_ranks_of_two_chunks();
  p.zero1 = true;
  const CostModel after_step = derive_costs(llama, h100, slow, p);
  p.overlap_param_gather = true;
  const CostModel overlapped = derive_costs(llama, h100, slow, p);
  // Rank 0: stage 0 (the embedding and 8 layers, 8 buckets) then stage 2 (8 layers, 8 buckets),
  // both launched at the step's start on one stream: G0, then G2. The first chunk's forward ends
  // no sooner than G0 and its last bucket's share; the second chunk's first forward, due after
  // two of the first's, no sooner than G0 + G2 and its last share: in all rank 0 waits
  // G0 + G2 + f2 / 8 - (2 f0 + f2), charged to its first chunk's step.
  const Topology ring = with_parallel_layout(slow, p);
  const double first_gather_s = data_parallel_all_gather_s(first_stage_parameters(llama) * 2, ring);
  const double second_gather_s = after_step.stages[2].optimizer_s - overlapped.stages[2].optimizer_s;
  const double f0 = overlapped.stages[0].f_s;
  const double f2 = overlapped.stages[2].f_s;
  REQUIRE(first_gather_s > 2 * f0);
  const double step_s = after_step.stages[0].optimizer_s - first_gather_s;
  CHECK(overlapped.stages[0].optimizer_s == Approx(step_s + first_gather_s + second_gather_s + f2 / 8 - (2 * f0 + f2)));
  // On the node's NVLink the gathers keep up: the first chunk waits for its first bucket alone.
  const CostModel fast = derive_costs(llama, h100, Topology{}, p);
  ParallelConfig whole = p;
  whole.overlap_param_gather = false;
  const CostModel fast_whole = derive_costs(llama, h100, Topology{}, whole);
  const double fast_gather_s = fast_whole.stages[2].optimizer_s - fast.stages[2].optimizer_s;
  CHECK(fast_whole.stages[0].optimizer_s - fast.stages[0].optimizer_s ==
        Approx(data_parallel_all_gather_s(first_stage_parameters(llama) * 2, with_parallel_layout(Topology{}, p)) * 7 /
               8));
  CHECK(fast_gather_s > 0);
}

TEST_CASE("Megatron's DDP buckets only the first pipeline rank's first chunk") {
  const ModelSpec llama = resolve_model("llama-3-8b");
  const DeviceSpec h100 = device_preset("h100");
  ParallelConfig p = two_ranks_of_two_chunks();
  p.zero1 = true;
  p.overlap_grad_reduce = true;
  // Without --ddp-bucket-size: one bucket per layer on every stage (8 layers each).
  for (const StageCost& stage : derive_costs(llama, h100, Topology{}, p).stages) CHECK(stage.reduce_grads_buckets == 8);
  // 100 M parameters a bucket: stage 0 holds the embedding (525 M) and 8 layers of 218 M, so 23
  // buckets; every other stage is one bucket, reduced after its last backward.
  p.bucket_parameters = 100'000'000;
  const CostModel bucketed = derive_costs(llama, h100, Topology{}, p);
  const std::int64_t stage0 = first_stage_parameters(llama);
  CHECK(bucketed.stages[0].reduce_grads_buckets == (stage0 + 99'999'999) / 100'000'000);
  for (std::size_t st = 1; st < bucketed.stages.size(); ++st) CHECK(bucketed.stages[st].reduce_grads_buckets == 1);
  // With --overlap-param-gather-with-optimizer-step Megatron buckets no chunk.
  p.overlap_param_gather = true;
  p.overlap_param_gather_with_optimizer_step = true;
  for (const StageCost& stage : derive_costs(llama, h100, Topology{}, p).stages) CHECK(stage.reduce_grads_buckets == 1);
}

TEST_CASE("--overlap-param-gather-with-optimizer-step hides the first chunk's gather behind the other chunks' steps") {
  const ModelSpec llama = resolve_model("llama-3-8b");
  const DeviceSpec h100 = device_preset("h100");
  const Topology slow = one_gpu_nodes_on_a_slow_network();
  ParallelConfig p = two_ranks_of_two_chunks();
  p.zero1 = true;
  const CostModel after_step = derive_costs(llama, h100, slow, p);
  p.overlap_param_gather = true;
  p.overlap_param_gather_with_optimizer_step = true;
  const CostModel with_step = derive_costs(llama, h100, slow, p);
  // Rank 1's first chunk (stage 1): its whole gather G (one bucket) starts after its optimizer
  // step, beside its second chunk's (stage 3, which waits for no gather), and rank 1's first
  // forward comes after rank 0's (stage 0's forward): it waits for G less both.
  // Its second chunk's gather G3 (8 per-layer buckets), launched at the step's start, follows on
  // the same stream: that chunk's first forward, due after two of the first chunk's, ends no
  // sooner than G3's last bucket and the layer it brings.
  const Topology ring = with_parallel_layout(slow, p);
  const int n = stage_layers(llama, p)[1];
  const double gather_s = data_parallel_all_gather_s(n * layer_parameters_on_rank(llama, 1) * 2, ring);
  const double step_s = after_step.stages[1].optimizer_s - gather_s;
  const double second_gather_s = after_step.stages[3].optimizer_s - with_step.stages[3].optimizer_s;
  const double first_wait_s = gather_s - with_step.stages[3].optimizer_s - with_step.stages[0].f_s;
  const double second_wait_s =
      second_gather_s + with_step.stages[3].f_s / 8 - with_step.stages[3].f_s - 2 * with_step.stages[1].f_s;
  REQUIRE(first_wait_s > 0);
  REQUIRE(second_wait_s > 0);
  CHECK(with_step.stages[1].optimizer_s == Approx(step_s + first_wait_s + second_wait_s));
  // A later chunk waits for no gather, with or without the option.
  ParallelConfig overlapped = p;
  overlapped.overlap_param_gather_with_optimizer_step = false;
  CHECK(with_step.stages[3].optimizer_s == Approx(derive_costs(llama, h100, slow, overlapped).stages[3].optimizer_s));
  CHECK(with_step.stages[3].optimizer_s < after_step.stages[3].optimizer_s);
  // Megatron's checks: it needs --overlap-param-gather, and a virtual pipeline.
  ParallelConfig alone = p;
  alone.overlap_param_gather = false;
  CHECK_THROWS_WITH(derive_costs(llama, h100, slow, alone), Catch::Contains("needs --overlap-param-gather"));
  ParallelConfig one_chunk = p;
  one_chunk.chunks = 1;
  CHECK_THROWS_WITH(derive_costs(llama, h100, slow, one_chunk), Catch::Contains("needs interleaving (--chunks 2"));
}

TEST_CASE("the more nodes a run spans, the slower its compute: the slowest node's pace") {
  const ModelSpec llama = resolve_model("llama-3-8b");
  const DeviceSpec h100 = device_preset("h100");
  ParallelConfig one_node = h100_parallel(1, 1);
  one_node.data_parallel = 8;
  ParallelConfig many = one_node;
  many.data_parallel = 2048;  // 256 nodes of 8
  const CostModel alone = derive_costs(llama, h100, Topology{}, one_node);
  const CostModel paced = derive_costs(llama, h100, Topology{}, many);
  // One stage, no pipeline transfers: its passes are all compute, slowed by the 256 nodes' factor.
  const double slowdown = slowest_node_slowdown(h100.kernels, 256);
  CHECK(paced.stages[0].f_s == Approx(alone.stages[0].f_s * slowdown));
  CHECK(paced.stages[0].b_s + paced.stages[0].w_s == Approx((alone.stages[0].b_s + alone.stages[0].w_s) * slowdown));
  // A constant efficiency is a figure of its own: no pace.
  DeviceSpec constant = h100;
  constant.efficiency = 0.5;
  CHECK(derive_costs(llama, constant, Topology{}, many).stages[0].f_s ==
        derive_costs(llama, constant, Topology{}, one_node).stages[0].f_s);
}

TEST_CASE("--node-pace-spread sets how much slower a run of many nodes computes", "[cli]") {
  // Llama 3 8B on 256 nodes: the preset's spread, none, and twice the preset's.
  const std::string run = "simulate --model llama-3-8b --stages 1 --data-parallel 2048 --micro-batches 4 --json";
  auto seconds = [](const ppsim_test::PpsimRun& r) {
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(r.out).at("iteration_time_s").get<double>();
  };
  const double preset = seconds(ppsim_test::run_ppsim(run));
  const double none = seconds(ppsim_test::run_ppsim(run + " --node-pace-spread 0"));
  const double twice = seconds(ppsim_test::run_ppsim(run + " --node-pace-spread 0.04"));
  CHECK(none < preset);
  CHECK(preset < twice);
  CHECK(seconds(ppsim_test::run_ppsim(run + " --node-pace-spread 0.02")) == preset);
  // One node: no slowest node to wait for, whatever the spread.
  const std::string one_node = "simulate --model llama-3-8b --stages 1 --data-parallel 8 --micro-batches 4 --json";
  CHECK(seconds(ppsim_test::run_ppsim(one_node + " --node-pace-spread 0.5")) ==
        seconds(ppsim_test::run_ppsim(one_node + " --node-pace-spread 0")));
}

TEST_CASE("--tp-comm-overlap leaves what a product cannot hide, and slows the products it shares SMs with") {
  const ModelSpec gpt3 = resolve_model("gpt3-175b");
  const DeviceSpec h100 = device_preset("h100");
  ParallelConfig plain = h100_parallel(8);
  ParallelConfig overlapped = plain;
  overlapped.tp_comm_overlap = true;
  const TensorParallelPass forward = tensor_parallel_forward(gpt3, h100, kH100Nvlink, plain);
  const TensorParallelPass hidden = tensor_parallel_forward(gpt3, h100, kH100Nvlink, overlapped);
  // Four collectives of one size each; the exposed part of each is max(0, c - g) + c / 8.
  const double collective_s = forward.exposed_s / 4;
  const double h = 12288, tokens = 2048;
  const double products[4] = {gemm_time_s({tokens, 3 * h / 8, h}, h100), gemm_time_s({tokens, h, h / 8}, h100),
                              gemm_time_s({tokens, 4 * h / 8, h}, h100), gemm_time_s({tokens, h, 4 * h / 8}, h100)};
  double expected = 0;
  for (double g : products) expected += std::max(0.0, collective_s - g) + collective_s / 8;
  CHECK(hidden.exposed_s == Approx(expected));
  CHECK(userbuffer_slowdown(h100).forward[1] == Approx(132.0 / 108.0));
  ParallelConfig no_sp = overlapped;
  no_sp.sequence_parallel = false;
  CHECK_THROWS_WITH(derive_costs(gpt3, h100, Topology{}, no_sp),
                    Catch::Contains("--tp-comm-overlap needs --sequence-parallel"));
}

TEST_CASE("ppsim simulate names the option of each bad input in one line", "[cli]") {
  const std::string llama = "simulate --model llama-3-8b --stages 1 ";
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {llama + "--context-parallel 3", "--context-parallel 3"},
      {llama + "--gpu a100 --fp8-format hybrid", "--fp8-format hybrid: the a100 has no FP8"},
      {llama + "--fp8-format e5m2", "--fp8-format: 'e5m2'"},
      {llama + "--pipeline-model-parallel-layout 'Et*8|(t*8|'", "--pipeline-model-parallel-layout"},
      {llama + "--overlap-param-gather", "--overlap-param-gather needs --use-distributed-optimizer"},
      {llama + "--overlap-param-gather-with-optimizer-step",
       "--overlap-param-gather-with-optimizer-step: for interleaved-1f1b"},
      {"simulate --model llama-3-8b --schedule interleaved-1f1b --stages 2 --chunks 2 --data-parallel 2 "
       "--use-distributed-optimizer --overlap-param-gather-with-optimizer-step",
       "--overlap-param-gather-with-optimizer-step needs --overlap-param-gather"},
      {"simulate --stages 2 --context-parallel 2", "--context-parallel needs --model"},
      {llama + "--node-pace-spread -0.01", "--node-pace-spread: must be in [0, 1), not -0.01"},
      {llama + "--node-pace-spread 1", "--node-pace-spread: must be in [0, 1), not 1"},
      {llama + "--node-pace-spread nan", "--node-pace-spread: must be in [0, 1), not nan"},
      {"simulate --stages 2 --node-pace-spread 0", "--node-pace-spread needs --model"},
      {"simulate --stages 2 --fp8-format hybrid", "--fp8-format needs --model"},
  };
  for (const Case& c : cases) {
    const ppsim_test::PpsimRun run = ppsim_test::run_ppsim(c.args);
    INFO(c.args << "\n" << run.err);
    CHECK(run.status == 2);
    CHECK(run.one_error_line());
    CHECK(run.err.find(c.message) != std::string::npos);
  }
  // Megatron's recipe settings together: each run predicts.
  const std::string interleaved =
      "simulate --model llama-3-8b --schedule interleaved-1f1b --stages 2 --chunks 2 --data-parallel 4 "
      "--micro-batches 8 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather "
      "--ddp-bucket-size 40000000 --json";
  const ppsim_test::PpsimRun aligned = ppsim_test::run_ppsim(interleaved);
  const ppsim_test::PpsimRun with_step =
      ppsim_test::run_ppsim(interleaved + " --overlap-param-gather-with-optimizer-step");
  CHECK(aligned.status == 0);
  CHECK(with_step.status == 0);
  CHECK(with_step.out.find("iteration_time_s") != std::string::npos);
  // --zero1 is --use-distributed-optimizer.
  const std::string sharded = llama + "--data-parallel 8 --micro-batches 4 --json ";
  CHECK(ppsim_test::run_ppsim(sharded + "--zero1").out ==
        ppsim_test::run_ppsim(sharded + "--use-distributed-optimizer").out);
}
