// The per-shape efficiency model of a device (efficiency.hpp), its figures from
// reference/ANCHORS.md and docs/MODEL.md:
// - H100: an 8192^3 bf16 product runs at 798 TFLOP/s alone (measured); 2048 tiles of 128 x 256
//   in 16 waves over 132 SMs (0.970 of the slots used), k = 8192 against a tile overhead worth
//   128 (0.985), so the tiles' own fraction of the 989 TFLOP/s peak is 0.845; in a training step
//   every lone figure runs at the sustained 0.77 (fitted on Nemotron-4 15B's runs): 614 TFLOP/s;
// - FP8 on the H100: 0.72 of 1979 TFLOP/s a tile, its prologue worth 256 elements of k: an
//   8192^3 product at 0.72 x 0.970 x 0.970 x 0.77 of 1979 = 1034 TFLOP/s; the A100 has none;
// - attention: cuDNN's measured 529 TFLOP/s causal forward at 8k keys, FlashAttention-2's 333,
//   between two measured lengths linear in log2(keys): 4k..8k's midpoint 6k is half-way, x 0.77;
// - 12 x 11 = 132 output tiles fill one wave; one more row of output makes 13 x 11 tiles, two
//   waves, twice the time;
// - k = 256 runs the tiles at 2/3 of their rate (the overhead is half the work);
// - the tile turns to suit the shape: (2048 x 128) outputs cost what (128 x 2048) ones do;
// - a matrix-vector product (m = 1: 32 tiles, k split 4 ways over the 132 SMs) is memory-bound:
//   its 2(k + kn + n) bytes over 0.9 x 3.35 TB/s;
// - A100: about 236 TFLOP/s on large products (fitted to docs/VALIDATION.md's runs); H200: the
//   H100's compute with 4.8 TB/s, so memory-bound work takes 3.35/4.8 of the H100's time;
// - with a constant efficiency (--efficiency 0.5) a product is its FLOPs over half the peak and
//   element-wise work is free, as before the per-shape model.
#include <catch2/catch.hpp>

#include <cmath>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/efficiency.hpp"

using namespace pipescope;
using namespace pipescope::sim;

TEST_CASE("a large product on an H100 runs at the measured 798 TFLOP/s alone, 0.77 of that in a step") {
  DeviceSpec lone = device_preset("h100");
  lone.kernels.sustained_fraction = 1;
  const GemmShape big{8192, 8192, 8192};
  CHECK(achieved_flops_per_s(big, lone) == Approx(798e12).epsilon(0.002));
  const DeviceSpec h100 = device_preset("h100");
  CHECK(h100.per_shape());
  CHECK(achieved_flops_per_s(big, h100) == Approx(0.77 * 798e12).epsilon(0.002));
  CHECK(gemm_time_s(big, h100) == Approx(big.flops() / (0.77 * 798e12)).epsilon(0.002));
  // Batched: the same work in 8 products of a quarter of the rows.
  CHECK(gemm_time_s({2048, 8192, 8192, 4}, h100) == Approx(gemm_time_s(big, h100)).epsilon(0.01));
}

TEST_CASE("small and ragged products run slower than the roof") {
  const DeviceSpec h100 = device_preset("h100");
  const double one_wave = gemm_time_s({128.0 * 12, 256.0 * 11, 8192}, h100);
  const double two_waves = gemm_time_s({128.0 * 12 + 1, 256.0 * 11, 8192}, h100);
  CHECK(two_waves == Approx(2 * one_wave));
  const double thin_k = achieved_flops_per_s({8192, 8192, 256}, h100);
  const double saturated = achieved_flops_per_s({8192, 8192, 8192}, h100);
  CHECK(thin_k == Approx(saturated * (2.0 / 3) * (8192.0 + 128) / 8192).epsilon(0.001));
  // A matrix-vector product moves its matrix once: memory-bound.
  const GemmShape vector{1, 8192, 8192};
  CHECK(gemm_time_s(vector, h100) == Approx(vector.bytes() / (3.35e12 * 0.9 * 0.77)));
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
  CHECK(memory_bound_time_s(1e9, h100) == Approx(1e9 / (3.35e12 * 0.9 * 0.77)));
  CHECK(memory_bound_time_s(1e9, h200) == Approx(memory_bound_time_s(1e9, h100) * 3.35 / 4.8));
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
  CHECK(fp8 == Approx(0.72 * 0.970 * (8192.0 / (8192 + 256)) * 0.77 * 1979e12).epsilon(0.002));
  CHECK(fp8 == Approx(1034e12).epsilon(0.01));
  // One-byte operands: a matrix-vector product moves half the matrix bytes.
  const GemmShape vector{1, 8192, 8192};
  CHECK(vector.fp8_bytes() == 8192 + 8192.0 * 8192 + 2 * 8192);
  CHECK(gemm_time_s(vector, h100, GemmPrecision::fp8) == Approx(vector.fp8_bytes() / (3.35e12 * 0.9 * 0.77)));
  CHECK_THROWS_WITH(gemm_time_s(big, device_preset("a100"), GemmPrecision::fp8), Catch::Contains("no FP8"));
}

TEST_CASE("fused attention follows its measured curve by the keys each query meets") {
  const DeviceSpec h100 = device_preset("h100");
  const double flops = 1e12;
  const double fused_8k = attention_kernel_time_s(flops, 8192, AttentionBackend::fused, false, h100);
  CHECK(fused_8k == Approx(flops / (529e12 * 0.77)));
  CHECK(attention_kernel_time_s(flops, 8192, AttentionBackend::flash, false, h100) == Approx(flops / (333e12 * 0.77)));
  CHECK(attention_kernel_time_s(flops, 8192, AttentionBackend::auto_select, false, h100) == fused_8k);
  CHECK(attention_kernel_time_s(flops, 8192, AttentionBackend::fused, true, h100) == Approx(flops / (518e12 * 0.77)));
  // 6k keys: half-way between 4k (518) and 8k (529) in log2.
  const double midpoint = 518e12 + (529e12 - 518e12) * (std::log2(6.0) - 2);
  CHECK(attention_kernel_time_s(flops, 6144, AttentionBackend::fused, false, h100) == Approx(flops / (midpoint * 0.77)));
  // Beyond the measured lengths: the nearest.
  CHECK(attention_kernel_time_s(flops, 100, AttentionBackend::fused, false, h100) == Approx(flops / (315e12 * 0.77)));
  CHECK(attention_kernel_time_s(flops, 1 << 20, AttentionBackend::fused, false, h100) == Approx(flops / (539e12 * 0.77)));
  // No curve on the A100: the caller prices the core as products.
  CHECK(attention_kernel_time_s(flops, 8192, AttentionBackend::auto_select, false, device_preset("a100")) == 0.0);
}
