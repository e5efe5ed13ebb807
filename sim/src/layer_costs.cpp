#include "pipescope/sim/layer_costs.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "layer_shape.hpp"
#include "pipescope/core/errors.hpp"

namespace pipescope::sim {

using detail::LayerShape;
using detail::Linear;
using detail::linears_on_rank;

namespace {

// Bytes the element-wise kernels of one layer's forward read and write (the backward moves
// about twice as many). Layer norms read and write the hidden state (2 x 4 sbh); each residual
// add reads two and writes one (6 sbh), plus its dropout mask; the MLP's activation reads its
// input and writes its output (GELU 4 sbf, SwiGLU 6 sbf); the attention core's softmax reads
// and writes the scores (4 as^2b) and its dropout reads, writes and masks them (5 as^2b);
// FlashAttention keeps the scores on chip. s is the rank's s/C queries under context parallelism.
double replicated_elementwise_bytes(const LayerShape& l) { return (20 + (l.dropout ? 2 : 0)) * l.tokens * l.h; }
double softmax_bytes(const LayerShape& l) {
  if (l.flash) return 0;
  return (l.dropout ? 9 : 4) * l.heads * l.local_seq() * l.s * l.b / l.t;
}

// Transformer Engine's FP8 casts that no neighbouring kernel does: in the forward the attention
// output's (the layer norms and the MLP's activation write FP8 themselves), each read in 16 bits
// and written in FP8 with its transpose (4 bytes an element); in the backward every product's
// output gradient, cast and transposed likewise. The amax history and scale updates (a few KB
// per tensor) are left out.
double fp8_forward_cast_bytes(const LayerShape& l) { return l.fp8 ? 4 * l.tokens * l.h / l.t : 0; }
double fp8_backward_cast_bytes(const LayerShape& l) {
  if (!l.fp8) return 0;
  double outputs = 0;
  for (const Linear& linear : linears_on_rank(l)) outputs += linear.outputs;
  return 4 * l.tokens * outputs;
}

// What the two layer norms' forward reads and writes (the hidden state in, their outputs out):
// what --recompute-modules layernorm runs again.
double norm_forward_bytes(const LayerShape& l) { return 2 * 4 * l.tokens * l.h / l.replicated_split; }

// MLA's up-projections forward (the queries' from q_lora_rank, the keys' and values' from
// kv_lora_rank), column-parallel: what --recompute-modules mla_up_proj runs again.
double mla_up_projection_forward_s(const ModelSpec& model, const LayerShape& l, const DeviceSpec& device) {
  const GemmPrecision precision = l.fp8 ? GemmPrecision::fp8 : GemmPrecision::bf16;
  const double heads = l.heads / l.t;
  double seconds =
      gemm_time_s({l.tokens, heads * (model.qk_head_dim + model.v_head_dim), static_cast<double>(model.kv_lora_rank)},
                  device, precision);
  if (model.q_lora_rank > 0)
    seconds += gemm_time_s(
        {l.tokens, heads * (model.qk_head_dim + model.qk_pos_emb_head_dim), static_cast<double>(model.q_lora_rank)},
        device, precision);
  return seconds;
}

double elementwise_forward_bytes(const LayerShape& l) {
  const double activation = (l.gated ? 6 : 4) * l.tokens * l.ffn / l.t;
  // Gated attention: the gate's sigmoid times the attention's output (both read, the product written).
  const double output_gate = 6 * l.tokens * l.output_gate_width / l.t;
  return replicated_elementwise_bytes(l) / l.replicated_split + activation + softmax_bytes(l) + output_gate;
}

}  // namespace

LayerTimes layer_times(const ModelSpec& model, const DeviceSpec& device, const LinkSpec& tensor_parallel_link,
                       const ParallelConfig& parallel) {
  return layer_times(model, device, LayerLinks{tensor_parallel_link, {tensor_parallel_link, tensor_parallel_link}},
                     parallel);
}

LayerTimes layer_times(const ModelSpec& model, const DeviceSpec& device, const LayerLinks& links,
                       const ParallelConfig& parallel) {
  const LayerShape l(model, parallel);
  LayerTimes out;
  const detail::LinearTimes products = detail::linear_times(l, device);
  const UserbufferSlowdown slowdown =
      parallel.tp_comm_overlap && parallel.tensor_parallel > 1 ? userbuffer_slowdown(device) : UserbufferSlowdown{};
  for (std::size_t i = 0; i < products.forward_s.size(); ++i) {
    out.f_s += products.forward_s[i] * slowdown.forward[i];
    out.b_s += products.input_gradient_s[i] * slowdown.input_gradient[i];
    out.w_s += products.weight_gradient_s[i] * slowdown.weight_gradient[i];
  }
  const double core_forward_s = attention_core_forward_s(model, device, parallel);
  const double forward_elementwise_bytes = elementwise_forward_bytes(l);
  const ContextParallelExchange exchange = context_parallel_exchange(model, device, links.context_parallel, parallel);
  out.cp_f_s = exchange.forward_s;
  out.cp_b_s = exchange.backward_s;
  out.f_s +=
      core_forward_s + out.cp_f_s + memory_bound_time_s(forward_elementwise_bytes + fp8_forward_cast_bytes(l), device);
  out.b_s += attention_core_backward_s(model, device, parallel) + out.cp_b_s +
             memory_bound_time_s(2 * forward_elementwise_bytes + fp8_backward_cast_bytes(l), device);

  const TensorParallelPass forward = tensor_parallel_forward(model, device, links.tensor_parallel, parallel);
  const TensorParallelPass backward = tensor_parallel_backward(model, device, links.tensor_parallel, parallel);
  out.tp_f_s = forward.exposed_s;
  out.tp_b_s = backward.exposed_s;
  out.tp_b_hidden_s = backward.hidden_behind_weight_gradients_s;

  switch (parallel.recomputation) {
    case Recomputation::none: break;
    case Recomputation::selective:
      // FlashAttention stores no attention core to drop: its backward already rebuilds it.
      if (parallel.recomputes(kRecomputeCoreAttention) && !l.flash)
        out.recompute_s += core_forward_s + memory_bound_time_s(softmax_bytes(l), device);
      if (parallel.recomputes(kRecomputeLayernorm))
        out.recompute_s += memory_bound_time_s(norm_forward_bytes(l), device);
      if (parallel.recomputes(kRecomputeMlaUpProjection) && model.multi_latent_attention())
        out.recompute_s += mla_up_projection_forward_s(model, l, device);
      // The MLP's products and activation (its tensor-parallel collectives are left out).
      if (parallel.recomputes(kRecomputeMlp) && l.ffn > 0)
        out.recompute_s += products.forward_s[2] * slowdown.forward[2] + products.forward_s[3] * slowdown.forward[3] +
                           memory_bound_time_s((l.gated ? 6 : 4) * l.tokens * l.ffn / l.t, device);
      break;
    case Recomputation::full:
      out.recompute_s = out.f_s;
      out.recompute_tp_s = out.tp_f_s;
      break;
  }
  return out;
}

HeadTimes head_times(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel) {
  const LayerShape l(model, parallel);
  const double vocab_on_rank = static_cast<double>(parallel.padded_vocab(model.vocab)) / l.t;
  // The loss's softmax in fp32: reads the 16-bit logits, writes fp32; its backward the reverse.
  const double loss_bytes = 6.0 * l.tokens * vocab_on_rank;
  HeadTimes out;
  out.f_s = gemm_time_s({l.tokens, vocab_on_rank, l.h}, device) + memory_bound_time_s(loss_bytes, device);
  out.b_s = gemm_time_s({l.tokens, l.h, vocab_on_rank}, device) + memory_bound_time_s(loss_bytes, device);
  out.w_s = gemm_time_s({l.h, vocab_on_rank, l.tokens}, device);
  return out;
}

HeadTimes mtp_projection_times(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel) {
  const LayerShape l(model, parallel);
  const double out_on_rank = l.h / l.t;
  // Two RMS norms (read and write h a token each, twice in the backward) and the concatenation.
  const double norm_bytes = 2.0 * 2.0 * l.tokens * l.h * 2.0 / l.replicated_split;
  HeadTimes out;
  out.f_s = gemm_time_s({l.tokens, out_on_rank, 2 * l.h}, device) + memory_bound_time_s(norm_bytes, device);
  out.b_s = gemm_time_s({l.tokens, 2 * l.h, out_on_rank}, device) + memory_bound_time_s(2 * norm_bytes, device);
  out.w_s = gemm_time_s({2 * l.h, out_on_rank, l.tokens}, device);
  return out;
}

std::int64_t memory_figure_bytes(double bytes, std::string_view figure, const ModelSpec& model,
                                 const ParallelConfig& parallel) {
  if (bytes >= 0 && bytes <= 0x1p60) return static_cast<std::int64_t>(bytes);
  throw UsageError(
      fmt::format("--model {} with --micro-batch-size {} (seq {}, hidden {}, {} heads, tensor-parallel {}): {} "
                  "come to {:.3g} bytes, beyond the limit of 2^60 bytes (1 EiB)",
                  model.name, parallel.micro_batch_size, model.seq, model.hidden, model.heads, parallel.tensor_parallel,
                  figure, bytes));
}

LayerMemory layer_memory(const ModelSpec& model, const ParallelConfig& parallel) {
  constexpr std::string_view kActivations = "one layer's activations";
  const LayerShape l(model, parallel);
  // Korthikanti et al. 2022, section 4.1, per term, for the rank's tokens. Replicated by tensor
  // parallelism: the two layer norms' inputs (4 sbh), the inputs of QKV and of the MLP (2 sbh
  // each), the two dropout masks (sbh each). Split: Q and K (2 sbh + 2 sb kv), V (2 sb kv), the
  // attention output's input (2 sbh), the MLP's hidden activations (GELU: input and output, 4 sbf;
  // SwiGLU: the two first matrices' outputs and their product, 6 sbf). The attention core: the
  // softmax output (2 as^2b) and, with dropout, its mask and output (3 as^2b); FlashAttention
  // keeps only the fp32 log-sum-exp of each query row (4 asb), which selective recomputation has
  // no reason to drop. Under FP8 Transformer Engine keeps the four products' inputs in FP8: one
  // byte instead of two for QKV's and the MLP's (sbh each), the attention output's (sbh) and the
  // MLP's second product's (sbf).
  const double fp8_saved = l.fp8 ? 1.0 : 0.0;
  const double replicated = (8 + (l.dropout ? 2 : 0) - 2 * fp8_saved) * l.tokens * l.h;
  // Gated attention keeps its gate (2 x the queries' width) for the product's backward.
  const double split = (4 * l.attention_width + 4 * l.kv_width + (l.gated ? 6 : 4) * l.ffn + 2 * l.output_gate_width -
                        fp8_saved * (l.attention_width + l.ffn)) *
                       l.tokens;
  const double core = l.flash ? 4 * l.heads * l.tokens : (l.dropout ? 5 : 2) * l.heads * l.local_seq() * l.s * l.b;
  const double without_recomputation = replicated / l.replicated_split + (split + core) / l.t;
  LayerMemory out;
  out.weight_stash_bytes =
      memory_figure_bytes(32.0 * l.tokens * l.h / l.t, "one layer's weight-gradient inputs", model, parallel);
  switch (parallel.recomputation) {
    case Recomputation::none:
      out.held_bytes = memory_figure_bytes(without_recomputation, kActivations, model, parallel);
      break;
    case Recomputation::selective: {
      // What each module recomputed drops from the forward's keep and rebuilds in the backward:
      // the attention core (not kept by a fused kernel), the norms' outputs (QKV's and the MLP's
      // inputs, FP8 copies under FP8), MLA's up-projected queries, keys and values (its two
      // latents kept instead), the MLP's hidden activations.
      double dropped = 0, kept = 0;
      if (parallel.recomputes(kRecomputeCoreAttention) && !l.flash) dropped += core / l.t;
      if (parallel.recomputes(kRecomputeLayernorm))
        dropped += (4 - 2 * fp8_saved) * l.tokens * l.h / l.replicated_split;
      if (parallel.recomputes(kRecomputeMlaUpProjection) && model.multi_latent_attention()) {
        dropped += (2 * l.attention_width + 4 * l.kv_width) * l.tokens / l.t;
        kept += 2.0 * (model.q_lora_rank + model.kv_lora_rank) * l.tokens / l.replicated_split;
      }
      if (parallel.recomputes(kRecomputeMlp)) dropped += ((l.gated ? 6 : 4) - fp8_saved) * l.ffn * l.tokens / l.t;
      out.held_bytes = memory_figure_bytes(without_recomputation - dropped + kept, kActivations, model, parallel);
      out.rebuilt_bytes = memory_figure_bytes(dropped, kActivations, model, parallel);
      break;
    }
    case Recomputation::full:
      out.held_bytes = memory_figure_bytes(2.0 * l.tokens * l.h / l.replicated_split, kActivations, model, parallel);
      out.rebuilt_bytes = memory_figure_bytes(without_recomputation, kActivations, model, parallel);
      break;
  }
  return out;
}

std::int64_t layer_matrix_parameters_on_rank(const ModelSpec& model, int tensor_parallel) {
  return model.layer_matrix_parameters() / tensor_parallel;
}

std::int64_t layer_parameters_on_rank(const ModelSpec& model, int tensor_parallel) {
  const std::int64_t h = model.hidden;
  const std::int64_t norms = 4 * h;
  // GPT's biases: QKV's and the MLP's first (column-parallel, split), the attention output's
  // and the MLP's second (row-parallel, whole on every rank). Gated models have none.
  const bool biases = model.has_biases();
  const std::int64_t split_biases = biases ? h + 2 * model.kv_width() + model.ffn_or_default() : 0;
  const std::int64_t whole_biases = biases ? 2 * h : 0;
  return (model.layer_matrix_parameters() + split_biases) / tensor_parallel + norms + whole_biases;
}

}  // namespace pipescope::sim
