#include "pipescope/sim/efficiency.hpp"

#include <algorithm>
#include <cmath>

#include "pipescope/core/errors.hpp"

namespace pipescope::sim {

DeviceSpec device_preset(const std::string& name) {
  DeviceSpec d;
  d.name = name;
  if (name == "h100") {
    // H100 SXM: 132 SMs, 989 TFLOP/s dense bf16, 3.35 TB/s HBM3, NVLink 4. The peak fraction
    // makes an 8192^3 product 798 TFLOP/s, as measured (ANCHORS.md).
    d.peak_flops_per_s = 989e12;
    d.memory_bytes = 80'000'000'000;
    d.memory_bandwidth_bytes_per_s = 3.35e12;
    d.nvlink = {450e9, 2e-6};
    d.kernels = {0.845, 0.9, 132, 128, 256, 128};
    return d;
  }
  if (name == "h200") {
    // H200: the H100's chip (132 SMs, same kernels) with 141 GB of HBM3e at 4.8 TB/s.
    d.peak_flops_per_s = 989e12;
    d.memory_bytes = 141'000'000'000;
    d.memory_bandwidth_bytes_per_s = 4.8e12;
    d.nvlink = {450e9, 2e-6};
    d.kernels = {0.845, 0.9, 132, 128, 256, 128};
    return d;
  }
  if (name == "a100") {
    // A100 SXM 80G: 108 SMs, 312 TFLOP/s dense bf16, 2.0 TB/s HBM2e, NVLink 3. Both fractions are
    // fitted to end-to-end runs, not measured on lone kernels (docs/VALIDATION.md): the peak
    // fraction 0.77 (236 TFLOP/s for 8192^3) to all 55 published A100 runs, where a cuBLAS-like
    // 0.85 predicted them 10 to 20 % fast; the element-wise bandwidth fraction 0.675 (1.35 TB/s)
    // to the Zero Bubble runs alone, Megatron-LM's held out, where the copy-like 0.9 left the
    // small-hidden runs about 10 % fast.
    d.peak_flops_per_s = 312e12;
    d.memory_bytes = 80'000'000'000;
    d.memory_bandwidth_bytes_per_s = 2.0e12;
    d.nvlink = {300e9, 2e-6};
    d.kernels = {0.77, 0.675, 108, 256, 128, 128};
    return d;
  }
  throw UsageError("--gpu: unknown device '" + name + "' (known: h100, h200, a100)");
}

std::vector<std::string> device_preset_names() { return {"h100", "h200", "a100"}; }

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
    split = std::max(1.0, std::min(std::floor(kernels.multiprocessors / output_tiles), std::floor(shape.k / kMinSplitK)));
  const double useful = shape.m * shape.n * shape.batch / (tile_m * tile_n);
  return {output_tiles * split, useful * split, shape.k / split};
}

// Fraction of the multiprocessors' time spent on useful tiles: a partial tile on an edge takes
// a whole tile's time, and the last wave leaves multiprocessors idle.
double wave_efficiency(const TileLayout& layout, const KernelFigures& kernels) {
  const double waves = std::ceil(layout.tiles / kernels.multiprocessors);
  return layout.useful / (waves * kernels.multiprocessors);
}

// Each tile's prologue and epilogue against its k-loop.
double tile_saturation(const TileLayout& layout, const KernelFigures& kernels) {
  return layout.k / (layout.k + kernels.tile_k_overhead);
}

}  // namespace

double achieved_flops_per_s(const GemmShape& shape, const DeviceSpec& device) {
  const double time_s = gemm_time_s(shape, device);
  return time_s > 0 ? shape.flops() / time_s : 0.0;
}

double gemm_time_s(const GemmShape& shape, const DeviceSpec& device) {
  if (shape.m <= 0 || shape.n <= 0 || shape.k <= 0 || shape.batch <= 0) return 0.0;
  if (!device.per_shape()) return shape.flops() / (device.peak_flops_per_s * device.efficiency);
  const KernelFigures& kernels = device.kernels;
  // The library picks the tile's orientation that suits the shape (a 128-wide side of the
  // output, as an attention head's, fills a 256 x 128 tile, not a 128 x 256 one).
  auto compute_s = [&](double tile_m, double tile_n) {
    const TileLayout layout = tile_layout(shape, kernels, tile_m, tile_n);
    const double roof = device.peak_flops_per_s * kernels.gemm_peak_fraction * wave_efficiency(layout, kernels) *
                        tile_saturation(layout, kernels);
    return shape.flops() / roof;
  };
  const double best_compute_s = std::min(compute_s(kernels.tile_m, kernels.tile_n), compute_s(kernels.tile_n, kernels.tile_m));
  return std::max(best_compute_s, memory_bound_time_s(shape.bytes(), device));
}

double memory_bound_time_s(double bytes, const DeviceSpec& device) {
  if (!device.per_shape() || bytes <= 0) return 0.0;
  return bytes / (device.memory_bandwidth_bytes_per_s * device.kernels.memory_bandwidth_fraction);
}

}  // namespace pipescope::sim
