#include "pipescope/sim/efficiency.hpp"

#include <algorithm>
#include <boost/math/distributions/normal.hpp>
#include <cmath>
#include <cstdint>

#include "pipescope/core/errors.hpp"

namespace pipescope::sim {

namespace {

// Measured on an H100 SXM (bench/kernels/measure_kernels.py, bench/kernels/results/h100.json;
// torch 2.11 with CUDA 13.0 and cuDNN 9.19, docs/MODEL.md): causal, BF16, head dimension 128, 16
// heads, 16k tokens per batch (the FlashAttention-3 paper's sweep, whose published figures are
// within 10 % of these), at 512 ... 16k keys, FlashAttention-2 (torch's flash kernel) and cuDNN's
// fused attention, forward and backward. The tails: fitted on the same run's kernels at the
// published runs' own shapes (2.9 to 11.6 waves), not on any step time.
constexpr AttentionCurve kH100FlashAttention2{
    {174e12, 240e12, 274e12, 286e12, 309e12, 305e12}, {110e12, 161e12, 214e12, 257e12, 279e12, 310e12}, 2048, 1.7, 1.1};
constexpr AttentionCurve kH100Cudnn{
    {334e12, 442e12, 476e12, 517e12, 545e12, 564e12}, {169e12, 274e12, 360e12, 430e12, 475e12, 525e12}, 2048, 1.0, 0.9};

AttentionCurve scaled(AttentionCurve curve, double factor) {
  for (double& v : curve.forward_flops_per_s) v *= factor;
  for (double& v : curve.backward_flops_per_s) v *= factor;
  return curve;
}

// The H100's figures (docs/MODEL.md), measured on one (bench/kernels/): BF16 products as they run
// held at the power limit (an 8192^3 product at 704 TFLOP/s held, 789 in a short burst; over the
// published runs' 90 layer shapes, stream-K's flat roof matches them within -8 and +4 %),
// element-wise work at 0.875 of the bandwidth (copies and activations: 2.9 to 3.05 TB/s), the
// attention curves above; and three figures fitted end to end on Nemotron-4 15B's published H100
// runs alone (16 to 2,048 GPUs; docs/VALIDATION.md, "fitted on"; every other published H100 run
// held out): the sustained fraction of every lone figure (a step's gaps between kernels), the FP8
// products' fraction of the FP8 peak (held alone: 0.63; the rest is Transformer Engine's
// per-product scaling work, which the casts' bytes do not cover), and the spread of a node's pace
// (the family's step grows 3 to 5 % from 2 to 256 nodes at one per-GPU load: the slowest node's).
KernelFigures hopper_kernels() {
  KernelFigures k;
  k.gemm_peak_fraction = 0.706;
  k.memory_bandwidth_fraction = 0.875;
  k.multiprocessors = 132;
  k.tile_m = 128;
  k.tile_n = 256;
  k.tile_k_overhead = 128;
  k.stream_k = true;
  k.fp8_gemm_peak_fraction = 0.60;
  k.flash_attention = kH100FlashAttention2;
  k.fused_attention = kH100Cudnn;
  k.sustained_fraction = 0.91;
  k.node_pace_spread = 0.02;
  return k;
}

// Memory sizes as the datasheets give them, in 10^9 bytes.
constexpr std::int64_t decimal_gigabytes(std::int64_t n) { return n * 1000 * 1000 * 1000; }

// H100 SXM: 132 SMs, 989 TFLOP/s dense BF16 and 1979 dense FP8, 3.35 TB/s HBM3, NVLink 4
// (H100 datasheet). The H200 is the same chip with 141 GB of HBM3e at 4.8 TB/s (H200
// datasheet), so the same kernel figures (measured on one: products and attention within 2 %
// of the H100's, bench/kernels/results/h200.json) but its streaming kernels' share of the
// faster memory, 0.84 (copies at 4.0 to 4.15 TB/s).
// NCCL's all-to-all on DGX H100/H200 nodes (docs/MODEL.md, "Mixture of experts"): in a node
// 370 of NVLink 4's 450 GB/s (NCCL's protocol overhead, about 20 %: NVIDIA/nccl-tests#212); across
// nodes one NIC's rate, 48 to 49 of NDR's 50 GB/s (all-to-all cannot aggregate several NICs:
// NVIDIA/nccl-tests#267); its kernel one CTA on each point-to-point channel, 32 of them on one
// H100 node and 16 across H100 nodes (NCCL's init logs in aws-samples/aws-do-eks,
// Container-Root/eks/deployment/nccl-test/README.md).
AllToAllFigures hopper_all_to_all() {
  AllToAllFigures a;
  a.nvlink_fraction = 370.0 / 450.0;
  a.network_fraction = 48.5 / 50.0;
  a.sms_in_node = 32;
  a.sms_across_nodes = 16;
  return a;
}

void set_hopper(DeviceSpec& d, bool h200) {
  d.peak_flops_per_s = 989e12;
  d.peak_fp8_flops_per_s = 1979e12;
  d.memory_bytes = h200 ? decimal_gigabytes(141) : decimal_gigabytes(80);
  d.memory_bandwidth_bytes_per_s = h200 ? 4.8e12 : 3.35e12;
  d.nvlink = {450e9, 2e-6};
  d.kernels = hopper_kernels();
  d.all_to_all = hopper_all_to_all();
  if (h200) d.kernels.memory_bandwidth_fraction = 0.84;
}

// B200 (DGX B200): 148 SMs, 2.25 PFLOP/s dense BF16 and 4.5 dense FP8, 180 GB of HBM3e at
// 8 TB/s, NVLink 5 at 900 GB/s per direction (DGX B200 datasheet). No B200 kernel was
// measured here: its fractions are the H100's, its attention the H100's curves scaled by the
// peaks (docs/MODEL.md says what that assumes).
void set_b200(DeviceSpec& d) {
  d.peak_flops_per_s = 2.25e15;
  d.peak_fp8_flops_per_s = 4.5e15;
  d.memory_bytes = decimal_gigabytes(180);
  d.memory_bandwidth_bytes_per_s = 8.0e12;
  d.nvlink = {900e9, 2e-6};
  d.kernels = hopper_kernels();
  d.kernels.multiprocessors = 148;
  d.kernels.flash_attention = scaled(kH100FlashAttention2, 2.25e15 / 989e12);
  d.kernels.fused_attention = scaled(kH100Cudnn, 2.25e15 / 989e12);
}

// A100 SXM 80G: 108 SMs, 312 TFLOP/s dense bf16, 2.0 TB/s HBM2e, NVLink 3, no FP8. Both
// fractions are fitted to end-to-end runs, not measured on lone kernels (docs/VALIDATION.md):
// the peak fraction 0.77 (236 TFLOP/s for 8192^3) to all 55 published A100 runs, where a
// cuBLAS-like 0.85 predicted them 10 to 20 % fast; the element-wise bandwidth fraction 0.675
// (1.35 TB/s) to the Zero Bubble runs alone, Megatron-LM's held out, where the copy-like 0.9
// left the small-hidden runs about 10 % fast. No attention curve: its core is priced as
// products.
void set_a100(DeviceSpec& d) {
  d.peak_flops_per_s = 312e12;
  d.memory_bytes = decimal_gigabytes(80);
  d.memory_bandwidth_bytes_per_s = 2.0e12;
  d.nvlink = {300e9, 2e-6};
  d.kernels.gemm_peak_fraction = 0.77;
  d.kernels.memory_bandwidth_fraction = 0.675;
  d.kernels.multiprocessors = 108;
  d.kernels.tile_m = 256;
  d.kernels.tile_n = 128;
  d.kernels.tile_k_overhead = 128;
}

}  // namespace

double slowest_node_slowdown(const KernelFigures& kernels, std::int64_t nodes) {
  if (nodes <= 1 || kernels.node_pace_spread <= 0) return 1.0;
  const double n = static_cast<double>(nodes);
  return 1.0 + kernels.node_pace_spread * boost::math::quantile(boost::math::normal(), (n - 0.375) / (n + 0.25));
}

DeviceSpec device_preset(const std::string& name) {
  DeviceSpec d;
  d.name = name;
  if (name == "h100" || name == "h200")
    set_hopper(d, name == "h200");
  else if (name == "b200")
    set_b200(d);
  else if (name == "a100")
    set_a100(d);
  else
    throw UsageError("--gpu: unknown device '" + name + "' (known: h100, h200, b200, a100)");
  return d;
}

std::vector<std::string> device_preset_names() { return {"h100", "h200", "b200", "a100"}; }

namespace {

// How a kernel lays a product out: its output tiles and, when they are fewer than the
// multiprocessors, how many ways k is split among them (split-K, as cuBLAS does for thin
// products), each split at least kMinSplitK deep.
struct TileLayout {
  double tiles = 0;   // tile-sized pieces of work, splits included
  double useful = 0;  // the same counting partial edge tiles by their share
  double k = 0;       // depth of each piece
};

constexpr double kMinSplitK = 512;

TileLayout tile_layout(const GemmShape& shape, const KernelFigures& kernels, double tile_m, double tile_n) {
  const double output_tiles = std::ceil(shape.m / tile_m) * std::ceil(shape.n / tile_n) * shape.batch;
  double split = 1;
  if (output_tiles < kernels.multiprocessors)
    split =
        std::max(1.0, std::min(std::floor(kernels.multiprocessors / output_tiles), std::floor(shape.k / kMinSplitK)));
  const double useful = shape.m * shape.n * shape.batch / (tile_m * tile_n);
  return {output_tiles * split, useful * split, shape.k / split};
}

// Fraction of the multiprocessors' time spent on useful tiles: a partial tile on an edge takes
// a whole tile's time, and the last wave leaves multiprocessors idle.
double wave_efficiency(const TileLayout& layout, const KernelFigures& kernels) {
  const double waves = kernels.stream_k ? std::max(1.0, layout.tiles / kernels.multiprocessors)
                                        : std::ceil(layout.tiles / kernels.multiprocessors);
  return layout.useful / (waves * kernels.multiprocessors);
}

// Each tile's prologue and epilogue against its k-loop.
double tile_saturation(const TileLayout& layout, const KernelFigures& kernels) {
  return layout.k / (layout.k + kernels.tile_k_overhead);
}

}  // namespace

double achieved_flops_per_s(const GemmShape& shape, const DeviceSpec& device, GemmPrecision precision) {
  const double time_s = gemm_time_s(shape, device, precision);
  return time_s > 0 ? shape.flops() / time_s : 0.0;
}

double gemm_time_s(const GemmShape& shape, const DeviceSpec& device, GemmPrecision precision) {
  if (shape.m <= 0 || shape.n <= 0 || shape.k <= 0 || shape.batch <= 0) return 0.0;
  const bool fp8 = precision == GemmPrecision::fp8;
  if (fp8 && !device.has_fp8()) throw UsageError("--fp8-format: the " + device.name + " has no FP8 tensor cores");
  const double peak_flops_per_s = fp8 ? device.peak_fp8_flops_per_s : device.peak_flops_per_s;
  if (!device.per_shape()) return shape.flops() / (peak_flops_per_s * device.efficiency);
  KernelFigures kernels = device.kernels;
  if (fp8) {
    kernels.gemm_peak_fraction = kernels.fp8_gemm_peak_fraction;
    kernels.tile_k_overhead *= 2;
  }
  // The library picks the tile's orientation that suits the shape (a 128-wide side of the
  // output, as an attention head's, fills a 256 x 128 tile, not a 128 x 256 one).
  auto compute_s = [&](double tile_m, double tile_n) {
    const TileLayout layout = tile_layout(shape, kernels, tile_m, tile_n);
    const double roof = peak_flops_per_s * kernels.gemm_peak_fraction * kernels.sustained_fraction *
                        wave_efficiency(layout, kernels) * tile_saturation(layout, kernels);
    return shape.flops() / roof;
  };
  const double best_compute_s =
      std::min(compute_s(kernels.tile_m, kernels.tile_n), compute_s(kernels.tile_n, kernels.tile_m));
  return std::max(best_compute_s, memory_bound_time_s(fp8 ? shape.fp8_bytes() : shape.bytes(), device));
}

double memory_bound_time_s(double bytes, const DeviceSpec& device) {
  if (!device.per_shape() || bytes <= 0) return 0.0;
  return bytes / (device.memory_bandwidth_bytes_per_s * device.kernels.memory_bandwidth_fraction *
                  device.kernels.sustained_fraction);
}

namespace {

// How much longer than the curve's a kernel of `blocks` blocks runs: (waves + tail) / waves,
// relative to the curve's own (AttentionCurve).
double tail_factor(const AttentionCurve& curve, bool backward, double blocks, int multiprocessors) {
  if (blocks <= 0 || curve.reference_blocks <= 0) return 1.0;
  const double tail = backward ? curve.backward_tail_waves : curve.forward_tail_waves;
  const double waves = blocks / multiprocessors;
  const double reference = curve.reference_blocks / multiprocessors;
  return (waves + tail) / waves * reference / (reference + tail);
}

}  // namespace

double attention_kernel_time_s(double flops, double keys, AttentionBackend backend, bool backward,
                               const DeviceSpec& device, double blocks) {
  if (flops <= 0 || !device.per_shape()) return 0.0;
  const KernelFigures& k = device.kernels;
  const AttentionCurve* curve = nullptr;
  switch (backend) {
    case AttentionBackend::auto_select:
      curve = k.fused_attention.known() ? &k.fused_attention : &k.flash_attention;
      break;
    case AttentionBackend::flash: curve = &k.flash_attention; break;
    case AttentionBackend::fused: curve = &k.fused_attention; break;
  }
  if (!curve->known()) return 0.0;
  const std::array<double, 6>& points = backward ? curve->backward_flops_per_s : curve->forward_flops_per_s;
  // Between the measured lengths (powers of two from 512) linear in log2(keys); beyond them the
  // nearest.
  const double position = std::clamp(std::log2(std::max(keys, 1.0) / 512.0), 0.0, 5.0);
  const auto below = static_cast<std::size_t>(std::floor(position));
  const std::size_t above = std::min<std::size_t>(below + 1, 5);
  const double weight = position - static_cast<double>(below);
  const double flops_per_s = points[below] * (1 - weight) + points[above] * weight;
  return flops / (flops_per_s * k.sustained_fraction) * tail_factor(*curve, backward, blocks, k.multiprocessors);
}

}  // namespace pipescope::sim
