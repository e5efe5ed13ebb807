#include "pipescope/sim/expert_layer.hpp"

#include <algorithm>

#include "layer_shape.hpp"
#include "pipescope/sim/layer_costs.hpp"

namespace pipescope::sim {

namespace {

// The rank's tokens entering the router: Megatron requires sequence parallelism with MoE and
// T > 1, so each tensor-parallel rank routes its own s b / (C T).
double routed_tokens_on_rank(const ModelSpec& model, const ParallelConfig& parallel) {
  const detail::LayerShape l(model, parallel);
  return l.tokens / l.t;
}

double local_experts(const ModelSpec& model, const ParallelConfig& parallel) {
  return static_cast<double>(model.num_experts) / std::max(parallel.expert_parallel, 1);
}

// Token copies leaving (and coming back to) the rank: top_k per token, the busiest rank's share.
double dispatched_rows(const ModelSpec& model, const ParallelConfig& parallel) {
  return routed_tokens_on_rank(model, parallel) * model.top_k * expert_load_factor(model, parallel);
}

// The busiest EP rank's tokens over the mean from a measured histogram, each expert first capped
// at capacity (capacity factor x the mean expert's tokens) when the model drops tokens.
double measured_load_factor(const ModelSpec& model, const ParallelConfig& parallel) {
  const std::vector<double>& tokens = parallel.expert_tokens;
  double total = 0;
  for (double t : tokens) total += t;
  if (total <= 0) return 1;
  const double capacity =
      model.capacity_factor > 0 ? model.capacity_factor * total / static_cast<double>(tokens.size()) : total;
  const int ep = std::max(parallel.expert_parallel, 1);
  const std::size_t per_rank = tokens.size() / static_cast<std::size_t>(ep);
  double busiest = 0;
  for (int rank = 0; rank < ep; ++rank) {
    double sum = 0;
    for (std::size_t e = rank * per_rank; e < (rank + 1) * per_rank; ++e) sum += std::min(tokens[e], capacity);
    busiest = std::max(busiest, sum);
  }
  return std::max(1.0, busiest / (total / ep));
}

}  // namespace

double expert_load_factor(const ModelSpec& model, const ParallelConfig& parallel) {
  if (!parallel.expert_tokens.empty()) return measured_load_factor(model, parallel);
  const double imbalance = std::max(parallel.moe_imbalance, 1.0);
  return model.capacity_factor > 0 ? std::min(imbalance, std::max(model.capacity_factor, 1.0)) : imbalance;
}

double expert_rows_on_rank(const ModelSpec& model, const ParallelConfig& parallel) {
  return dispatched_rows(model, parallel) * parallel.expert_tp();
}

double all_to_all_s(double bytes_per_rank, int group, int members_per_node, const ExpertLinks& links) {
  if (group <= 1 || bytes_per_rank <= 0) return 0;
  const int on_node = std::clamp(members_per_node, 1, group);
  const double share = bytes_per_rank / group;
  const double to_node_s = share * (on_node - 1) / links.intra_node.bandwidth_bytes_per_s;
  const double off_node_bytes = share * (group - on_node);
  const double to_network_s = off_node_bytes / links.inter_node.bandwidth_bytes_per_s;
  const double latency_s = off_node_bytes > 0 ? links.inter_node.latency_s : links.intra_node.latency_s;
  return std::max(to_node_s, to_network_s) + latency_s;
}

ExpertLinks achieved_all_to_all_links(const ExpertLinks& links) {
  ExpertLinks out = links;
  out.intra_node.bandwidth_bytes_per_s *= links.achieved.nvlink_fraction;
  out.inter_node.bandwidth_bytes_per_s *= links.achieved.network_fraction;
  return out;
}

double compute_slowdown_beside_all_to_all(const DeviceSpec& device, const ExpertLinks& links, int group,
                                          int members_per_node) {
  if (group <= 1) return 1;
  const bool across_nodes = group > std::max(members_per_node, 1);
  const double taken = across_nodes ? links.achieved.sms_across_nodes : links.achieved.sms_in_node;
  const double sms = device.kernels.multiprocessors;
  if (taken <= 0 || sms <= taken) return 1;
  return sms / (sms - taken);
}

ExpertTimes expert_times(const ModelSpec& model, const DeviceSpec& device, const ExpertLinks& links,
                         const ParallelConfig& parallel) {
  ExpertTimes out;
  if (!model.is_moe()) return out;
  const detail::LayerShape l(model, parallel);
  const double etp = parallel.expert_tp();
  const double experts_here = local_experts(model, parallel);
  const double rows = expert_rows_on_rank(model, parallel);
  const double rows_per_expert = rows / experts_here;
  const double width = model.moe_ffn_or_default() / etp;
  const double first_width = (l.gated ? 2 : 1) * width;
  const GemmPrecision precision = l.fp8 ? GemmPrecision::fp8 : GemmPrecision::bf16;
  auto grouped = [&](double m, double n, double k) { return experts_here * gemm_time_s({m, n, k}, device, precision); };
  out.f_s = grouped(rows_per_expert, first_width, l.h) + grouped(rows_per_expert, l.h, width);
  out.b_s = grouped(rows_per_expert, l.h, first_width) + grouped(rows_per_expert, width, l.h);
  out.w_s = grouped(l.h, first_width, rows_per_expert) + grouped(width, l.h, rows_per_expert);

  // The router: a (tokens, experts, h) product in BF16, its softmax and top-k in fp32.
  const double tokens = routed_tokens_on_rank(model, parallel);
  const double experts = model.num_experts;
  out.f_s += gemm_time_s({tokens, experts, l.h}, device) + memory_bound_time_s(12.0 * tokens * experts, device);
  out.b_s += gemm_time_s({tokens, l.h, experts}, device) + memory_bound_time_s(24.0 * tokens * experts, device);
  out.w_s += gemm_time_s({l.h, experts, tokens}, device);

  // Element-wise: the permutation before the dispatch and the un-permutation with the weighted
  // sum after the combine (each reads and writes the token copies, 4 bytes an element), the
  // experts' activation (SwiGLU 6, GELU 4 bytes an element of their hidden); the backward twice.
  const double copies = dispatched_rows(model, parallel);
  const double elementwise_bytes = 8.0 * copies * l.h + (l.gated ? 6 : 4) * rows * width;
  out.f_s += memory_bound_time_s(elementwise_bytes, device);
  out.b_s += memory_bound_time_s(2 * elementwise_bytes, device);
  // Under FP8 Transformer Engine's grouped products quantize what no kernel before them wrote in
  // FP8 (GroupedLinear's split_quantize): in the forward the experts' inputs (unless dispatched
  // in FP8) and the activation's output, in the backward each product's output gradient; each
  // cast reads 16 bits and writes FP8 with its transpose, 4 bytes an element, as the dense
  // layers' casts (layer_costs.cpp).
  if (l.fp8) {
    out.f_s += memory_bound_time_s(4.0 * rows * ((parallel.fp8_dispatch ? 0.0 : l.h) + width), device);
    out.b_s += memory_bound_time_s(4.0 * rows * (l.h + first_width), device);
  }

  // Dispatch (FP8 when asked) and combine (BF16) over the EP group, members ETP apart; their
  // gradients travel back in BF16. With ETP > 1 the dispatched tokens are all-gathered over the
  // expert-tensor-parallel group and the experts' outputs reduce-scattered, on NVLink.
  const int ep = std::max(parallel.expert_parallel, 1);
  const int members_per_node = std::max(1, links.gpus_per_node / static_cast<int>(etp));
  const double bf16_bytes = 2.0 * copies * l.h;
  const double dispatch_bytes = (parallel.fp8_dispatch ? 1.0 : 2.0) * copies * l.h;
  const double etp_s = etp > 1 ? 2 * ring_all_gather_s(bf16_bytes * etp, static_cast<int>(etp), links.intra_node) : 0.0;
  // Expert TP's all-gather follows the dispatch and its reduce-scatter precedes the combine:
  // each counts with its all-to-all.
  // The all-to-alls at NCCL's achieved rates; their kernel slows the compute beside them.
  const ExpertLinks wire = achieved_all_to_all_links(links);
  const double bf16_all_to_all_s = all_to_all_s(bf16_bytes, ep, members_per_node, wire);
  out.dispatch_f_s = all_to_all_s(dispatch_bytes, ep, members_per_node, wire) + etp_s / 2;
  out.combine_f_s = bf16_all_to_all_s + etp_s / 2;
  out.dispatch_b_s = bf16_all_to_all_s + etp_s / 2;
  out.combine_b_s = bf16_all_to_all_s + etp_s / 2;
  out.dispatch_bytes = ep > 1 ? dispatch_bytes : 0.0;
  out.combine_bytes = ep > 1 ? bf16_bytes : 0.0;
  out.compute_slowdown = compute_slowdown_beside_all_to_all(device, links, ep, members_per_node);
  out.all_to_all_f_s = out.dispatch_f_s + out.combine_f_s;
  out.all_to_all_b_s = out.dispatch_b_s + out.combine_b_s;
  out.f_s += out.all_to_all_f_s;
  out.b_s += out.all_to_all_b_s;
  return out;
}

std::int64_t expert_activation_bytes(const ModelSpec& model, const ParallelConfig& parallel) {
  if (!model.is_moe()) return 0;
  const detail::LayerShape l(model, parallel);
  const double rows = expert_rows_on_rank(model, parallel);
  const double width = model.moe_ffn_or_default() / static_cast<double>(parallel.expert_tp());
  const double fp8_saved = l.fp8 ? 1.0 : 0.0;
  // The router's fp32 probabilities; the experts' input (FP8 under FP8) and hidden activations
  // (SwiGLU: the two first outputs and their product, 6 bytes an element; the second product's
  // input in FP8 saves one); the experts' outputs, which the combine's backward needs.
  const double router = 4.0 * routed_tokens_on_rank(model, parallel) * model.num_experts;
  const double inputs = (2 - fp8_saved) * rows * l.h;
  const double hidden = ((l.gated ? 6 : 4) - fp8_saved) * rows * width;
  const double outputs = 2.0 * dispatched_rows(model, parallel) * l.h;
  return static_cast<std::int64_t>(router + inputs + hidden + outputs);
}

ExpertActivation expert_activation(const ModelSpec& model, const ParallelConfig& parallel) {
  if (!model.is_moe()) return {};
  const detail::LayerShape l(model, parallel);
  const double elements =
      expert_rows_on_rank(model, parallel) * model.moe_ffn_or_default() / static_cast<double>(parallel.expert_tp());
  ExpertActivation out;
  out.output_bytes = (l.fp8 ? 1.0 : 2.0) * elements;
  out.moved_bytes = (l.gated ? 6.0 : 4.0) * elements;
  return out;
}

std::int64_t expert_parameters_on_rank(const ModelSpec& model, const ParallelConfig& parallel) {
  if (!model.is_moe()) return 0;
  const std::int64_t experts_here = model.num_experts / std::max(parallel.expert_parallel, 1);
  return experts_here * model.expert_parameters() / std::max(parallel.expert_tp(), 1);
}

}  // namespace pipescope::sim
