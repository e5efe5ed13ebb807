// The communication inside one layer's pass: tensor parallelism's all-gathers and
// reduce-scatters (or all-reduces) beside their products, with Transformer Engine's userbuffers
// overlap where asked, and context parallelism's key/value exchange beside the attention blocks.
#include <algorithm>
#include <array>
#include <cmath>

#include "layer_shape.hpp"
#include "pipescope/sim/expert_layer.hpp"
#include "pipescope/sim/layer_costs.hpp"

namespace pipescope::sim {

using detail::column_parallel;
using detail::LayerShape;
using detail::LinearTimes;

double ring_all_gather_s(double bytes, int group_size, const LinkSpec& link) {
  if (group_size <= 1 || bytes <= 0) return 0.0;
  return (group_size - 1) * (link.latency_s + bytes / group_size / link.bandwidth_bytes_per_s);
}

namespace {

// Seconds of each of a pass's four collectives (an all-gather or a reduce-scatter of the hidden
// state; without sequence parallelism the two all-reduces count as two each, the same bytes).
// Under FP8 with sequence parallelism Transformer Engine all-gathers the FP8 input of QKV and of
// the MLP's first product: half the bytes. Reductions stay in 16 bits.
std::array<double, 4> pass_collectives_s(const LayerShape& l, const LinkSpec& link, int tp, bool forward,
                                         bool sequence_parallel) {
  const double hidden_state_bytes = 2.0 * l.tokens * l.h;
  std::array<double, 4> out{};
  for (std::size_t i = 0; i < out.size(); ++i) {
    const bool fp8_gather = forward && l.fp8 && sequence_parallel && column_parallel(i);
    out[i] = ring_all_gather_s(fp8_gather ? hidden_state_bytes / 2 : hidden_state_bytes, tp, link);
  }
  return out;
}

// Userbuffers split a collective into T chunks pipelined with its product's: the product hides the
// communication up to its own length, and one chunk stays exposed (the first to arrive, or the
// last to leave). The communication kernels' own SMs and the copy engines' contention are not
// modelled.
double overlapped_s(double collective_s, double product_s, int tp) {
  return std::max(0.0, collective_s - product_s) + collective_s / tp;
}

}  // namespace

UserbufferSlowdown userbuffer_slowdown(const DeviceSpec& device) {
  // The SMs Transformer Engine's userbuffers take from the products they overlap, as NeMo's
  // H100 configurations set them (nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py):
  // the attention output's and the MLP's second product's pipelined reduce-scatters 24 and 16
  // (reserved: the product runs on the rest), QKV's weight-gradient bulk all-gather 24, the
  // input gradients' bulk overlaps 4 and 2, the MLP's first weight gradient's 4. Ring exchanges
  // run on the copy engines (one SM).
  const double sms = device.kernels.multiprocessors;
  auto slower = [&](double taken) { return sms / (sms - taken); };
  UserbufferSlowdown out;
  out.forward = {1.0, slower(24), 1.0, slower(16)};
  out.input_gradient = {slower(4), 1.0, slower(2), 1.0};
  out.weight_gradient = {slower(24), 1.0, slower(4), 1.0};
  return out;
}

TensorParallelPass tensor_parallel_forward(const ModelSpec& model, const DeviceSpec& device, const LinkSpec& link,
                                           const ParallelConfig& parallel) {
  TensorParallelPass out;
  const int tp = parallel.tensor_parallel;
  if (tp <= 1) return out;
  const LayerShape l(model, parallel);
  const std::array<double, 4> collectives = pass_collectives_s(l, link, tp, true, parallel.sequence_parallel);
  if (!parallel.tp_comm_overlap) {
    for (double c : collectives) out.exposed_s += c;
    return out;
  }
  // Each collective beside the product it feeds (QKV, the MLP's first) or follows.
  const LinearTimes products = detail::linear_times(l, device);
  for (std::size_t i = 0; i < collectives.size(); ++i)
    out.exposed_s += overlapped_s(collectives[i], products.forward_s[i], tp);
  return out;
}

TensorParallelPass tensor_parallel_backward(const ModelSpec& model, const DeviceSpec& device, const LinkSpec& link,
                                            const ParallelConfig& parallel) {
  TensorParallelPass out;
  const int tp = parallel.tensor_parallel;
  if (tp <= 1) return out;
  const LayerShape l(model, parallel);
  const std::array<double, 4> collectives = pass_collectives_s(l, link, tp, false, parallel.sequence_parallel);
  for (double c : collectives) out.exposed_s += c;
  const LinearTimes products = detail::linear_times(l, device);
  if (parallel.tp_comm_overlap) {
    // The row-parallel products' gradient all-gather beside their input-gradient products (ring
    // exchange); the column-parallel products' input-gradient reduce-scatter beside their weight
    // gradients (TE's bulk overlap), which a split backward does not run beside it.
    out.exposed_s = 0;
    for (std::size_t i = 0; i < collectives.size(); ++i) {
      if (!column_parallel(i)) {
        out.exposed_s += overlapped_s(collectives[i], products.input_gradient_s[i], tp);
        continue;
      }
      out.exposed_s += collectives[i];
      out.hidden_behind_weight_gradients_s +=
          collectives[i] - overlapped_s(collectives[i], products.weight_gradient_s[i], tp);
    }
    return out;
  }
  if (parallel.async_tensor_parallel_backward) {
    // QKV's and the MLP's first matrix's input gradients (an all-reduce, or a reduce-scatter and
    // the weight gradient's all-gather with SP: two collectives' worth), each behind its own weight
    // gradient.
    const double per_linear_s = (collectives[0] + collectives[1] + collectives[2] + collectives[3]) / 2;
    for (std::size_t i = 0; i < collectives.size(); ++i)
      if (column_parallel(i))
        out.hidden_behind_weight_gradients_s += std::min(per_linear_s, products.weight_gradient_s[i]);
  }
  return out;
}

namespace {

// A fused kernel's forward FLOPs on the rank, counted as FlashAttention's papers count them: the
// two products of its s/C queries, each against the keys it meets under the causal mask (half the
// sequence's, which context parallelism's load balancing gives every rank; fewer in a window).
// Its backward does 2.5 times as much (the scores again, then four products).
double fused_attention_forward_flops(const LayerShape& l, double keys_per_query) {
  return 4.0 * l.local_seq() * keys_per_query * l.head_dim() * l.b * l.heads_on_rank();
}

// A fused kernel's time from the device's measured curve, by the keys each of its blocks meets
// (the sequence's, under context parallelism a block's s/C; in a window the length of a causal
// sequence whose queries meet as many keys; in chunks a chunk's); 0 without a curve.
double measured_attention_s(const LayerShape& l, const ModelSpec& model, const DeviceSpec& device,
                            const ParallelConfig& parallel, bool backward, AttentionSpan span) {
  if (!l.flash) return 0.0;
  const double keys_per_query = model.causal_keys_per_query(span);
  const double flops = fused_attention_forward_flops(l, keys_per_query) * (backward ? 2.5 : 1.0);
  const double blocks = l.b * l.heads_on_rank() * std::ceil(l.local_seq() / 128);
  double keys = l.local_seq();
  if (span == AttentionSpan::window) keys = 2 * keys_per_query;
  if (span == AttentionSpan::chunk && model.attention_chunk_size > 0)
    keys = std::min<double>(keys, model.attention_chunk_size);
  return attention_kernel_time_s(flops, keys, parallel.attention_backend, backward, device, blocks);
}

// What a rank attends with once its all-to-all group exchanged heads for tokens: T x A heads'
// divisor, a ring of C / A (none with a2a).
ParallelConfig ring_after_all_to_all(const ParallelConfig& parallel) {
  ParallelConfig ring = parallel;
  const int a2a = parallel.context_parallel_all_to_all();
  ring.tensor_parallel = parallel.tensor_parallel * a2a;
  ring.context_parallel = parallel.context_parallel / a2a;
  ring.context_parallel_comm = ContextParallelComm::p2p;
  ring.context_parallel_a2a = 0;
  return ring;
}

// One layer's attention core, of the given span. Without a measured curve it is priced as its
// products: scores Q K^T and their product with V per head, the rank's s/C queries against the
// keys they meet; a fused kernel skips the causal mask's empty blocks (half the sequence's keys)
// and those outside a window or a chunk, an unfused one computes every score and masks them.
double attention_core_s(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel, bool backward,
                        AttentionSpan span) {
  if (const int a2a = parallel.context_parallel_all_to_all(); parallel.context_parallel > 1 && a2a > 1) {
    // After the all-to-all the rank holds its group's part of the sequence (the whole of it with
    // a2a) for an A-th of its heads: the core of a run whose heads are split T x A ways and whose
    // sequence goes around the ring of C / A.
    return attention_core_s(model, device, ring_after_all_to_all(parallel), backward, span);
  }
  const LayerShape l(model, parallel);
  if (const double measured_s = measured_attention_s(l, model, device, parallel, backward, span); measured_s > 0)
    return measured_s;
  const double batch = l.b * l.heads_on_rank();
  // The keys each product runs over: the sequence's, of which a fused kernel computes the share
  // its queries meet.
  const double keys = l.flash ? 2 * model.causal_keys_per_query(span) : l.s;
  const double causal = l.flash ? 0.5 : 1.0;
  const double scores_s = gemm_time_s({l.local_seq(), keys, l.head_dim(), batch}, device);
  const double values_s = gemm_time_s({l.local_seq(), l.head_dim(), keys, batch}, device);
  // Backward: dP = dO V^T (scores-sized), then dV = P^T dO, dQ = dS K and dK = dS^T Q; a fused
  // kernel first computes the scores Q K^T again.
  if (backward) return causal * ((l.flash ? 2 : 1) * scores_s + 3 * values_s);
  return causal * (scores_s + values_s);
}

// The layers' mean attention core: each span's layers at its cost. An unfused core computes every
// score whatever the span, so only a fused one gains.
double mean_attention_core_s(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel,
                             bool backward) {
  if (!model.flash_attention || model.layers_with(AttentionSpan::full) == model.layers)
    return attention_core_s(model, device, parallel, backward, AttentionSpan::full);
  double total_s = 0;
  for (const AttentionSpan span : {AttentionSpan::full, AttentionSpan::window, AttentionSpan::chunk})
    if (const int count = model.layers_with(span); count > 0)
      total_s += count * attention_core_s(model, device, parallel, backward, span);
  return total_s / model.layers;
}

}  // namespace

double attention_core_forward_s(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel) {
  return mean_attention_core_s(model, device, parallel, false);
}

double attention_core_backward_s(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel) {
  return mean_attention_core_s(model, device, parallel, true);
}

ContextParallelExchange context_parallel_exchange(const ModelSpec& model, const DeviceSpec& device,
                                                  const LinkSpec& link, const ParallelConfig& parallel) {
  return context_parallel_exchange(model, device, ContextParallelLinks{link, link}, parallel);
}

ContextParallelExchange context_parallel_exchange(const ModelSpec& model, const DeviceSpec& device,
                                                  const ContextParallelLinks& links, const ParallelConfig& parallel) {
  ContextParallelExchange out;
  const int cp = parallel.context_parallel;
  if (cp <= 1) return out;
  const LayerShape l(model, parallel);
  // The rank's keys and values: two of the 2C chunks of each sequence, the tensor-parallel rank's
  // kv heads, 16-bit.
  const double kv_bytes = 2.0 * 2.0 * l.local_seq() * l.b * l.kv_width / l.t;
  if (const int a2a = parallel.context_parallel_all_to_all(); a2a > 1) {
    // Transformer Engine's AttnFuncWithCPAndQKVOA2A: Q, K and V all-to-all before the core (each
    // rank keeps an A-th of what it holds), the output back after it; the backward's output
    // gradient before and the three input gradients after. The core waits for each: nothing hides.
    // Priced as the experts' all-to-all is, its A members on the link of their group. With
    // a2a+p2p the keys and values of the heads kept then go around the ring of C / A groups.
    const double query_bytes = 2.0 * l.local_seq() * l.b * l.attention_width / l.t;
    const ExpertLinks group{links.all_to_all, links.all_to_all, a2a};
    const double qkv_s = all_to_all_s(query_bytes + kv_bytes, a2a, a2a, group);
    const double output_s = all_to_all_s(query_bytes, a2a, a2a, group);
    const ContextParallelExchange ring =
        context_parallel_exchange(model, device, links, ring_after_all_to_all(parallel));
    out.forward_s = qkv_s + output_s + ring.forward_s;
    out.backward_s = output_s + qkv_s + ring.backward_s;
    return out;
  }
  const LinkSpec& link = links.ring;
  if (parallel.context_parallel_comm == ContextParallelComm::all_gather) {
    // Gathered before the attention and their gradients reduce-scattered after its backward: the
    // attention waits for both.
    out.forward_s = ring_all_gather_s(kv_bytes * cp, cp, link);
    out.backward_s = ring_all_gather_s(kv_bytes * cp, cp, link);
    return out;
  }
  // Ring: C steps, each one block of attention against the keys and values that arrived, while
  // the next ones travel (Transformer Engine's AttnFuncWithCPAndKVP2P). The backward sends the
  // keys, the values and their gradients, and finally returns the gradients to their owner.
  const double forward_block_s = attention_core_forward_s(model, device, parallel) / cp;
  const double backward_block_s = attention_core_backward_s(model, device, parallel) / cp;
  const double step_s = link.latency_s + kv_bytes / link.bandwidth_bytes_per_s;
  const double backward_step_s = link.latency_s + 2 * kv_bytes / link.bandwidth_bytes_per_s;
  out.forward_s = (cp - 1) * std::max(0.0, step_s - forward_block_s);
  out.backward_s = (cp - 1) * std::max(0.0, backward_step_s - backward_block_s) + step_s;
  return out;
}

}  // namespace pipescope::sim
