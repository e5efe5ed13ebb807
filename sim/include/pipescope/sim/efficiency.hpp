// How fast a device runs the operations of a transformer layer, by their shapes: a matrix
// product's achieved FLOP/s from a roofline (compute roof x wave quantisation x tile
// saturation, or the bytes it moves over the memory bandwidth), element-wise work as bytes over
// the memory bandwidth. Each device preset carries the few named figures the curve needs, with
// their sources (docs/MODEL.md), so that calibration adjusts numbers, not code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipescope/sim/topology.hpp"

namespace pipescope::sim {

// What a device's matrix-product kernels reach. A product of shape (m, n, k) is cut into output
// tiles of tile_m x tile_n (or n x m, whichever suits the shape better), one per
// multiprocessor at a time (k split among several when there
// are fewer tiles than multiprocessors): a partial tile costs a whole one, the last wave of
// tiles leaves multiprocessors idle (wave quantisation), and each tile pays a start and an end
// worth tile_k_overhead steps of k (size saturation), so small and ragged products run slower.
struct KernelFigures {
  // Fraction of peak FLOP/s a tile reaches once running: set so that the model gives the
  // measured FLOP/s of one large product (H100: 798 TFLOP/s for 8192^3, reference/ANCHORS.md).
  double gemm_peak_fraction = 0.845;
  // Fraction of the memory bandwidth a streaming kernel reaches (H100: ~3.0 of 3.35 TB/s for a
  // device copy, ANCHORS.md).
  double memory_bandwidth_fraction = 0.9;
  int multiprocessors = 132;
  int tile_m = 128;
  int tile_n = 256;
  double tile_k_overhead = 128;  // elements of k a tile's prologue and epilogue are worth
};

struct DeviceSpec {
  std::string name;
  double peak_flops_per_s = 0;  // dense bf16, vendor figure
  // 0: every operation is priced by its shape (the model of this file); > 0: every operation runs
  // at this constant fraction of peak FLOP/s and element-wise work is free (`--efficiency`).
  double efficiency = 0;
  std::int64_t memory_bytes = 0;
  double memory_bandwidth_bytes_per_s = 0;
  LinkSpec nvlink;  // per direction
  KernelFigures kernels;

  bool per_shape() const { return efficiency <= 0; }
};

// Presets: h100, h200, a100 (figures and sources in docs/MODEL.md). Throws UsageError naming
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
};

// Seconds of one product on the device: the longer of its compute time under the roof above and
// its bytes over the achieved memory bandwidth. With a constant efficiency: flops over that
// fraction of peak.
double gemm_time_s(const GemmShape& shape, const DeviceSpec& device);
double achieved_flops_per_s(const GemmShape& shape, const DeviceSpec& device);

// Seconds of element-wise work that reads and writes `bytes` (layer norms, activations,
// softmax, dropout, residual adds): bytes over the achieved memory bandwidth; 0 with a constant
// efficiency (its FLOPs are not counted there either).
double memory_bound_time_s(double bytes, const DeviceSpec& device);

}  // namespace pipescope::sim
