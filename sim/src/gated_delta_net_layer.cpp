#include "pipescope/sim/gated_delta_net_layer.hpp"

#include <optional>
#include <string>

#include <fmt/format.h>

#include "pipescope/sim/efficiency.hpp"
#include "pipescope/sim/mamba_layer.hpp"
#include "recurrent_block.hpp"

namespace pipescope::sim {

namespace {

// The chunk the delta rule is computed in (flash-linear-attention's chunk_gated_delta_rule).
constexpr double kChunk = 64;

// The layer's widths on one tensor-parallel rank: Megatron's GatedDeltaNet splits the key and the
// value heads (and so every projection's outputs and the convolution's channels) over T.
struct DeltaNetShape {
  double tokens = 0;                                       // the rank's s x b
  double key_width = 0, value_width = 0, value_heads = 0;  // on the rank
  double key_head_dim = 0;
  double in_outputs = 0, conv_channels = 0;  // on the rank

  DeltaNetShape(const ModelSpec& model, const ParallelConfig& parallel)
      : tokens(static_cast<double>(model.seq) * parallel.micro_batch_size),
        key_width(static_cast<double>(model.linear_key_width()) / parallel.tensor_parallel),
        value_width(static_cast<double>(model.linear_value_width()) / parallel.tensor_parallel),
        value_heads(static_cast<double>(model.linear_num_value_heads) / parallel.tensor_parallel),
        key_head_dim(model.linear_key_head_dim),
        in_outputs(static_cast<double>(model.linear_in_projection_outputs()) / parallel.tensor_parallel),
        conv_channels(static_cast<double>(model.linear_conv_channels()) / parallel.tensor_parallel) {}
};

// The delta rule's forward in chunks (Yang et al., "Parallelizing Linear Transformers with the
// Delta Rule over Sequence Length", 2024; flash-linear-attention's kernels), q and k repeated to
// the value heads: in each chunk of C tokens, K K^T, the solved triangular system's products with
// K and V (the WY representation), Q K^T and its product with the corrected values, each the
// causal half of a C x C block; across chunks the state (key width x value width) read by the
// corrected values and the outputs and updated by K^T V. At the chunked kernels' measured rate
// (mamba_layer.hpp), beside the bytes they read and write: q and k expanded to the value heads,
// v, g and beta in, o out, and the solved matrices they keep.
double delta_rule_forward_s(const ModelSpec& model, const DeltaNetShape& l, const DeviceSpec& device) {
  const double flops =
      l.tokens * gated_delta_rule_flops_per_token(model) * l.value_heads / model.linear_num_value_heads;
  const double expanded_keys = 2 * l.value_heads * l.key_head_dim;  // q and k, a value head each
  const double bytes = l.tokens * (2.0 * (2 * l.key_width + 2 * expanded_keys) + 2.0 * (l.value_width + l.value_heads) +
                                   8.0 * l.value_heads + 2.0 * l.value_width + 2.0 * kChunk * l.value_heads);
  return flops / chunked_scan_flops_per_s(device) + memory_bound_time_s(bytes, device);
}

// Element-wise bytes of the forward beside the delta rule: the convolution and its SiLU over q, k
// and v, q's and k's L2 norms, the decay and beta from a and b, the gated norm (o and z read, its
// output written).
double elementwise_forward_bytes(const DeltaNetShape& l) {
  return l.tokens * (4.0 * l.conv_channels + 8.0 * l.key_width + 8.0 * l.value_heads + 6.0 * l.value_width);
}

}  // namespace

double gated_delta_rule_flops_per_token(const ModelSpec& model) {
  const double c = kChunk, k = model.linear_key_head_dim, v = model.linear_value_head_dim;
  return model.linear_num_value_heads * (c * (3 * k + 2 * v) + 6 * k * v);
}

namespace {

// The layer as a recurrent block (recurrent_block.hpp): its widths, its delta rule and what it
// keeps.
detail::RecurrentBlock delta_net_block(const ModelSpec& model, const DeviceSpec* device,
                                       const ParallelConfig& parallel) {
  const DeltaNetShape l(model, parallel);
  detail::RecurrentBlock block(model, parallel);
  block.in_outputs = l.in_outputs;
  block.out_inputs = l.value_width;
  if (device != nullptr) block.kernel_forward_s = delta_rule_forward_s(model, l, *device);
  block.elementwise_forward_bytes = elementwise_forward_bytes(l);
  // The projection's outputs, the convolution's outputs, q and k normalised, the delta rule's
  // output, its solved C x C matrices (16-bit) and the decays' fp32 sums.
  block.kept_bytes = l.tokens * (2 * l.in_outputs + 2 * l.conv_channels + 4 * l.key_width + 2 * l.value_width +
                                 2 * kChunk * l.value_heads + 4 * l.value_heads);
  return block;
}

}  // namespace

LayerTimes gated_delta_net_times(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel) {
  return detail::recurrent_block_times(delta_net_block(model, &device, parallel), device, parallel);
}

LayerMemory gated_delta_net_memory(const ModelSpec& model, const ParallelConfig& parallel) {
  return detail::recurrent_block_memory(delta_net_block(model, nullptr, parallel), "Gated DeltaNet layer", model,
                                        parallel);
}

std::int64_t gated_delta_net_matrix_parameters_on_rank(const ModelSpec& model, int tensor_parallel) {
  return model.linear_attention_matrix_parameters() / tensor_parallel;
}

std::int64_t gated_delta_net_parameters_on_rank(const ModelSpec& model, int tensor_parallel) {
  const std::int64_t own_norm = 2 * static_cast<std::int64_t>(model.hidden);
  return (model.linear_attention_parameters() - own_norm) / tensor_parallel + own_norm;
}

std::optional<std::string> gated_delta_net_tensor_parallel_problem(const ModelSpec& model, int tensor_parallel) {
  if (model.layers_of(LayerKind::linear_attention) == 0 || tensor_parallel <= 1) return std::nullopt;
  if (model.linear_num_key_heads % tensor_parallel != 0 || model.linear_num_value_heads % tensor_parallel != 0)
    return fmt::format(
        "--tensor-parallel {}: does not divide the {} key heads and {} value heads of {}'s Gated "
        "DeltaNet layers",
        tensor_parallel, model.linear_num_key_heads, model.linear_num_value_heads, model.name);
  return std::nullopt;
}

std::optional<std::string> gated_delta_net_context_parallel_problem(const ModelSpec& model,
                                                                    const ParallelConfig& parallel) {
  if (model.layers_of(LayerKind::linear_attention) == 0 || parallel.context_parallel <= 1) return std::nullopt;
  return fmt::format("--context-parallel {}: {}'s Gated DeltaNet layers under context parallelism are not modelled",
                     parallel.context_parallel, model.name);
}

}  // namespace pipescope::sim
