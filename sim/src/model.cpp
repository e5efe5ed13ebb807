#include "pipescope/sim/model.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/expert_layer.hpp"
#include "pipescope/sim/gated_delta_net_layer.hpp"
#include "pipescope/sim/layer_costs.hpp"
#include "pipescope/sim/mamba_layer.hpp"

namespace pipescope::sim {

LayerFigures layer_figures(const ModelSpec& model, int micro_batch_size) {
  const double s = model.seq;
  const double b = micro_batch_size;
  const double h = model.hidden;
  const double a = model.heads;
  double matrix_parameters = static_cast<double>(model.layer_matrix_parameters());
  double core_width = h;
  if (model.is_moe()) {
    // The mean layer of a MoE model, by the parameters a token meets: the dense layers, and the
    // MoE layers' dense part with the router and top_k experts.
    const ModelSpec part = model.moe_layer_dense_part();
    const double moe_layer = static_cast<double>(part.layer_matrix_parameters() + model.router_parameters() +
                                                 model.latent_projection_parameters() +
                                                 std::int64_t{model.top_k} * model.expert_parameters());
    const double moe = model.moe_layers();
    matrix_parameters = ((model.layers - moe) * matrix_parameters + moe * moe_layer) / model.layers;
    core_width = model.heads * model.attention_core_head_dim();
  }
  // Windowed and chunked layers' queries meet fewer keys: their share of the attention core's work.
  double core_share = model.attention_span_share();
  double scan_flops = 0;
  if (model.is_hybrid()) {
    // The mean block: attention's, the MLP's, the experts' (top_k of them, the shared ones and the
    // router), Mamba's and the Gated DeltaNets' matrices, the attention core in the attention blocks
    // alone, Mamba's scan and the delta rule.
    ModelSpec attention_only = model.moe_layer_dense_part();
    attention_only.without_mlp = true;
    ModelSpec dense = model;
    dense.num_experts = 0;
    const double attention = static_cast<double>(attention_only.layer_matrix_parameters());
    const double experts = model.is_moe()
                               ? static_cast<double>(model.moe_layer_dense_part().layer_matrix_parameters() +
                                                     model.router_parameters() + model.latent_projection_parameters() +
                                                     std::int64_t{model.top_k} * model.expert_parameters()) -
                                     attention
                               : 0.0;
    const double sum =
        model.layers_of(LayerKind::attention) * attention +
        model.layers_of(LayerKind::mlp) * (static_cast<double>(dense.layer_matrix_parameters()) - attention) +
        model.layers_of(LayerKind::experts) * experts +
        model.layers_of(LayerKind::mamba) * static_cast<double>(model.mamba_matrix_parameters()) +
        model.layers_of(LayerKind::linear_attention) * static_cast<double>(model.linear_attention_matrix_parameters());
    matrix_parameters = sum / model.layers;
    core_width = model.heads * model.attention_core_head_dim();
    core_share = static_cast<double>(model.layers_of(LayerKind::attention)) / model.layers;
    scan_flops = s * b *
                 (mamba_scan_flops_per_token(model) * model.layers_of(LayerKind::mamba) +
                  gated_delta_rule_flops_per_token(model) * model.layers_of(LayerKind::linear_attention)) /
                 model.layers;
  }
  const double matrix_flops = 2.0 * s * b * matrix_parameters;
  const double core_flops = s * s * b * core_width * core_share;
  LayerFigures out;
  out.f_flops = matrix_flops + 4.0 * core_flops + scan_flops;
  out.b_flops = matrix_flops + 8.0 * core_flops + 2.0 * scan_flops;
  out.w_flops = matrix_flops;
  ParallelConfig sizes;
  sizes.micro_batch_size = micro_batch_size;
  out.activation_bytes = memory_figure_bytes(s * b * (34.0 * h + 5.0 * a * s), "one layer's activations", model, sizes);
  out.weight_stash_bytes = memory_figure_bytes(32.0 * s * b * h, "one layer's weight-gradient inputs", model, sizes);
  return out;
}

std::vector<int> stage_layers(const ModelSpec& model, const ParallelConfig& parallel) {
  return stage_layer_counts(parallel.layout, model.layers, parallel.pipeline, parallel.chunks, model.mtp_num_layers);
}

Topology with_parallel_layout(Topology topology, const ParallelConfig& parallel) {
  const int tp = std::max(parallel.tensor_parallel, 1);
  const int cp = std::max(parallel.context_parallel, 1);
  topology.data_parallel = parallel.data_parallel * cp;
  topology.data_parallel_stride = tp;
  topology.pipeline_rank_stride = tp * cp * parallel.data_parallel;
  return topology;
}

bool all_to_all_splits_heads(const ModelSpec& model, int tensor_parallel, int group) {
  const int t = std::max(tensor_parallel, 1);
  const auto splits = [&](int count) { return count % t != 0 || (count / t) % group == 0; };
  return splits(model.heads) && splits(model.kv_heads_or_heads());
}

std::optional<std::string> context_parallel_problem(const ModelSpec& model, const ParallelConfig& parallel) {
  const int cp = parallel.context_parallel;
  if (cp < 1) return std::string("--context-parallel must be at least 1");
  if (cp == 1) return std::nullopt;
  const std::string option = "--context-parallel " + std::to_string(cp);
  if (auto problem = mamba_context_parallel_problem(model, parallel)) return problem;
  if (auto problem = gated_delta_net_context_parallel_problem(model, parallel)) return problem;
  const ContextParallelComm comm = parallel.context_parallel_comm;
  const int a2a = parallel.context_parallel_all_to_all();
  if (comm == ContextParallelComm::a2a_p2p && (parallel.context_parallel_a2a < 1 || cp % parallel.context_parallel_a2a))
    return option + " with --cp-comm-type a2a+p2p: no all-to-all group size A given or fitting " +
           "(--hierarchical-context-parallel-sizes A B, A x B = " + std::to_string(cp) +
           "; A dividing a tensor-parallel rank's heads and key/value heads)";
  if (a2a > 1 && !all_to_all_splits_heads(model, parallel.tensor_parallel, a2a)) {
    const int t = std::max(parallel.tensor_parallel, 1);
    for (const auto& [count, what] :
         {std::pair{model.heads, "attention heads"}, std::pair{model.kv_heads_or_heads(), "key/value heads"}})
      if (count % t == 0 && (count / t) % a2a != 0)
        return option + " with --cp-comm-type " + std::string(context_parallel_comm_name(comm)) +
               ": does not divide the " + std::to_string(count / t) + " " + what + " of " + model.name +
               " on a tensor-parallel rank (" +
               (a2a == cp ? std::string("each CP rank attends with a C-th of them")
                          : "each rank of an all-to-all group of " + std::to_string(a2a) + " attends with 1/" +
                                std::to_string(a2a) + " of them") +
               ")";
  }
  if (comm != ContextParallelComm::a2a) {
    // A window or chunks as long as the sequence are full attention; shorter ones need every
    // query's keys on its own rank, which only the all-to-all gives.
    if (model.attention_limited(AttentionSpan::window))
      return option + ": " + model.name + "'s sliding-window attention (window_size " +
             std::to_string(model.window_size) +
             ") is not modelled with this --cp-comm-type (give --cp-comm-type a2a, as Transformer Engine requires)";
    if (model.attention_limited(AttentionSpan::chunk))
      return option + ": " + model.name + "'s chunked attention (attention_chunk_size " +
             std::to_string(model.attention_chunk_size) +
             ") is not modelled with this --cp-comm-type (give --cp-comm-type a2a)";
  }
  if (model.seq % (2 * cp) != 0)
    return "--context-parallel " + std::to_string(cp) + ": 2 x " + std::to_string(cp) + " chunks do not divide the " +
           std::to_string(model.seq) + "-token sequence of " + model.name +
           " (causal load balancing gives each rank two of 2C equal chunks)";
  return std::nullopt;
}

std::optional<std::string> precision_problem(const DeviceSpec& device, const ParallelConfig& parallel) {
  if (parallel.fp8 != Fp8Format::none && !device.has_fp8())
    return "--fp8-format " + std::string(fp8_format_name(parallel.fp8)) + ": the " + device.name +
           " has no FP8 tensor cores (h100, h200 and b200 have)";
  if (parallel.fp8_param_gather && parallel.fp8 == Fp8Format::none)
    return std::string("--fp8-param-gather needs --fp8-format");
  return std::nullopt;
}

namespace {

// Options that only mean something beside another one: refused, naming both, as Megatron does.
void check_option_pairs(const ParallelConfig& parallel) {
  if (parallel.tp_comm_overlap && !parallel.sequence_parallel)
    throw UsageError(
        "--tp-comm-overlap needs --sequence-parallel (Transformer Engine overlaps sequence "
        "parallelism's all-gathers and reduce-scatters)");
  if (parallel.overlap_param_gather && !parallel.zero1)
    throw UsageError("--overlap-param-gather needs --use-distributed-optimizer (only it all-gathers parameters)");
  if (parallel.overlap_param_gather_with_optimizer_step && !parallel.overlap_param_gather)
    throw UsageError("--overlap-param-gather-with-optimizer-step needs --overlap-param-gather, as in Megatron");
  if (parallel.overlap_param_gather_with_optimizer_step && parallel.chunks < 2)
    throw UsageError(
        "--overlap-param-gather-with-optimizer-step needs interleaving (--chunks 2 or more): Megatron supports it "
        "only with a virtual pipeline, whose later chunks' steps hide the first chunk's gather");
  if (parallel.bucket_parameters < 0) throw UsageError("--ddp-bucket-size must be at least 1");
  if (parallel.wgrad_deferral_limit < 0)
    throw UsageError("--wgrad-deferral-limit must be at least 0 (0: every micro-batch)");
  if (parallel.wgrad_deferral_limit > 0 && !parallel.defer_embedding_wgrad)
    throw UsageError("--wgrad-deferral-limit needs --defer-embedding-wgrad-compute");
  if (parallel.defer_embedding_wgrad && parallel.pipeline < 2)
    throw UsageError(
        "--defer-embedding-wgrad-compute needs pipeline parallelism (--stages 2 or more): the deferred weight "
        "gradients fill the pipeline's flush, as in Megatron, which refuses it without one");
}

// The links context parallelism's exchanges run on: its members sit T apart, on one node's NVLink
// while T x C GPUs fit in a node, else some hops cross the network. An all-to-all group (a2a's
// C ranks, a2a+p2p's A consecutive ones) spans T x A GPUs and runs at what NCCL's all-to-all
// achieves there, as the experts' do; the ring (and the all-gather) spans T x C.
ContextParallelLinks context_parallel_links(const Topology& topology, const ParallelConfig& parallel,
                                            const DeviceSpec& device) {
  const auto link_over = [&topology](int gpus) {
    return gpus <= topology.gpus_per_node ? topology.intra_node : topology.inter_node;
  };
  const int a2a_gpus = parallel.tensor_parallel * parallel.context_parallel_all_to_all();
  ContextParallelLinks links{link_over(parallel.tensor_parallel * parallel.context_parallel), link_over(a2a_gpus)};
  links.all_to_all.bandwidth_bytes_per_s *=
      a2a_gpus <= topology.gpus_per_node ? device.all_to_all.nvlink_fraction : device.all_to_all.network_fraction;
  return links;
}

}  // namespace

std::optional<std::string> tensor_parallel_problem(const ModelSpec& model, const ParallelConfig& parallel,
                                                   int gpus_per_node) {
  const int t = parallel.tensor_parallel;
  const std::string option = "--tensor-parallel " + std::to_string(t);
  if (t < 1) return "--tensor-parallel must be at least 1";
  if (parallel.sequence_parallel && t == 1)
    return std::string(
        "--sequence-parallel needs --tensor-parallel above 1 (it splits what tensor parallelism replicates)");
  if (t == 1) return std::nullopt;
  if (t > gpus_per_node)
    return option + ": more than the " + std::to_string(gpus_per_node) +
           " GPUs of a node (tensor parallelism stays on one node's links)";
  auto divides = [&](int count, const char* what) -> std::optional<std::string> {
    if (count % t == 0) return std::nullopt;
    return option + ": does not divide the " + std::to_string(count) + " " + what + " of " + model.name;
  };
  if (auto problem = divides(model.heads, "attention heads")) return problem;
  if (auto problem = divides(model.kv_heads_or_heads(), "key/value heads")) return problem;
  if (auto problem = divides(model.ffn_or_default(), "FFN columns")) return problem;
  if (auto problem = gated_delta_net_tensor_parallel_problem(model, t)) return problem;
  return mamba_tensor_parallel_problem(model, t);
}

std::optional<std::string> expert_parallel_problem(const ModelSpec& model, const ParallelConfig& parallel,
                                                   int gpus_per_node) {
  const int ep = parallel.expert_parallel;
  const int etp = parallel.expert_tp();
  if (!model.is_moe()) {
    const std::string dense = ": " + model.name + " has no experts (a dense model)";
    if (ep != 1) return "--expert-parallel " + std::to_string(ep) + dense;
    if (parallel.expert_tensor_parallel != 0) return "--expert-tensor-parallel " + std::to_string(etp) + dense;
    if (parallel.moe_imbalance != 1) return "--moe-imbalance" + dense;
    if (parallel.fp8_dispatch) return "--moe-fp8-dispatch" + dense;
    if (!parallel.expert_tokens.empty()) return "--moe-routing" + dense;
    return std::nullopt;
  }
  if (ep < 1) return std::string("--expert-parallel must be at least 1");
  if (etp < 1) return std::string("--expert-tensor-parallel must be at least 1");
  if (model.num_experts % ep != 0)
    return "--expert-parallel " + std::to_string(ep) + ": does not divide the " + std::to_string(model.num_experts) +
           " experts of " + model.name;
  if (etp > gpus_per_node)
    return "--expert-tensor-parallel " + std::to_string(etp) + ": more than the " + std::to_string(gpus_per_node) +
           " GPUs of a node";
  if (model.moe_ffn_or_default() % etp != 0)
    return "--expert-tensor-parallel " + std::to_string(etp) + ": does not divide the experts' " +
           std::to_string(model.moe_ffn_or_default()) + " FFN columns";
  const std::int64_t stage_gpus =
      static_cast<std::int64_t>(parallel.tensor_parallel) * parallel.context_parallel * parallel.data_parallel;
  if (stage_gpus % (static_cast<std::int64_t>(ep) * etp) != 0)
    return "--expert-parallel " + std::to_string(ep) + ": EP x expert TP = " + std::to_string(ep * etp) +
           " does not divide the " + std::to_string(stage_gpus) +
           " GPUs of a pipeline stage (tensor x context x data parallel), as Megatron requires";
  if (parallel.tensor_parallel > 1 && !parallel.sequence_parallel)
    return "--tensor-parallel " + std::to_string(parallel.tensor_parallel) +
           ": a MoE model needs --sequence-parallel with tensor parallelism, as Megatron requires";
  if (!parallel.expert_tokens.empty() && parallel.expert_tokens.size() != static_cast<std::size_t>(model.num_experts))
    return "--moe-routing: " + std::to_string(parallel.expert_tokens.size()) + " expert counts for the " +
           std::to_string(model.num_experts) + " experts of " + model.name;
  if (!parallel.expert_tokens.empty()) {
    // A token is routed to an expert once at most: one expert holds at most 1 / top_k of the sum.
    double total = 0;
    for (double t : parallel.expert_tokens) total += t;
    const auto busiest = std::max_element(parallel.expert_tokens.begin(), parallel.expert_tokens.end());
    if (*busiest > total / model.top_k * (1 + 1e-12))
      return fmt::format(
          "--moe-routing: expert {} has {:g} of the {:g} assignments, more than one a token (the "
          "histogram counts top_k = {} assignments a token)",
          busiest - parallel.expert_tokens.begin(), *busiest, total, model.top_k);
  }
  if (!(parallel.moe_imbalance >= 1))
    return std::string("--moe-imbalance must be at least 1 (the busiest expert's tokens over the mean)");
  // A token goes to an expert once at most: the busiest takes every token, E / top_k the mean.
  const double most = static_cast<double>(model.num_experts) / model.top_k;
  if (parallel.moe_imbalance > most)
    return fmt::format(
        "--moe-imbalance {}: above {:g} ({} experts over top_k {}), where the busiest expert takes "
        "every token",
        parallel.moe_imbalance, most, model.num_experts, model.top_k);
  return std::nullopt;
}

namespace {

// What one kind of layer (dense, or MoE) costs on the rank: derive_costs sums the stage's layers
// of each kind.
struct LayerKindCosts {
  LayerTimes times;
  LayerMemory memory;
  std::int64_t parameters = 0;         // sharded over data x context parallelism
  std::int64_t matrix_parameters = 0;  // the linear layers' weights (FP8 copies), experts' included
  std::int64_t expert_parameters = 0;  // sharded over the expert data-parallel group
  ExpertTimes experts;                 // of a MoE layer: its all-to-all, apart
};

LayerKindCosts dense_layer_costs(const ModelSpec& model, const DeviceSpec& device, const LayerLinks& links,
                                 const ParallelConfig& parallel) {
  LayerKindCosts kind;
  kind.times = layer_times(model, device, links, parallel);
  kind.memory = layer_memory(model, parallel);
  kind.parameters = layer_parameters_on_rank(model, parallel.tensor_parallel);
  kind.matrix_parameters = layer_matrix_parameters_on_rank(model, parallel.tensor_parallel);
  return kind;
}

// Latent experts' own work beside the experts': each routed token projected from the hidden width
// into the latent one before the dispatch and back after the combine (two products on the rank's
// routed tokens, replicated over tensor parallelism, in the layer's precision), and the router
// reading the hidden width the experts' pricing gives the latent one; the latent tokens kept for
// the backward (the projection's output and the combine's result).
struct LatentProjection {
  LayerTimes times;
  std::int64_t held_bytes = 0;
};

LatentProjection latent_projection(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel) {
  LatentProjection out;
  if (model.moe_latent_size <= 0) return out;
  const double tokens =
      static_cast<double>(model.seq) * parallel.micro_batch_size / parallel.context_parallel / parallel.tensor_parallel;
  const double h = model.hidden, latent = model.moe_latent_size, experts = model.num_experts;
  const GemmPrecision precision = parallel.fp8 != Fp8Format::none ? GemmPrecision::fp8 : GemmPrecision::bf16;
  const auto pair = [&](double m, double n, double k) {
    return gemm_time_s({m, n, k}, device, precision) + gemm_time_s({m, k, n}, device, precision);
  };
  const auto router = [&](GemmShape full, GemmShape narrow) {
    return gemm_time_s(full, device) - gemm_time_s(narrow, device);
  };
  out.times.f_s = pair(tokens, latent, h) + router({tokens, experts, h}, {tokens, experts, latent});
  out.times.b_s = pair(tokens, h, latent) + router({tokens, h, experts}, {tokens, latent, experts});
  out.times.w_s = gemm_time_s({h, latent, tokens}, device, precision) +
                  gemm_time_s({latent, h, tokens}, device, precision) +
                  router({h, experts, tokens}, {latent, experts, tokens});
  out.held_bytes = static_cast<std::int64_t>(2.0 * 2.0 * tokens * latent);
  return out;
}

// A MoE layer's dense part runs its shared experts as its MLP: --recompute-modules names them
// shared_experts, and its own mlp does not reach them.
ParallelConfig with_shared_experts_as_mlp(ParallelConfig parallel) {
  parallel.recompute_modules =
      static_cast<std::uint8_t>((parallel.recompute_modules & ~kRecomputeMlp) |
                                ((parallel.recompute_modules & kRecomputeSharedExperts) != 0 ? kRecomputeMlp : 0));
  return parallel;
}

// A MoE layer: its dense part (attention, shared experts) as a layer, the router replicated, the
// routed experts (expert_layer.hpp) added to its times, activations and parameters.
LayerKindCosts moe_layer_costs(const ModelSpec& model, const DeviceSpec& device, const LayerLinks& links,
                               const ExpertLinks& expert_links, const ParallelConfig& parallel) {
  if (!model.is_moe()) return {};
  LayerKindCosts kind =
      dense_layer_costs(model.moe_layer_dense_part(), device, links, with_shared_experts_as_mlp(parallel));
  // Latent experts see the model at their width: their products, the dispatch and the combine.
  const ModelSpec routed = model.in_expert_width();
  ExpertTimes experts = expert_times(routed, device, expert_links, parallel);
  const LatentProjection latent = latent_projection(model, device, parallel);
  experts.f_s += latent.times.f_s;
  experts.b_s += latent.times.b_s;
  experts.w_s += latent.times.w_s;
  kind.experts = experts;
  kind.times.f_s += experts.f_s;
  kind.times.b_s += experts.b_s;
  kind.times.w_s += experts.w_s;
  const std::int64_t expert_bytes = expert_activation_bytes(routed, parallel) + latent.held_bytes;
  switch (parallel.recomputation) {
    case Recomputation::full:
      // Only the layer's input is kept; the experts run again with the rest of the forward.
      kind.times.recompute_s += experts.f_s;
      kind.memory.rebuilt_bytes += expert_bytes;
      break;
    case Recomputation::selective:
      if (parallel.recomputes(kRecomputeMoe)) {
        // The whole MoE layer again, its router and all-to-all included (set_stage_times).
        kind.times.recompute_s += experts.f_s;
        kind.memory.rebuilt_bytes += expert_bytes;
      } else if (parallel.recomputes(kRecomputeMoeActivation)) {
        const ExpertActivation activation = expert_activation(routed, parallel);
        kind.times.recompute_s += memory_bound_time_s(activation.moved_bytes, device);
        kind.memory.held_bytes += expert_bytes - static_cast<std::int64_t>(activation.output_bytes);
        kind.memory.rebuilt_bytes += static_cast<std::int64_t>(activation.output_bytes);
      } else {
        kind.memory.held_bytes += expert_bytes;
      }
      break;
    case Recomputation::none: kind.memory.held_bytes += expert_bytes; break;
  }
  kind.parameters += model.router_parameters() + model.latent_projection_parameters();
  kind.expert_parameters = expert_parameters_on_rank(routed, parallel);
  kind.matrix_parameters += kind.expert_parameters + model.latent_projection_parameters();
  return kind;
}

// Layers of each kind on each stage: stages hold consecutive layers in stage order.
std::vector<std::array<int, kLayerKinds>> layer_kinds_per_stage(const ModelSpec& model,
                                                                const std::vector<int>& layers) {
  std::vector<std::array<int, kLayerKinds>> kinds(layers.size(), std::array<int, kLayerKinds>{});
  int next = 0;
  for (std::size_t st = 0; st < layers.size(); ++st)
    for (int i = 0; i < layers[st]; ++i) ++kinds[st][static_cast<std::size_t>(model.layer_kind(next++))];
  return kinds;
}

// What remains of a layer's costs once another's are taken out: a hybrid model's MLP is a
// transformer layer without its attention (every figure of either adds up).
LayerKindCosts without(LayerKindCosts whole, const LayerKindCosts& part) {
  LayerTimes& t = whole.times;
  const LayerTimes& u = part.times;
  t.f_s -= u.f_s;
  t.b_s -= u.b_s;
  t.w_s -= u.w_s;
  t.recompute_s -= u.recompute_s;
  t.recompute_tp_s -= u.recompute_tp_s;
  t.tp_f_s -= u.tp_f_s;
  t.tp_b_s -= u.tp_b_s;
  t.tp_b_hidden_s -= u.tp_b_hidden_s;
  t.cp_f_s -= u.cp_f_s;
  t.cp_b_s -= u.cp_b_s;
  whole.memory.held_bytes -= part.memory.held_bytes;
  whole.memory.rebuilt_bytes = std::max<std::int64_t>(0, whole.memory.rebuilt_bytes - part.memory.rebuilt_bytes);
  whole.memory.weight_stash_bytes -= part.memory.weight_stash_bytes;
  whole.parameters -= part.parameters;
  whole.matrix_parameters -= part.matrix_parameters;
  return whole;
}

// A hybrid model's attention block: a transformer layer without its MLP, with one of its two norms
// and half its tensor-parallel collectives (the all-gather before QKV, the reduce-scatter after
// the output projection; the MLP's pair is the MLP block's).
LayerKindCosts attention_block_costs(const LayerKindCosts& attention_and_norms, std::int64_t hidden) {
  LayerKindCosts kind = attention_and_norms;
  kind.times.tp_f_s /= 2;
  kind.times.tp_b_s /= 2;
  kind.times.tp_b_hidden_s /= 2;
  kind.times.recompute_tp_s /= 2;
  kind.parameters -= 2 * hidden;
  return kind;
}

// A recurrent block (Mamba-2, a Gated DeltaNet): its own work, memory and parameters, with the
// attention block's two tensor-parallel collectives (one all-gather before its input projection,
// one reduce-scatter after its output projection).
LayerKindCosts recurrent_block_costs(LayerTimes times, LayerMemory memory, std::int64_t parameters,
                                     std::int64_t matrix_parameters, const LayerKindCosts& attention,
                                     const ParallelConfig& parallel) {
  LayerKindCosts kind;
  kind.times = times;
  kind.times.tp_f_s = attention.times.tp_f_s;
  kind.times.tp_b_s = attention.times.tp_b_s;
  kind.times.tp_b_hidden_s = attention.times.tp_b_hidden_s;
  if (parallel.recomputation == Recomputation::full) kind.times.recompute_tp_s = attention.times.recompute_tp_s;
  kind.memory = memory;
  kind.parameters = parameters;
  kind.matrix_parameters = matrix_parameters;
  return kind;
}

// A hybrid model's blocks (ModelSpec::hybrid_pattern): attention alone, the MLP alone (a
// transformer layer's other half), the experts alone (a MoE layer's other half), a Mamba mixer
// (with context parallelism's all-to-alls) and a Gated DeltaNet as recurrent blocks.
void set_hybrid_block_costs(std::array<LayerKindCosts, kLayerKinds>& kinds, const ModelSpec& model,
                            const DeviceSpec& device, const LayerLinks& links, const Topology& topology,
                            const ParallelConfig& parallel) {
  const std::int64_t h = model.hidden;
  ModelSpec attention_only = model.moe_layer_dense_part();
  attention_only.without_mlp = true;
  ModelSpec dense_model = model;
  dense_model.num_experts = 0;
  dense_model.without_mlp = false;
  const LayerKindCosts attention = attention_block_costs(dense_layer_costs(attention_only, device, links, parallel), h);
  kinds[static_cast<std::size_t>(LayerKind::attention)] = attention;
  kinds[static_cast<std::size_t>(LayerKind::mlp)] =
      without(dense_layer_costs(dense_model, device, links, parallel), attention);
  if (model.is_moe()) {
    // The experts' block: the MoE layer less its attention (its shared experts stay).
    kinds[static_cast<std::size_t>(LayerKind::experts)] =
        without(kinds[static_cast<std::size_t>(LayerKind::moe)],
                attention_block_costs(
                    dense_layer_costs(attention_only, device, links, with_shared_experts_as_mlp(parallel)), h));
  }
  // Full recomputation keeps each block's input, as Megatron's hybrid stack checkpoints each of
  // its layers: the MLP and expert blocks keep theirs too, where a transformer layer keeps one.
  if (parallel.recomputation == Recomputation::full)
    for (const LayerKind block : {LayerKind::mlp, LayerKind::experts})
      kinds[static_cast<std::size_t>(block)].memory.held_bytes = attention.memory.held_bytes;
  // Context parallelism's all-to-alls over the C ranks, T apart (TP innermost): on the compute
  // stream, nothing hides them.
  const int members_per_node =
      std::clamp(topology.gpus_per_node / std::max(parallel.tensor_parallel, 1), 1, parallel.context_parallel);
  const MambaContextParallel exchange = mamba_context_parallel(
      model, device, parallel,
      ExpertLinks{topology.intra_node, topology.inter_node, topology.gpus_per_node, device.all_to_all},
      members_per_node);
  LayerTimes mamba_times = mamba_layer_times(model, device, parallel);
  mamba_times.cp_f_s = exchange.forward_s;
  mamba_times.cp_b_s = exchange.backward_s;
  mamba_times.f_s += exchange.forward_s;
  mamba_times.b_s += exchange.backward_s;
  if (parallel.recomputation == Recomputation::full) mamba_times.recompute_s += exchange.forward_s;
  kinds[static_cast<std::size_t>(LayerKind::mamba)] = recurrent_block_costs(
      mamba_times, mamba_layer_memory(model, parallel), mamba_layer_parameters_on_rank(model, parallel.tensor_parallel),
      mamba_layer_matrix_parameters_on_rank(model, parallel.tensor_parallel), attention, parallel);
  kinds[static_cast<std::size_t>(LayerKind::linear_attention)] = recurrent_block_costs(
      gated_delta_net_times(model, device, parallel), gated_delta_net_memory(model, parallel),
      gated_delta_net_parameters_on_rank(model, parallel.tensor_parallel),
      gated_delta_net_matrix_parameters_on_rank(model, parallel.tensor_parallel), attention, parallel);
}

// What every stage of one configuration shares: its layers by kind and their costs, the head's,
// the two gradient groups' topologies and the sizes the stages' figures scale with.
struct StageInputs {
  const ModelSpec& model;
  const DeviceSpec& device;
  const ParallelConfig& parallel;
  Topology topology{};
  Topology expert_topology{};
  int num_stages = 0;
  std::vector<int> layers{};
  std::vector<std::array<int, kLayerKinds>> layer_kinds{};  // each stage's layers, by LayerKind
  std::array<LayerKindCosts, kLayerKinds> kinds{};          // one layer of each kind
  const LayerKindCosts& dense() const { return kinds[static_cast<std::size_t>(LayerKind::dense)]; }
  const LayerKindCosts& moe() const { return kinds[static_cast<std::size_t>(LayerKind::moe)]; }
  HeadTimes head{};
  // The last stage's multi-token prediction layers (each a layer of the kind of the decoder's
  // last, its projection and another pass of the head) and one's projection and norms.
  int mtp_layers = 0;
  bool mtp_moe = false;
  HeadTimes mtp_projection{};
  int expert_shards = 1;
  std::int64_t embedding_parameters = 0;
  double s = 0, b = 0, h = 0, vocab_on_rank = 0;
  int shards = 1;
  double optimizer_bytes_per_parameter = 0;
  bool fp8 = false;
  double hidden_state_bytes = 0;
};

// The configuration checked (UsageError naming what the model, the node or the device cannot
// take), and what its stages share.
StageInputs stage_inputs(const ModelSpec& model, const DeviceSpec& device, const Topology& topology_in,
                         const ParallelConfig& parallel) {
  if (parallel.pipeline < 1 || parallel.chunks < 1 || parallel.data_parallel < 1 || parallel.micro_batch_size < 1)
    throw UsageError("pipeline, chunks, data-parallel and micro-batch sizes must be at least 1");
  if (auto problem = tensor_parallel_problem(model, parallel, topology_in.gpus_per_node)) throw UsageError(*problem);
  if (auto problem = context_parallel_problem(model, parallel)) throw UsageError(*problem);
  if (auto problem = precision_problem(device, parallel)) throw UsageError(*problem);
  if (auto problem = expert_parallel_problem(model, parallel, topology_in.gpus_per_node)) throw UsageError(*problem);
  if (auto problem = recompute_modules_problem(model, parallel)) throw UsageError(*problem);
  check_option_pairs(parallel);
  StageInputs in{
      .model = model, .device = device, .parallel = parallel, .topology = with_parallel_layout(topology_in, parallel)};
  const Topology& topology = in.topology;
  in.num_stages = parallel.pipeline * parallel.chunks;
  in.layers = stage_layers(model, parallel);
  const int tp = parallel.tensor_parallel;
  // Tensor parallelism stays inside a node: its collectives run on NVLink.
  const LayerLinks links{topology.intra_node, context_parallel_links(topology, parallel, device)};
  in.kinds[static_cast<std::size_t>(LayerKind::dense)] = dense_layer_costs(model, device, links, parallel);
  in.kinds[static_cast<std::size_t>(LayerKind::moe)] = moe_layer_costs(
      model, device, links,
      ExpertLinks{topology.intra_node, topology.inter_node, topology.gpus_per_node, device.all_to_all}, parallel);
  if (model.is_hybrid()) set_hybrid_block_costs(in.kinds, model, device, links, topology, parallel);
  in.layer_kinds = layer_kinds_per_stage(model, in.layers);
  in.head = head_times(model, device, parallel);
  in.mtp_layers = model.mtp_num_layers;
  in.mtp_moe = model.mtp_layer_is_moe();
  in.mtp_projection = mtp_projection_times(model, device, parallel);
  // The routed experts' gradients are reduced, and their optimizer state sharded, over the
  // expert data-parallel group: members EP x ETP apart (Megatron's "tp-ep-dp-pp" expert order).
  in.expert_topology = topology;
  in.expert_topology.data_parallel = parallel.expert_data_parallel();
  in.expert_topology.data_parallel_stride = parallel.expert_parallel * parallel.expert_tp();
  in.expert_shards = parallel.zero1 ? parallel.expert_data_parallel() : 1;
  // Vocabulary-parallel, over the padded vocabulary's rows.
  const std::int64_t vocab = parallel.padded_vocab(model.vocab);
  in.embedding_parameters = vocab * model.hidden / tp;
  // The rank's tokens of a micro-batch: context parallelism splits each sequence.
  in.s = static_cast<double>(model.seq) / parallel.context_parallel;
  in.b = parallel.micro_batch_size;
  in.h = model.hidden;
  in.vocab_on_rank = static_cast<double>(vocab) / tp;
  // The distributed optimizer shards its state over the gradients' group (DP x CP).
  in.shards = parallel.zero1 ? parallel.gradient_group() : 1;
  in.optimizer_bytes_per_parameter = 16.0 / in.shards;
  in.fp8 = parallel.fp8 != Fp8Format::none;
  // With sequence parallelism the stage's output is split over the tensor-parallel ranks and
  // each sends its part (Megatron's scatter-gather optimisation).
  in.hidden_state_bytes = 2.0 * in.s * in.b * in.h / (parallel.sequence_parallel ? tp : 1);
  return in;
}

// One stage's parameters on the rank: all of them (experts' included), the routed experts',
// and the linear layers' (what FP8 copies).
struct StageParameters {
  std::int64_t all = 0;
  std::int64_t experts = 0;
  std::int64_t matrix = 0;
};

// The layers a stage runs, by kind: its decoder layers and, on the last stage, the multi-token
// prediction layers' (of the decoder's last layer's kind).
struct StageLayerCounts {
  std::array<int, kLayerKinds> of{};
  int mtp = 0;
  int count(LayerKind kind) const { return of[static_cast<std::size_t>(kind)]; }
  // Layers with routed experts: a transformer's MoE layers and a hybrid model's expert blocks.
  int with_experts() const { return count(LayerKind::moe) + count(LayerKind::experts); }
};

StageLayerCounts stage_layer_kinds(const StageInputs& in, int st) {
  StageLayerCounts n;
  n.of = in.layer_kinds[static_cast<std::size_t>(st)];
  if (st == in.num_stages - 1) n.mtp = in.mtp_layers;
  n.of[static_cast<std::size_t>(in.mtp_moe ? LayerKind::moe : LayerKind::dense)] += n.mtp;
  return n;
}

// The sum over a stage's layers of `figure` of one layer of each kind.
template <typename Figure>
double sum_over_layers(const StageInputs& in, const StageLayerCounts& n, const Figure& figure) {
  double total = 0;
  for (std::size_t k = 0; k < in.kinds.size(); ++k)
    if (n.of[k] > 0) total += n.of[k] * static_cast<double>(figure(in.kinds[k]));
  return total;
}

StageParameters stage_parameters(const StageInputs& in, int st) {
  const bool first = st == 0;
  const bool last = st == in.num_stages - 1;
  const StageLayerCounts n = stage_layer_kinds(in, st);
  // An MTP layer's projection is column-parallel; its norms are whole on every rank.
  const std::int64_t projection_matrix = in.model.mtp_projection_matrix_parameters() / in.parallel.tensor_parallel;
  const std::int64_t projection_norms =
      in.model.mtp_projection_parameters() - in.model.mtp_projection_matrix_parameters();
  StageParameters p;
  p.experts = n.with_experts() * in.moe().expert_parameters;
  p.all = static_cast<std::int64_t>(sum_over_layers(in, n, [](const LayerKindCosts& k) { return k.parameters; })) +
          n.mtp * (projection_matrix + projection_norms);
  if (first) p.all += in.embedding_parameters;
  if (last && !(first && in.model.tied_embeddings)) p.all += in.embedding_parameters + 2 * in.model.hidden;
  // The MTP layers embed the next tokens on the last stage: it holds the embedding too.
  if (last && n.mtp > 0 && !first && !in.model.tied_embeddings) p.all += in.embedding_parameters;
  p.matrix =
      static_cast<std::int64_t>(sum_over_layers(in, n, [](const LayerKindCosts& k) { return k.matrix_parameters; })) +
      n.mtp * projection_matrix;
  return p;
}

// The stage's passes: their times, their tensor-parallel collectives and the experts'
// all-to-all inside them.
void set_stage_times(StageCost& c, const StageInputs& in, int st) {
  const bool last = st == in.num_stages - 1;
  const StageLayerCounts counts = stage_layer_kinds(in, st);
  const double n_moe = counts.with_experts();
  const double n_mtp = counts.mtp;
  auto sum = [&](const auto& figure) {
    return sum_over_layers(in, counts, [&](const LayerKindCosts& k) { return figure(k.times); });
  };
  c.tensor_parallel_f_s = sum([](const LayerTimes& t) { return t.tp_f_s; });
  c.tensor_parallel_b_s = sum([](const LayerTimes& t) { return t.tp_b_s + t.recompute_tp_s; });
  // The backward first runs again what recomputation dropped.
  c.f_s = sum([](const LayerTimes& t) { return t.f_s; }) + c.tensor_parallel_f_s;
  c.b_s = sum([](const LayerTimes& t) { return t.b_s + t.recompute_s; }) + c.tensor_parallel_b_s;
  c.w_s = sum([](const LayerTimes& t) { return t.w_s; });
  if (last) {
    // The head once for the decoder and once more for each MTP layer, with its projection.
    c.f_s += (1 + n_mtp) * in.head.f_s + n_mtp * in.mtp_projection.f_s;
    c.b_s += (1 + n_mtp) * in.head.b_s + n_mtp * in.mtp_projection.b_s;
    c.w_s += (1 + n_mtp) * in.head.w_s + n_mtp * in.mtp_projection.w_s;
    if (in.parallel.defer_embedding_wgrad) {
      // The output layer's weight gradient of each of its passes; held meanwhile, its input (a
      // stage's output, as sequence parallelism splits it: the flush gathers it again) and the
      // 16-bit gradient of its output, the rank's share of the vocabulary.
      c.deferred_weight_s = (1 + n_mtp) * in.head.w_s;
      c.deferred_micro_batches = in.parallel.wgrad_deferral_limit;
      c.deferred_bytes =
          memory_figure_bytes((1 + n_mtp) * (in.hidden_state_bytes + 2.0 * in.s * in.b * in.vocab_on_rank),
                              "the deferred output-layer weight gradients' inputs", in.model, in.parallel);
    }
  }
  // The experts' all-to-all inside those passes, apart, for the schedules that overlap it.
  // Full recomputation runs the forward's dispatch and combine again in the backward.
  const ExpertTimes& e = in.moe().experts;
  const double recomputed =
      in.parallel.recomputation == Recomputation::full || in.parallel.recomputes(kRecomputeMoe) ? 1.0 : 0.0;
  c.all_to_all.moe_layers = counts.with_experts();
  c.all_to_all.group_size = std::max(in.parallel.expert_parallel, 1);
  c.all_to_all.dispatch_f_s = n_moe * e.dispatch_f_s;
  c.all_to_all.combine_f_s = n_moe * e.combine_f_s;
  c.all_to_all.dispatch_b_s = n_moe * (e.dispatch_b_s + recomputed * e.dispatch_f_s);
  c.all_to_all.combine_b_s = n_moe * (e.combine_b_s + recomputed * e.combine_f_s);
  c.all_to_all.dispatch_bytes = static_cast<std::int64_t>(e.dispatch_bytes);
  c.all_to_all.combine_bytes = static_cast<std::int64_t>(e.combine_bytes);
  c.all_to_all.compute_slowdown = e.compute_slowdown;
  const double hidden_tp_s = sum([](const LayerTimes& t) { return t.tp_b_hidden_s; });
  if (hidden_tp_s > 0) c.full_backward_s = c.b_s + c.w_s - hidden_tp_s;
}

// The stage's memory: a micro-batch's activations and weight-gradient inputs, the static
// weights and optimizer state, and its output.
void set_stage_memory(StageCost& c, const StageInputs& in, int st, const StageParameters& p) {
  const bool last = st == in.num_stages - 1;
  const StageLayerCounts counts = stage_layer_kinds(in, st);
  const ModelSpec& model = in.model;
  const ParallelConfig& parallel = in.parallel;
  double held = sum_over_layers(in, counts, [](const LayerKindCosts& k) { return k.memory.held_bytes; });
  double stash = sum_over_layers(in, counts, [](const LayerKindCosts& k) { return k.memory.weight_stash_bytes; });
  if (last) {
    // fp32 logits for the loss and the head's input, once more for each MTP layer, whose
    // projection also keeps its input (2h) and its norms' (2 x h).
    const double passes = 1.0 + counts.mtp;
    held += passes * 4.0 * in.s * in.b * in.vocab_on_rank;
    stash += passes * 2.0 * in.s * in.b * in.h;
    const int split = in.parallel.sequence_parallel ? in.parallel.tensor_parallel : 1;
    held += counts.mtp * 2.0 * 4.0 * in.s * in.b * in.h / split;
  }
  c.f_mem_bytes = memory_figure_bytes(held, "a stage's activations of one micro-batch", model, parallel);
  c.w_mem_bytes = -memory_figure_bytes(stash, "a stage's weight-gradient inputs of one micro-batch", model, parallel);
  c.b_mem_bytes = -c.f_mem_bytes - c.w_mem_bytes;

  // 16-bit weights and gradients, plus fp32 master weights, momentum and variance (and fp32
  // gradient accumulation): 16 bytes per parameter, sharded by the distributed optimizer.
  // Under FP8 Transformer Engine keeps an FP8 copy of each linear weight and of its transpose
  // beside the 16-bit one; with --fp8-param-gather those two replace it. Recomputation rebuilds
  // one layer at a time, charged throughout (a stage of only the embedding or head rebuilds none).
  const double fp8_copy_bytes = in.fp8 && !parallel.fp8_param_gather ? 2.0 * static_cast<double>(p.matrix) : 0.0;
  std::int64_t rebuilt_bytes = 0;
  for (std::size_t k = 0; k < in.kinds.size(); ++k)
    if (counts.of[k] > 0) rebuilt_bytes = std::max(rebuilt_bytes, in.kinds[k].memory.rebuilt_bytes);
  c.static_bytes = memory_figure_bytes(static_cast<double>(p.all) * (4.0 + in.optimizer_bytes_per_parameter) +
                                           static_cast<double>(p.experts) * (4.0 + 16.0 / in.expert_shards) +
                                           fp8_copy_bytes + static_cast<double>(rebuilt_bytes),
                                       "a stage's weights and optimizer state", model, parallel);
  c.activation_bytes = memory_figure_bytes(in.hidden_state_bytes, "a stage's output", model, parallel);
}

// How many buckets Megatron's DDP cuts a stage's parameters into, for the gradients' reduction
// and the parameters' all-gather alike. --ddp-bucket-size's buckets only on the first pipeline
// rank's first chunk: Megatron's DDP turns bucketing off on later pipeline ranks ("not on the
// critical path") and on later chunks, and on every chunk with
// --overlap-param-gather-with-optimizer-step (distributed_data_parallel.py, training's
// get_model). Without a size: one bucket per layer on every stage.
std::int64_t stage_buckets(const StageInputs& in, int st, const StageParameters& p) {
  const ParallelConfig& parallel = in.parallel;
  if (parallel.bucket_parameters <= 0) return std::max(in.layers[st], 1);
  if (st != 0 || parallel.overlap_param_gather_with_optimizer_step) return 1;
  return std::max<std::int64_t>(1, (p.all + parallel.bucket_parameters - 1) / parallel.bucket_parameters);
}

// The nodes a run spans: all its GPUs (pipeline x tensor x context x data parallel), by node.
std::int64_t run_nodes(const Topology& topology, const ParallelConfig& parallel) {
  const std::int64_t gpus = static_cast<std::int64_t>(parallel.pipeline) * parallel.tensor_parallel *
                            parallel.context_parallel * parallel.data_parallel;
  const std::int64_t per_node = std::max(topology.gpus_per_node, 1);
  return (gpus + per_node - 1) / per_node;
}

// The distributed optimizer's all-gather of a stage's updated parameters, all of its buckets.
double parameter_gather_s(const StageInputs& in, const StageParameters& p) {
  const ParallelConfig& parallel = in.parallel;
  const double parameter_bytes =
      parallel.fp8_param_gather ? static_cast<double>(p.matrix - p.experts) + 2.0 * (p.all - (p.matrix - p.experts))
                                : 2.0 * static_cast<double>(p.all);
  double gather_s = data_parallel_all_gather_s(static_cast<std::int64_t>(parameter_bytes), in.topology);
  if (p.experts > 0)
    gather_s += data_parallel_all_gather_s((parallel.fp8_param_gather ? 1 : 2) * p.experts, in.expert_topology);
  return gather_s;
}

// A stage's parameter all-gather: all of it and the buckets it runs in.
struct ParameterGather {
  double whole_s = 0;
  std::int64_t buckets = 1;
};

// When a rank's chunk may first run forward, given the parameters' all-gathers before it: the
// gathers run one after another on the data-parallel group's stream, each chunk's in its
// buckets, and a forward cannot pass a bucket still in flight.
struct GatherChain {
  double stream_end_s = 0;  // when the gathers launched so far are done
  double delay_s = 0;       // how far the rank's forwards have slipped waiting for them

  // Launches a chunk's gather at `launch_s` (or when the stream frees) and adds to the delay how
  // much longer its first forward, due at `forward_start_s` and taking `forward_s`, must wait.
  void wait_for(const ParameterGather& gather, double launch_s, double forward_start_s, double forward_s) {
    const double gather_start_s = std::max(stream_end_s, launch_s);
    stream_end_s = gather_start_s + gather.whole_s;
    const double n = static_cast<double>(std::max<std::int64_t>(gather.buckets, 1));
    // The first bucket before the forward starts; the last before its last share of the layers.
    const double wait_s = std::max({0.0, gather_start_s + gather.whole_s / n - forward_start_s,
                                    stream_end_s + forward_s / n - (forward_start_s + forward_s)});
    delay_s += wait_s;
  }
};

// What of the parameters' all-gather the next iteration waits for, charged to the optimizer
// step that ends this one. Without --overlap-param-gather it follows the step. With it, it runs
// bucket by bucket beside the next forward, each bucket's gather launched as the forward takes
// the one before: rank r waits for its first bucket, or for as much of its whole gather as
// outlasts its first micro-batch's forward. Under interleaving (Megatron's align_param_gather,
// its default with a virtual pipeline) every rank launches its first two chunks' gathers at the
// step's start and chunk k's (k >= 2) at its forward of virtual micro-batch (k - 1) p - r
// (schedules.py, forward_step_helper_preprocess), all on one stream; chunk k's first forward is
// its rank's virtual micro-batch k p (Megatron's default group of p micro-batches a chunk; the
// warm-up runs forwards only that far). So rank r, whose first forward waits for the forwards of
// the r ranks before it, finds that much of its gathers done, and a later chunk waits where the
// gathers before it outlast the p forwards of each chunk before it: at a large data-parallel
// group and few layers a chunk they can. With --overlap-param-gather-with-optimizer-step the
// first chunk's gather (one bucket) leaves right after that chunk's optimizer step, beside the
// rank's other chunks' steps (Megatron's ChainedOptimizer: one optimizer for the first chunk,
// one for the rest).
void charge_parameter_gathers(CostModel& costs, const StageInputs& in, const std::vector<ParameterGather>& gathers) {
  const ParallelConfig& parallel = in.parallel;
  if (!parallel.overlap_param_gather) {
    for (std::size_t st = 0; st < gathers.size(); ++st) costs.stages[st].optimizer_s += gathers[st].whole_s;
    return;
  }
  const int p = parallel.pipeline;
  const int ranks = std::min(p, in.num_stages);
  const bool aligned = parallel.chunks > 1;
  double ramp_s = 0;  // the forwards before rank r's first
  for (int r = 0; r < ranks; ++r) {
    std::vector<int> stages;  // the rank's chunks, first to last
    for (int st = r; st < in.num_stages; st += p) stages.push_back(st);
    const int chunks = static_cast<int>(stages.size());
    // Where the rank's virtual micro-batch `id` starts, before any wait: its warm-up's forwards,
    // p of each chunk, up to its last chunk's first.
    std::vector<double> forward_start_s(static_cast<std::size_t>(chunks - 1) * p + 1, aligned ? ramp_s : 0.0);
    for (std::size_t id = 1; id < forward_start_s.size(); ++id)
      forward_start_s[id] = forward_start_s[id - 1] + costs.stages[stages[(id - 1) / p]].f_s;
    GatherChain chain;
    ParameterGather first = gathers[r];
    if (parallel.overlap_param_gather_with_optimizer_step) {
      double other_steps_s = 0;
      for (int k = 1; k < chunks; ++k) other_steps_s += costs.stages[stages[k]].optimizer_s;
      chain.stream_end_s = -other_steps_s;  // launched that long before the step's end
      first.buckets = 1;
    }
    chain.wait_for(first, chain.stream_end_s, forward_start_s[0], costs.stages[r].f_s);
    for (int k = 1; aligned && k < chunks; ++k) {
      const double launched_s = k < 2 ? 0.0 : forward_start_s[std::max(0, (k - 1) * p - r)] + chain.delay_s;
      chain.wait_for(gathers[stages[k]], launched_s, forward_start_s[static_cast<std::size_t>(k) * p] + chain.delay_s,
                     costs.stages[stages[k]].f_s);
    }
    costs.stages[r].optimizer_s += chain.delay_s;
    ramp_s += costs.stages[r].f_s;
  }
}

// The stage's gradient reductions and optimizer step.
void set_stage_reductions(StageCost& c, const StageInputs& in, int st, const StageParameters& p) {
  const bool first = st == 0;
  const bool last = st == in.num_stages - 1;
  const ParallelConfig& parallel = in.parallel;
  const Topology& topology = in.topology;
  // 16-bit gradients: all-reduced, or reduce-scattered by the distributed optimizer, which then
  // all-gathers the updated 16-bit parameters (FP8 ones under --fp8-param-gather).
  const std::int64_t gradient_bytes = p.all * 2;
  c.reduce_grads_s = parallel.zero1 ? data_parallel_reduce_scatter_s(gradient_bytes, topology)
                                    : data_parallel_all_reduce_s(gradient_bytes, topology);
  if (p.experts > 0)
    c.reduce_grads_s += parallel.zero1 ? data_parallel_reduce_scatter_s(p.experts * 2, in.expert_topology)
                                       : data_parallel_all_reduce_s(p.experts * 2, in.expert_topology);
  const std::int64_t bucket_count = stage_buckets(in, st, p);
  if (parallel.overlap_grad_reduce && c.reduce_grads_s > 0) {
    // A bucket's gradients are final as the backward leaves its layers; the first stage's
    // embedding only at the end of the pass, so its share runs after the backward.
    c.reduce_grads_buckets = static_cast<int>(std::min<std::int64_t>(bucket_count, 1 << 20));
    if (first) c.reduce_grads_last_s = c.reduce_grads_s * static_cast<double>(in.embedding_parameters) / p.all;
  }
  c.optimizer_s = (static_cast<double>(p.all) / in.shards + static_cast<double>(p.experts) / in.expert_shards) * 32.0 /
                  in.device.memory_bandwidth_bytes_per_s;
  // Delayed scaling casts each linear weight to FP8 (and transposes it) once an iteration.
  if (in.fp8 && !parallel.fp8_param_gather)
    c.optimizer_s += memory_bound_time_s(4.0 * static_cast<double>(p.matrix), in.device);
  // A tied embedding, or the one the MTP layers use on the last stage: its two copies' gradients
  // are summed between the first and the last stage.
  if ((in.model.tied_embeddings || in.mtp_layers > 0) && in.num_stages > 1 && (first || last))
    c.reduce_tied_s =
        ring_all_reduce_s(in.embedding_parameters * 2, 2, topology.link_between(0, parallel.pipeline - 1));
}

}  // namespace

// A module to recompute that the model does not have: MLA's up-projections on ordinary
// attention, an expert module on a dense model.
std::optional<std::string> recompute_modules_problem(const ModelSpec& model, const ParallelConfig& parallel) {
  if (parallel.recomputation != Recomputation::selective) return std::nullopt;
  if (parallel.recomputes(kRecomputeMlaUpProjection) && !model.multi_latent_attention())
    return fmt::format("--recompute-modules mla_up_proj: {} has no multi-latent attention (kv_lora_rank)", model.name);
  const std::uint8_t expert_modules = kRecomputeMoe | kRecomputeMoeActivation | kRecomputeSharedExperts;
  if ((parallel.recompute_modules & expert_modules) != 0 && !model.is_moe())
    return fmt::format("--recompute-modules {}: {} has no experts (num_experts)",
                       recompute_modules_text(parallel.recompute_modules & expert_modules), model.name);
  if (parallel.recomputes(kRecomputeSharedExperts) && model.shared_experts == 0)
    return fmt::format("--recompute-modules shared_experts: {} has no shared expert", model.name);
  return std::nullopt;
}

CostModel derive_costs(const ModelSpec& model, const DeviceSpec& device, const Topology& topology_in,
                       const ParallelConfig& parallel) {
  // Every node of the run meets the others each step: its compute runs at the slowest node's pace.
  DeviceSpec paced = device;
  if (device.per_shape())
    paced.kernels.sustained_fraction /= slowest_node_slowdown(device.kernels, run_nodes(topology_in, parallel));
  const StageInputs in = stage_inputs(model, paced, topology_in, parallel);
  CostModel costs;
  costs.transfer_model = TransferModel::Links;
  costs.micro_batch_size = parallel.micro_batch_size;
  costs.data_parallel = parallel.data_parallel;
  std::vector<ParameterGather> gathers;
  for (int st = 0; st < in.num_stages; ++st) {
    const StageParameters p = stage_parameters(in, st);
    StageCost c;
    set_stage_times(c, in, st);
    set_stage_memory(c, in, st, p);
    set_stage_reductions(c, in, st, p);
    costs.stages.push_back(c);
    if (in.parallel.zero1) gathers.push_back({parameter_gather_s(in, p), stage_buckets(in, st, p)});
  }
  if (in.parallel.zero1) charge_parameter_gathers(costs, in, gathers);
  return costs;
}

StageCost recompute_measured_stage(StageCost c, int stage_layers, int run_layers) {
  if (stage_layers < 1 || run_layers < 1)
    throw UsageError("recomputation in runs of " + std::to_string(run_layers) + " layer(s) of a stage of " +
                     std::to_string(stage_layers) + ": both must be at least 1");
  if (c.activation_bytes <= 0)
    throw UsageError(
        "--recompute: the profile has no stage-to-stage transfer size to take a layer's input from "
        "(a profile of one stage): calibrate on two pipeline ranks or more");
  const int run = std::min(run_layers, stage_layers);
  const std::int64_t runs = (stage_layers + run - 1) / run;
  const std::int64_t measured_held = c.f_mem_bytes;
  // Never more than without recomputation: a run of every layer still keeps its input.
  const std::int64_t kept = std::min(measured_held, (runs + 1) * c.activation_bytes);
  const std::int64_t stash = -c.w_mem_bytes;  // what B keeps for W, as measured
  c.f_mem_bytes = kept;
  c.b_mem_bytes = -kept + stash;
  // One run rebuilt at a time in the backward, charged throughout as derive_costs does.
  c.static_bytes += measured_held * run / stage_layers;
  // The backward first runs its runs' forwards again.
  c.b_s += c.f_s;
  if (c.full_backward_s > 0) c.full_backward_s += c.f_s;
  return c;
}

}  // namespace pipescope::sim
