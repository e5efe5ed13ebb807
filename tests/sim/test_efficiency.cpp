// The per-shape efficiency model of a device (efficiency.hpp), its figures from docs/MODEL.md and
// the kernels measured on an H100 (bench/kernels/results/h100.json):
// - H100: an 8192^3 bf16 product held at the power limit runs at 704 TFLOP/s (measured); the
//   preset's roof, 0.706 of the 989 TFLOP/s peak a tile, is the median over the published runs'
//   90 layer shapes: 2048 tiles of 128 x 256, k = 8192 against a tile overhead worth 128 (0.985),
//   687 TFLOP/s; in a training step every lone figure runs at the sustained 0.91 (fitted on
//   Nemotron-4 15B's runs), and a step of N nodes at the slowest one's pace: 1 + 0.02 x the
//   expected largest of N standard normals (Blom: quantile((N - 0.375) / (N + 0.25))), 1 for one
//   node, 1.0563 for 256;
// - Hopper's stream-K kernels share the last wave: 12 x 11 = 132 output tiles fill the SMs, one
//   more row of output makes 13 x 11 tiles, 143/132 of the time (measured: no wave steps); the
//   A100 (108 SMs, 256 x 128 tiles) keeps its waves: one more row of 12 x 9 tiles doubles the time;
// - FP8 on the H100: 0.60 of 1979 TFLOP/s a tile (fitted), its prologue worth 256 elements of k:
//   an 8192^3 product at 0.60 x 0.970 x 0.91 of 1979 = 1048 TFLOP/s; the A100 has none;
// - attention: the measured curves (cuDNN 545 TFLOP/s causal forward at 8k keys, FlashAttention-2
//   309), between two measured lengths linear in log2(keys): 4k..8k's midpoint 6k is half-way,
//   x 0.91; a kernel of few blocks pays its tail: (waves + tail) / waves against the curve's 15.5
//   waves;
// - k = 256 runs the tiles at 2/3 of their rate (the overhead is half the work);
// - the tile turns to suit the shape: (2048 x 128) outputs cost what (128 x 2048) ones do;
// - a matrix-vector product (m = 1: 32 tiles, k split 4 ways over the 132 SMs) is memory-bound:
//   its 2(k + kn + n) bytes over 0.875 x 3.35 TB/s;
// - A100: about 236 TFLOP/s on large products (fitted to docs/VALIDATION.md's runs); H200: the
//   H100's compute with 4.8 TB/s at 0.84 of it (measured);
// - with a constant efficiency (--efficiency 0.5) a product is its FLOPs over half the peak and
//   element-wise work is free, as before the per-shape model.
#include <catch2/catch.hpp>

#include <cmath>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/efficiency.hpp"

using namespace pipescope;
using namespace pipescope::sim;

TEST_CASE("a large product on an H100 runs near the measured 704 TFLOP/s alone, 0.91 of that in a step") {
  DeviceSpec lone = device_preset("h100");
  lone.kernels.sustained_fraction = 1;
  const GemmShape big{8192, 8192, 8192};
  CHECK(achieved_flops_per_s(big, lone) == Approx(0.706 * 989e12 * 8192 / 8320).epsilon(0.002));
  CHECK(achieved_flops_per_s(big, lone) == Approx(704e12).epsilon(0.03));
  const DeviceSpec h100 = device_preset("h100");
  CHECK(h100.per_shape());
  CHECK(achieved_flops_per_s(big, h100) == Approx(0.91 * achieved_flops_per_s(big, lone)));
  CHECK(gemm_time_s(big, h100) == Approx(big.flops() / (0.91 * achieved_flops_per_s(big, lone))));
  // Batched: the same work in 8 products of a quarter of the rows.
  CHECK(gemm_time_s({2048, 8192, 8192, 4}, h100) == Approx(gemm_time_s(big, h100)).epsilon(0.01));
}

TEST_CASE("small and ragged products run slower than the roof") {
  const DeviceSpec h100 = device_preset("h100");
  const double one_wave = gemm_time_s({128.0 * 12, 256.0 * 11, 8192}, h100);
  const double a_row_more = gemm_time_s({128.0 * 12 + 1, 256.0 * 11, 8192}, h100);
  CHECK(a_row_more == Approx(one_wave * 143 / 132));
  const DeviceSpec a100 = device_preset("a100");
  const double a100_one_wave = gemm_time_s({256.0 * 12, 128.0 * 9, 8192}, a100);
  CHECK(gemm_time_s({256.0 * 12 + 1, 128.0 * 9, 8192}, a100) == Approx(2 * a100_one_wave));
  const double thin_k = achieved_flops_per_s({8192, 8192, 256}, h100);
  const double saturated = achieved_flops_per_s({8192, 8192, 8192}, h100);
  CHECK(thin_k == Approx(saturated * (2.0 / 3) * (8192.0 + 128) / 8192).epsilon(0.001));
  // A matrix-vector product moves its matrix once: memory-bound.
  const GemmShape vector{1, 8192, 8192};
  CHECK(gemm_time_s(vector, h100) == Approx(vector.bytes() / (3.35e12 * 0.875 * 0.91)));
  CHECK(vector.bytes() == 2.0 * (8192 + 8192.0 * 8192 + 8192));
  CHECK(achieved_flops_per_s(vector, h100) < 10e12);
  CHECK(gemm_time_s({0, 8192, 8192}, h100) == 0.0);
  // An attention head's (s x 128) output fills 256 x 128 tiles: as fast as its transpose.
  CHECK(gemm_time_s({2048, 128, 2048, 96}, h100) == gemm_time_s({128, 2048, 2048, 96}, h100));
}

TEST_CASE("device presets: A100 and H200 figures, element-wise work by bandwidth") {
  const DeviceSpec a100 = device_preset("a100");
  // Fitted to the published end-to-end runs of docs/VALIDATION.md, below a lone cuBLAS product.
  CHECK(achieved_flops_per_s({8192, 8192, 8192}, a100) == Approx(236e12).epsilon(0.01));
  const DeviceSpec h100 = device_preset("h100");
  const DeviceSpec h200 = device_preset("h200");
  CHECK(gemm_time_s({8192, 8192, 8192}, h200) == gemm_time_s({8192, 8192, 8192}, h100));
  CHECK(memory_bound_time_s(1e9, h100) == Approx(1e9 / (3.35e12 * 0.875 * 0.91)));
  CHECK(memory_bound_time_s(1e9, h200) == Approx(1e9 / (4.8e12 * 0.84 * 0.91)));
  CHECK(h200.memory_bytes == 141'000'000'000);
  CHECK(device_preset_names() == std::vector<std::string>{"h100", "h200", "b200", "a100"});
  const DeviceSpec b200 = device_preset("b200");
  CHECK(b200.memory_bytes == 180'000'000'000);
  CHECK(b200.nvlink.bandwidth_bytes_per_s == 900e9);
  CHECK_THROWS_WITH(device_preset("tpu"), Catch::Contains("h100, h200, b200, a100"));
}

TEST_CASE("a constant efficiency prices every product by its FLOPs alone") {
  DeviceSpec h100 = device_preset("h100");
  h100.efficiency = 0.5;
  CHECK_FALSE(h100.per_shape());
  const GemmShape vector{1, 8192, 8192};
  CHECK(gemm_time_s(vector, h100) == Approx(vector.flops() / (989e12 * 0.5)));
  CHECK(gemm_time_s({128.0 * 133, 256, 8192}, h100) == Approx(2.0 * 128 * 133 * 256 * 8192 / (989e12 * 0.5)));
  CHECK(memory_bound_time_s(1e9, h100) == 0.0);
}

TEST_CASE("FP8 products run at the FP8 rate on Hopper; the A100 has none") {
  const DeviceSpec h100 = device_preset("h100");
  const GemmShape big{8192, 8192, 8192};
  const double fp8 = achieved_flops_per_s(big, h100, GemmPrecision::fp8);
  CHECK(fp8 == Approx(0.60 * (8192.0 / (8192 + 256)) * 0.91 * 1979e12).epsilon(0.002));
  CHECK(fp8 == Approx(1048e12).epsilon(0.01));
  // One-byte operands: a matrix-vector product moves half the matrix bytes.
  const GemmShape vector{1, 8192, 8192};
  CHECK(vector.fp8_bytes() == 8192 + 8192.0 * 8192 + 2 * 8192);
  CHECK(gemm_time_s(vector, h100, GemmPrecision::fp8) == Approx(vector.fp8_bytes() / (3.35e12 * 0.875 * 0.91)));
  CHECK_THROWS_WITH(gemm_time_s(big, device_preset("a100"), GemmPrecision::fp8), Catch::Contains("no FP8"));
}

TEST_CASE("fused attention follows its measured curve by the keys each query meets") {
  const DeviceSpec h100 = device_preset("h100");
  const double flops = 1e12;
  const double fused_8k = attention_kernel_time_s(flops, 8192, AttentionBackend::fused, false, h100);
  CHECK(fused_8k == Approx(flops / (545e12 * 0.91)));
  CHECK(attention_kernel_time_s(flops, 8192, AttentionBackend::flash, false, h100) == Approx(flops / (309e12 * 0.91)));
  CHECK(attention_kernel_time_s(flops, 8192, AttentionBackend::auto_select, false, h100) == fused_8k);
  CHECK(attention_kernel_time_s(flops, 8192, AttentionBackend::fused, true, h100) == Approx(flops / (475e12 * 0.91)));
  // 6k keys: half-way between 4k (517) and 8k (545) in log2.
  const double midpoint = 517e12 + (545e12 - 517e12) * (std::log2(6.0) - 2);
  CHECK(attention_kernel_time_s(flops, 6144, AttentionBackend::fused, false, h100) ==
        Approx(flops / (midpoint * 0.91)));
  // Beyond the measured lengths: the nearest.
  CHECK(attention_kernel_time_s(flops, 100, AttentionBackend::fused, false, h100) == Approx(flops / (334e12 * 0.91)));
  CHECK(attention_kernel_time_s(flops, 1 << 20, AttentionBackend::fused, false, h100) ==
        Approx(flops / (564e12 * 0.91)));
  // As many blocks as the curve was measured with: no tail; GPT-3 175B's 24 heads of 2048
  // queries at TP 4 (384 blocks, 2.9 waves) pay (2.9 + 1) / 2.9 against the curve's
  // (15.5 + 1) / 15.5 forward on cuDNN (measured: 375 TFLOP/s against the curve's 476).
  CHECK(attention_kernel_time_s(flops, 8192, AttentionBackend::fused, false, h100, 2048) == fused_8k);
  const double waves = 384.0 / 132;
  const double reference = 2048.0 / 132;
  CHECK(attention_kernel_time_s(flops, 2048, AttentionBackend::fused, false, h100, 384) ==
        Approx(flops / (476e12 * 0.91) * (waves + 1.0) / waves * reference / (reference + 1.0)));
  CHECK(attention_kernel_time_s(flops, 2048, AttentionBackend::fused, false, h100, 384) ==
        Approx(flops / (375e12 * 0.91)).epsilon(0.02));
  // No curve on the A100: the caller prices the core as products.
  CHECK(attention_kernel_time_s(flops, 8192, AttentionBackend::auto_select, false, device_preset("a100")) == 0.0);
}

TEST_CASE("a step of many nodes computes at its slowest node's pace") {
  const DeviceSpec h100 = device_preset("h100");
  CHECK(h100.kernels.node_pace_spread == 0.02);
  CHECK(slowest_node_slowdown(h100.kernels, 1) == 1.0);
  CHECK(slowest_node_slowdown(h100.kernels, 0) == 1.0);
  // Two nodes: the larger of two draws, 0.5642 standard deviations on average (Blom: 0.5895).
  CHECK(slowest_node_slowdown(h100.kernels, 2) == Approx(1 + 0.02 * 0.5895).epsilon(1e-4));
  CHECK(slowest_node_slowdown(h100.kernels, 256) == Approx(1 + 0.02 * 2.8150).epsilon(1e-4));
  // It grows ever more slowly: as the square root of the logarithm of the nodes.
  const double at_1k = slowest_node_slowdown(h100.kernels, 1024) - 1;
  const double at_2k = slowest_node_slowdown(h100.kernels, 2048) - 1;
  CHECK(at_2k > at_1k);
  CHECK(at_2k - at_1k < at_1k - (slowest_node_slowdown(h100.kernels, 512) - 1) + 1e-12);
  // The A100's figures were fitted at their own scales: no spread.
  CHECK(slowest_node_slowdown(device_preset("a100").kernels, 384) == 1.0);
}
