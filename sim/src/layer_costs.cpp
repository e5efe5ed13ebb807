#include "pipescope/sim/layer_costs.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"

namespace pipescope::sim {

namespace {

// The figures of one layer on one tensor-parallel rank that the times and the memory share.
struct LayerShape {
  double tokens = 0;  // s x b
  double s = 0, b = 0, h = 0, heads = 0, kv_width = 0, ffn = 0;
  double t = 1;                 // tensor-parallel size
  double replicated_split = 1;  // what tensor parallelism replicates is split by T with SP
  bool gated = false, dropout = false, flash = false;

  LayerShape(const ModelSpec& model, const ParallelConfig& parallel)
      : tokens(static_cast<double>(model.seq) * parallel.micro_batch_size),
        s(model.seq),
        b(parallel.micro_batch_size),
        h(model.hidden),
        heads(model.heads),
        kv_width(static_cast<double>(model.kv_width())),
        ffn(model.ffn_or_default()),
        t(parallel.tensor_parallel),
        replicated_split(parallel.sequence_parallel ? parallel.tensor_parallel : 1),
        gated(model.gated_mlp),
        dropout(model.has_dropout()),
        flash(model.flash_attention) {}
  double head_dim() const { return h / heads; }
  double heads_on_rank() const { return heads / t; }
};

// A linear layer of the rank: `inputs` x `outputs` of its weight matrix.
struct Linear {
  double inputs, outputs;
};

// Megatron's split: QKV and the MLP's first matrix (two, gated) are column-parallel (outputs
// divided by T), the attention output and the MLP's second matrix row-parallel (inputs divided).
std::array<Linear, 4> linears_on_rank(const LayerShape& l) {
  return {{{l.h, (l.h + 2 * l.kv_width) / l.t},
           {l.h / l.t, l.h},
           {l.h, (l.gated ? 2 : 1) * l.ffn / l.t},
           {l.ffn / l.t, l.h}}};
}

// Bytes the element-wise kernels of one layer's forward read and write (the backward moves
// about twice as many). Layer norms read and write the hidden state (2 x 4 sbh); each residual
// add reads two and writes one (6 sbh), plus its dropout mask; the MLP's activation reads its
// input and writes its output (GELU 4 sbf, SwiGLU 6 sbf); the attention core's softmax reads
// and writes the scores (4 as^2b) and its dropout reads, writes and masks them (5 as^2b);
// FlashAttention keeps the scores on chip.
double replicated_elementwise_bytes(const LayerShape& l) { return (20 + (l.dropout ? 2 : 0)) * l.tokens * l.h; }
double softmax_bytes(const LayerShape& l) {
  if (l.flash) return 0;
  return (l.dropout ? 9 : 4) * l.heads * l.s * l.s * l.b / l.t;
}
double elementwise_forward_bytes(const LayerShape& l) {
  const double activation = (l.gated ? 6 : 4) * l.tokens * l.ffn / l.t;
  return replicated_elementwise_bytes(l) / l.replicated_split + activation + softmax_bytes(l);
}

// The attention core's forward on the rank: scores Q K^T and their product with V, per head.
double attention_core_forward_s(const LayerShape& l, const DeviceSpec& device) {
  const double batch = l.b * l.heads_on_rank();
  return gemm_time_s({l.s, l.s, l.head_dim(), batch}, device) + gemm_time_s({l.s, l.head_dim(), l.s, batch}, device);
}

// Its backward: dP = dO V^T (s x s), then dV = P^T dO, dQ = dS K and dK = dS^T Q (s x d each);
// FlashAttention first computes the scores Q K^T again.
double attention_core_backward_s(const LayerShape& l, const DeviceSpec& device) {
  const double batch = l.b * l.heads_on_rank();
  const double score_products = l.flash ? 2 : 1;
  return score_products * gemm_time_s({l.s, l.s, l.head_dim(), batch}, device) +
         3 * gemm_time_s({l.s, l.head_dim(), l.s, batch}, device);
}

}  // namespace

double ring_all_gather_s(double bytes, int group_size, const LinkSpec& link) {
  if (group_size <= 1 || bytes <= 0) return 0.0;
  return (group_size - 1) * (link.latency_s + bytes / group_size / link.bandwidth_bytes_per_s);
}

LayerTimes layer_times(const ModelSpec& model, const DeviceSpec& device, const LinkSpec& tensor_parallel_link,
                       const ParallelConfig& parallel) {
  const LayerShape l(model, parallel);
  LayerTimes out;
  const std::array<Linear, 4> linears = linears_on_rank(l);
  std::array<double, 4> weight_gradient_s{};
  for (std::size_t i = 0; i < linears.size(); ++i) {
    const Linear& linear = linears[i];
    out.f_s += gemm_time_s({l.tokens, linear.outputs, linear.inputs}, device);
    out.b_s += gemm_time_s({l.tokens, linear.inputs, linear.outputs}, device);
    weight_gradient_s[i] = gemm_time_s({linear.inputs, linear.outputs, l.tokens}, device);
    out.w_s += weight_gradient_s[i];
  }
  const double core_forward_s = attention_core_forward_s(l, device);
  const double forward_elementwise_bytes = elementwise_forward_bytes(l);
  out.f_s += core_forward_s + memory_bound_time_s(forward_elementwise_bytes, device);
  out.b_s += attention_core_backward_s(l, device) + memory_bound_time_s(2 * forward_elementwise_bytes, device);

  // An all-reduce of the hidden state after the attention and after the MLP, in each pass; with
  // sequence parallelism an all-gather before each and a reduce-scatter after: the same bytes.
  const double hidden_state_bytes = 2.0 * l.tokens * l.h;
  const double per_pass_s = 4 * ring_all_gather_s(hidden_state_bytes, parallel.tensor_parallel, tensor_parallel_link);
  out.tp_f_s = per_pass_s;
  out.tp_b_s = per_pass_s;
  if (parallel.async_tensor_parallel_backward && parallel.tensor_parallel > 1) {
    // QKV's and the MLP's first matrix's input gradients, each behind its own weight gradient.
    const double collective_s = per_pass_s / 2;
    for (const std::size_t column : {0, 2}) out.tp_b_hidden_s += std::min(collective_s, weight_gradient_s[column]);
  }

  switch (parallel.recomputation) {
    case Recomputation::none: break;
    case Recomputation::selective:
      // FlashAttention stores no attention core to drop: its backward already rebuilds it.
      if (!l.flash) out.recompute_s = core_forward_s + memory_bound_time_s(softmax_bytes(l), device);
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
  const double vocab_on_rank = static_cast<double>(model.vocab) / l.t;
  // The loss's softmax in fp32: reads the 16-bit logits, writes fp32; its backward the reverse.
  const double loss_bytes = 6.0 * l.tokens * vocab_on_rank;
  HeadTimes out;
  out.f_s = gemm_time_s({l.tokens, vocab_on_rank, l.h}, device) + memory_bound_time_s(loss_bytes, device);
  out.b_s = gemm_time_s({l.tokens, l.h, vocab_on_rank}, device) + memory_bound_time_s(loss_bytes, device);
  out.w_s = gemm_time_s({l.h, vocab_on_rank, l.tokens}, device);
  return out;
}

std::int64_t memory_figure_bytes(double bytes, std::string_view figure, const ModelSpec& model, const ParallelConfig& parallel) {
  if (bytes >= 0 && bytes <= 0x1p60) return static_cast<std::int64_t>(bytes);
  throw UsageError(fmt::format("--model {} with --micro-batch-size {} (seq {}, hidden {}, {} heads, tensor-parallel {}): {} "
                               "come to {:.3g} bytes, beyond the limit of 2^60 bytes (1 EiB)",
                               model.name, parallel.micro_batch_size, model.seq, model.hidden, model.heads,
                               parallel.tensor_parallel, figure, bytes));
}

LayerMemory layer_memory(const ModelSpec& model, const ParallelConfig& parallel) {
  constexpr std::string_view kActivations = "one layer's activations";
  const LayerShape l(model, parallel);
  // Korthikanti et al. 2022, section 4.1, per term. Replicated by tensor parallelism: the two
  // layer norms' inputs (4 sbh), the inputs of QKV and of the MLP (2 sbh each), the two dropout
  // masks (sbh each). Split: Q and K (2 sbh + 2 sb kv), V (2 sb kv), the attention output's
  // input (2 sbh), the MLP's hidden activations (GELU: input and output, 4 sbf; SwiGLU: the two
  // first matrices' outputs and their product, 6 sbf). The attention core: the softmax output
  // (2 as^2b) and, with dropout, its mask and output (3 as^2b); FlashAttention keeps only the
  // fp32 log-sum-exp of each query row (4 asb), which selective recomputation has no reason to drop.
  const double replicated = (8 + (l.dropout ? 2 : 0)) * l.tokens * l.h;
  const double split = (4 * l.h + 4 * l.kv_width + (l.gated ? 6 : 4) * l.ffn) * l.tokens;
  const double core = l.flash ? 4 * l.heads * l.s * l.b : (l.dropout ? 5 : 2) * l.heads * l.s * l.s * l.b;
  const double without_recomputation = replicated / l.replicated_split + (split + core) / l.t;
  LayerMemory out;
  out.weight_stash_bytes = memory_figure_bytes(32.0 * l.tokens * l.h / l.t, "one layer's weight-gradient inputs", model, parallel);
  switch (parallel.recomputation) {
    case Recomputation::none: out.held_bytes = memory_figure_bytes(without_recomputation, kActivations, model, parallel); break;
    case Recomputation::selective:
      if (l.flash) {
        out.held_bytes = memory_figure_bytes(without_recomputation, kActivations, model, parallel);
        break;
      }
      out.held_bytes = memory_figure_bytes(replicated / l.replicated_split + split / l.t, kActivations, model, parallel);
      out.rebuilt_bytes = memory_figure_bytes(core / l.t, kActivations, model, parallel);
      break;
    case Recomputation::full:
      out.held_bytes = memory_figure_bytes(2.0 * l.tokens * l.h / l.replicated_split, kActivations, model, parallel);
      out.rebuilt_bytes = memory_figure_bytes(without_recomputation, kActivations, model, parallel);
      break;
  }
  return out;
}

std::int64_t layer_parameters_on_rank(const ModelSpec& model, int tensor_parallel) {
  const std::int64_t h = model.hidden;
  const std::int64_t norms = 4 * h;
  // GPT's biases: QKV's and the MLP's first (column-parallel, split), the attention output's
  // and the MLP's second (row-parallel, whole on every rank). Gated models have none.
  const std::int64_t split_biases = model.gated_mlp ? 0 : h + 2 * model.kv_width() + model.ffn_or_default();
  const std::int64_t whole_biases = model.gated_mlp ? 0 : 2 * h;
  return (model.layer_matrix_parameters() + split_biases) / tensor_parallel + norms + whole_biases;
}

}  // namespace pipescope::sim
