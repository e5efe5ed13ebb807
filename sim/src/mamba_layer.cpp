#include "pipescope/sim/mamba_layer.hpp"

#include <optional>
#include <string>

#include <fmt/format.h>

#include "pipescope/sim/efficiency.hpp"
#include "pipescope/sim/expert_layer.hpp"
#include "recurrent_block.hpp"

namespace pipescope::sim {

namespace {

// The layer's widths on one tensor-parallel rank: MambaMixer splits its heads, its groups and so
// its inner width, the input projection's outputs and the convolution's channels over T.
struct MambaShape {
  // The rank's s x b / C tokens (under context parallelism the convolution and the scan run the
  // whole sequence of a C-th of the heads instead: the same work).
  double tokens = 0;
  double t = 1;
  double inner = 0, heads = 0, groups = 0;   // on the rank
  double in_outputs = 0, conv_channels = 0;  // on the rank
  double state = 0;

  MambaShape(const ModelSpec& model, const ParallelConfig& parallel)
      : tokens(static_cast<double>(model.seq) * parallel.micro_batch_size / parallel.context_parallel),
        t(parallel.tensor_parallel),
        inner(static_cast<double>(model.mamba_inner()) / parallel.tensor_parallel),
        heads(static_cast<double>(model.mamba_heads()) / parallel.tensor_parallel),
        groups(static_cast<double>(model.mamba_num_groups) / parallel.tensor_parallel),
        in_outputs(static_cast<double>(model.mamba_in_projection_outputs()) / parallel.tensor_parallel),
        conv_channels(static_cast<double>(model.mamba_conv_channels()) / parallel.tensor_parallel),
        state(model.mamba_state_dim) {}
};

// The chunked scan's forward (Mamba-2's SSD, Dao and Gu 2024, section 6) at the rate its kernel
// is measured to run: in each chunk of Q tokens, C B^T of each group (Q x Q over the state), its
// causal half's product with each head's x (Q x P), each head's chunk state (B^T x: state x P
// over Q) and the outputs from the states before (C h: Q x P over the state). The chunk-scan
// kernel runs at 134 TFLOP/s on an H800 SXM (an H100's compute; tile-ai/tilelang's
// benchmark/mamba2, at 8192 tokens, 64-wide heads, a state of 128, its FLOPs counted so), scaled
// to other devices by their BF16 peak. Beside it the kernels read x, B, C and dt, write y, and keep
// dt's cumulative sums in fp32.
constexpr double kScanFlopsPerS = 134e12;
constexpr double kScanMeasuredPeakFlopsPerS = 989e12;  // the H100's dense BF16 peak

double scan_forward_s(const ModelSpec& model, const MambaShape& l, const DeviceSpec& device) {
  const double flops_per_token = mamba_scan_flops_per_token(model) / l.t;  // the rank's heads and groups
  const double rate = chunked_scan_flops_per_s(device);
  const double bytes = l.tokens * (2.0 * (l.conv_channels + l.inner + l.heads) + 8.0 * l.heads);
  return l.tokens * flops_per_token / rate + memory_bound_time_s(bytes, device);
}

// Element-wise bytes of the forward beside the scan: the convolution and its SiLU over x, B and C
// (read and written), the gated norm (y and z read, its output written).
double elementwise_forward_bytes(const MambaShape& l) { return l.tokens * (4.0 * l.conv_channels + 6.0 * l.inner); }

}  // namespace

double chunked_scan_flops_per_s(const DeviceSpec& device) {
  return kScanFlopsPerS * device.peak_flops_per_s / kScanMeasuredPeakFlopsPerS;
}

double mamba_scan_flops_per_token(const ModelSpec& model) {
  const double q = model.mamba_chunk_size, n = model.mamba_state_dim, p = model.mamba_head_dim;
  return 2.0 * q * n * model.mamba_num_groups + model.mamba_heads() * (q * p + 4.0 * n * p);
}

namespace {

// The layer as a recurrent block (recurrent_block.hpp): its widths, its scan and what it keeps.
detail::RecurrentBlock mamba_block(const ModelSpec& model, const DeviceSpec* device, const ParallelConfig& parallel) {
  const MambaShape l(model, parallel);
  detail::RecurrentBlock block(model, parallel);
  block.in_outputs = l.in_outputs;
  block.out_inputs = l.inner;
  if (device != nullptr) block.kernel_forward_s = scan_forward_s(model, l, *device);
  block.elementwise_forward_bytes = elementwise_forward_bytes(l);
  // The projection's outputs (z, x, B, C, dt: the convolution's, the gate's and the scan's
  // inputs), the convolution's outputs (the scan's x, B and C), the scan's output y, and dt's fp32
  // cumulative sums.
  block.kept_bytes = l.tokens * (2 * l.in_outputs + 2 * l.conv_channels + 2 * l.inner + 8 * l.heads);
  return block;
}

}  // namespace

LayerTimes mamba_layer_times(const ModelSpec& model, const DeviceSpec& device, const ParallelConfig& parallel) {
  return detail::recurrent_block_times(mamba_block(model, &device, parallel), device, parallel);
}

LayerMemory mamba_layer_memory(const ModelSpec& model, const ParallelConfig& parallel) {
  return detail::recurrent_block_memory(mamba_block(model, nullptr, parallel), "Mamba layer", model, parallel);
}

MambaContextParallel mamba_context_parallel(const ModelSpec& model, const DeviceSpec& device,
                                            const ParallelConfig& parallel, const ExpertLinks& group_links,
                                            int members_per_node) {
  MambaContextParallel out;
  const int cp = parallel.context_parallel;
  if (cp <= 1) return out;
  const MambaShape l(model, parallel);
  // Megatron's MambaContextParallel: before the convolution and the scan, z, x, B, C and dt go
  // from the rank's share of the sequence to the whole sequence of a C-th of the heads (B and C
  // repeated where a rank's groups are fewer than C, each repeat serving a C-th of a group's
  // heads); after them y comes back. Each all-to-all is preceded or followed by undoing or
  // redoing attention's causal load balancing, a copy of its tensor. The backward runs both for
  // the gradients.
  const double repeats = l.groups < cp ? cp / l.groups : 1.0;
  const double before_bytes = 2.0 * l.tokens * (2 * l.inner + l.groups * repeats * 2 * l.state + l.heads);
  const double after_bytes = 2.0 * l.tokens * l.inner;
  const ExpertLinks wire = achieved_all_to_all_links(group_links);
  const double exchange_s = all_to_all_s(before_bytes, cp, members_per_node, wire) +
                            all_to_all_s(after_bytes, cp, members_per_node, wire) +
                            memory_bound_time_s(2.0 * (before_bytes + after_bytes), device);
  out.forward_s = exchange_s;
  out.backward_s = exchange_s;
  return out;
}

std::int64_t mamba_layer_matrix_parameters_on_rank(const ModelSpec& model, int tensor_parallel) {
  return model.mamba_matrix_parameters() / tensor_parallel;
}

std::int64_t mamba_layer_parameters_on_rank(const ModelSpec& model, int tensor_parallel) {
  const std::int64_t own_norm = 2 * static_cast<std::int64_t>(model.hidden);
  return (model.mamba_parameters() - own_norm) / tensor_parallel + own_norm;
}

std::optional<std::string> mamba_context_parallel_problem(const ModelSpec& model, const ParallelConfig& parallel) {
  const int cp = parallel.context_parallel;
  if (model.layers_of(LayerKind::mamba) == 0 || cp <= 1) return std::nullopt;
  const int t = std::max(parallel.tensor_parallel, 1);
  const int heads = model.mamba_heads() / t, groups = model.mamba_num_groups / t;
  if (heads < 1 || groups < 1) return std::nullopt;  // T does not split them: its own refusal says so
  const std::string option = fmt::format("--context-parallel {}", cp);
  if (heads % cp != 0)
    return fmt::format(
        "{}: does not divide the {} Mamba heads of a tensor-parallel rank of {} (each CP rank scans "
        "the whole sequence of a C-th of them)",
        option, heads, model.name);
  if (groups < cp ? cp % groups != 0 : groups % cp != 0)
    return fmt::format(
        "{}: neither divides nor is a multiple of the {} Mamba groups of a tensor-parallel rank of {} "
        "(Megatron's MambaContextParallel requires one)",
        option, groups, model.name);
  return std::nullopt;
}

std::optional<std::string> mamba_tensor_parallel_problem(const ModelSpec& model, int tensor_parallel) {
  if (model.layers_of(LayerKind::mamba) == 0 || tensor_parallel <= 1) return std::nullopt;
  if (model.mamba_heads() % tensor_parallel != 0 || model.mamba_num_groups % tensor_parallel != 0)
    return fmt::format(
        "--tensor-parallel {}: does not divide the {} Mamba heads and {} groups of {} (MambaMixer splits both)",
        tensor_parallel, model.mamba_heads(), model.mamba_num_groups, model.name);
  return std::nullopt;
}

}  // namespace pipescope::sim
