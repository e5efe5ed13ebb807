// How fast a device runs the operations of a transformer layer, by their shapes: a matrix
// product's achieved FLOP/s from a roofline (compute roof x wave quantisation x tile
// saturation, or the bytes it moves over the memory bandwidth), element-wise work as bytes over
// the memory bandwidth. Each device preset carries the few named figures the curve needs, with
// their sources (docs/MODEL.md), so that calibration adjusts numbers, not code.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "pipescope/sim/topology.hpp"

namespace pipescope::sim {

// A fused attention kernel's measured throughput on the device, by the number of keys each query
// meets (512, 1k, 2k, 4k, 8k and 16k): the causal forward and the backward, in FLOP/s counted
// as FlashAttention's papers count them (a causal forward is half of 4 s^2 d per head; a
// backward 2.5 forwards). Zero: not measured here (the core is then priced as products).
//
// The curve is measured with the GPU full of blocks (reference_blocks of 128 queries per head);
// a kernel with few blocks ends on a tail where the last, longest causal blocks run while other
// multiprocessors idle: its time is (waves + tail) / waves of the curve's, relative to the
// reference's, waves being blocks over multiprocessors (bench/kernels/: 1 to 2 % error over the
// published runs' shapes on an H100).
struct AttentionCurve {
  std::array<double, 6> forward_flops_per_s{};
  std::array<double, 6> backward_flops_per_s{};
  double reference_blocks = 0;  // 0: no tail correction
  double forward_tail_waves = 0;
  double backward_tail_waves = 0;
  bool known() const { return forward_flops_per_s[0] > 0; }
};

// Which kernel runs the attention core (Megatron's --attention-backend): `flash`
// (FlashAttention-2 through Transformer Engine), `fused` (cuDNN's fused attention), or `auto`
// (fused where the device has its figures, else flash). A model without "flash_attention" runs
// the unfused core: its products priced by shape and its softmax as element-wise work.
enum class AttentionBackend : std::uint8_t { auto_select, flash, fused };

// What a device's matrix-product kernels reach. A product of shape (m, n, k) is cut into output
// tiles of tile_m x tile_n (or n x m, whichever suits the shape better), one per
// multiprocessor at a time (k split among several when there
// are fewer tiles than multiprocessors): a partial tile costs a whole one, the last wave of
// tiles leaves multiprocessors idle (wave quantisation), and each tile pays a start and an end
// worth tile_k_overhead steps of k (size saturation), so small and ragged products run slower.
struct KernelFigures {
  // Fraction of peak FLOP/s a tile reaches once running: set so that the model gives the
  // measured FLOP/s of products (H100: the median over the published runs' layer shapes, measured
  // held at the power limit, bench/kernels/results/h100.json).
  double gemm_peak_fraction = 0.845;
  // Fraction of the memory bandwidth a streaming kernel reaches (H100: copies and activations at
  // 2.9 to 3.05 of 3.35 TB/s, measured likewise).
  double memory_bandwidth_fraction = 0.9;
  int multiprocessors = 132;
  int tile_m = 128;
  int tile_n = 256;
  double tile_k_overhead = 128;  // elements of k a tile's prologue and epilogue are worth
  // Hopper's cuBLAS runs persistent stream-K kernels that share the last wave's work among all
  // multiprocessors: no wave quantisation, only partial edge tiles (measured on an H100: products
  // of 2.2 waves reach the same FLOP/s as those of 16, bench/kernels/results/).
  bool stream_k = false;
  // The same fraction for FP8 products (operands of one byte, results of two) against the
  // device's FP8 peak; 0 where the device has no FP8 tensor cores. A tile's prologue and
  // epilogue take the same time as in BF16, so they are worth twice as many elements of k.
  double fp8_gemm_peak_fraction = 0;
  AttentionCurve flash_attention;  // FlashAttention-2
  AttentionCurve fused_attention;  // cuDNN
  // A training step runs every kernel slower than alone (clocks under sustained power, gaps
  // between kernels): this fraction of the lone figures above (products, attention and
  // element-wise work alike). 1 where the figures are already end-to-end ones (the A100's).
  double sustained_fraction = 1;
  // Every node of a run meets the others at each step's synchronisations, so the step runs at the
  // pace of its slowest node. Each node's pace varies by this fraction (one standard deviation),
  // fitted end to end (docs/MODEL.md); 0: not modelled (figures fitted at their own scales).
  double node_pace_spread = 0;
};

// What a matrix product's operands are: 16-bit (BF16/FP16), or FP8 (Transformer Engine's linear
// layers under --fp8-format).
enum class GemmPrecision : std::uint8_t { bf16, fp8 };

// What NCCL's all-to-all (Megatron's alltoall token dispatcher, through torch's
// all_to_all_single) achieves on the device's nodes, and what its kernel takes from the compute
// that runs beside it (docs/MODEL.md, "Mixture of experts"). The defaults, where no source gives
// a figure: the links' full rates and no SMs taken.
struct AllToAllFigures {
  double nvlink_fraction = 1;   // of the NVLink bandwidth: the in-node shares' achieved rate
  double network_fraction = 1;  // of the adapter's bandwidth: the off-node shares'
  // SMs its kernel occupies (one CTA on each of NCCL's point-to-point channels), in a group
  // inside one node and in a group spanning nodes.
  int sms_in_node = 0;
  int sms_across_nodes = 0;
};

struct DeviceSpec {
  std::string name;
  double peak_flops_per_s = 0;      // dense bf16, vendor figure
  double peak_fp8_flops_per_s = 0;  // dense FP8, vendor figure; 0: no FP8 tensor cores
  // 0: every operation is priced by its shape (the model of this file); > 0: every operation runs
  // at this constant fraction of peak FLOP/s and element-wise work is free (`--efficiency`).
  double efficiency = 0;
  std::int64_t memory_bytes = 0;
  double memory_bandwidth_bytes_per_s = 0;
  LinkSpec nvlink;  // per direction
  KernelFigures kernels;
  AllToAllFigures all_to_all;

  bool per_shape() const { return efficiency <= 0; }
  bool has_fp8() const { return peak_fp8_flops_per_s > 0; }
};

// How much slower than one node a synchronous step of `nodes` nodes computes: 1 + the spread
// times the expected largest of `nodes` standard normal draws (Blom's approximation,
// quantile((n - 0.375) / (n + 0.25))); 1 for one node.
double slowest_node_slowdown(const KernelFigures& kernels, std::int64_t nodes);

// Presets: h100, h200, b200, a100 (figures and sources in docs/MODEL.md). Throws UsageError naming
// the presets for an unknown name.
DeviceSpec device_preset(const std::string& name);
std::vector<std::string> device_preset_names();

// `batch` independent products of (m x k) by (k x n), 16-bit operands and result.
struct GemmShape {
  double m = 0;
  double n = 0;
  double k = 0;
  double batch = 1;

  double flops() const { return 2.0 * m * n * k * batch; }
  double bytes() const { return 2.0 * (m * k + k * n + m * n) * batch; }
  // FP8 operands take one byte, the 16-bit result two.
  double fp8_bytes() const { return (m * k + k * n + 2.0 * m * n) * batch; }
};

// Seconds of one product on the device: the longer of its compute time under the roof above and
// its bytes over the achieved memory bandwidth. With a constant efficiency: flops over that
// fraction of peak (the FP8 peak for FP8 products).
double gemm_time_s(const GemmShape& shape, const DeviceSpec& device, GemmPrecision precision = GemmPrecision::bf16);
double achieved_flops_per_s(const GemmShape& shape, const DeviceSpec& device,
                            GemmPrecision precision = GemmPrecision::bf16);

// Seconds of a fused attention kernel doing `flops` (counted as above) with `keys` keys per
// query, forward or backward, in `blocks` blocks of 128 queries (micro-batch x heads x queries /
// 128; 0: as many as the curve was measured with); 0 when the device has no figures for `backend`
// (the caller prices the core as products instead). `auto_select` takes cuDNN's figures where
// known.
double attention_kernel_time_s(double flops, double keys, AttentionBackend backend, bool backward,
                               const DeviceSpec& device, double blocks = 0);

// Seconds of element-wise work that reads and writes `bytes` (layer norms, activations,
// softmax, dropout, residual adds): bytes over the achieved memory bandwidth; 0 with a constant
// efficiency (its FLOPs are not counted there either).
double memory_bound_time_s(double bytes, const DeviceSpec& device);

}  // namespace pipescope::sim
