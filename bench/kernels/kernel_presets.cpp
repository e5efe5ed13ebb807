// Sets kernel figures measured on a GPU (bench/kernels/measure_kernels.py's JSON) beside what a
// device preset's model gives for the same shapes (sim/src/efficiency.cpp; the routed experts'
// products as sim/src/expert_layer.cpp prices them), as the figure a kernel reaches alone: the
// preset's sustained fraction, a training step's share of the lone figures, is left out so that
// lone is compared with lone. Prints markdown tables and, per group, the median and the range of
// measured / model.
//
//   bench_kernel_presets bench/kernels/results/h100.json --gpu h100
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "pipescope/sim/efficiency.hpp"

namespace {

using nlohmann::json;
using pipescope::sim::AttentionBackend;
using pipescope::sim::DeviceSpec;
using pipescope::sim::GemmPrecision;
using pipescope::sim::GemmShape;

struct GroupRatios {
  std::vector<double> ratios;

  void add(double r) { ratios.push_back(r); }
  std::string summary() const {
    if (ratios.empty()) return "none";
    std::vector<double> sorted = ratios;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    return fmt::format("median {:.3f}, range {:.3f} to {:.3f} ({} figures)", median, sorted.front(), sorted.back(),
                       sorted.size());
  }
};

void print_products(const json& measured, const DeviceSpec& device, std::map<std::string, GroupRatios>& groups) {
  std::puts("| precision | model | product | role | m x n x k | measured TFLOP/s | model TFLOP/s | measured / model |");
  std::puts("| --- | --- | --- | --- | --- | --- | --- | --- |");
  for (const json& row : measured.at("gemm")) {
    if (row.contains("error")) continue;
    const GemmShape shape{row.at("m").get<double>(), row.at("gemm_n").get<double>(), row.at("gemm_k").get<double>()};
    const bool fp8 = row.at("precision") == "fp8";
    const double model =
        pipescope::sim::achieved_flops_per_s(shape, device, fp8 ? GemmPrecision::fp8 : GemmPrecision::bf16);
    const double got = row.at("tflops").get<double>() * 1e12;
    const std::string label = row.at("model").get<std::string>();
    const std::string config = label == "square" ? ""
                                                 : fmt::format(" tp{} cp{} mbs{}", row.value("tp", 1),
                                                               row.value("cp", 1), row.value("mbs", 1));
    fmt::print("| {} | {}{} | {} | {} | {} x {} x {} | {:.0f} | {:.0f} | {:.2f} |\n", fp8 ? "FP8" : "BF16", label,
               config, row.at("product").get<std::string>(), row.at("role").get<std::string>(), shape.m, shape.n,
               shape.k, got / 1e12, model / 1e12, got / model);
    groups[fp8 ? "FP8 products" : "BF16 products"].add(got / model);
  }
}

// The routed experts' products of the published MoE runs, against expert_times's price
// (sim/src/expert_layer.cpp): experts_here products of one expert's shape. Each shape is measured
// twice, as that many products one after another and as one grouped kernel; an entry whose kernel
// failed is listed with its error. Files measured before the group existed have none.
void print_experts(const json& measured, const DeviceSpec& device, std::map<std::string, GroupRatios>& groups) {
  if (!measured.contains("experts")) return;
  std::puts(
      "\n| precision | model | kernel | product | role | experts x (m x n x k) | measured µs | model µs | measured "
      "TFLOP/s | measured / model |");
  std::puts("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
  for (const json& row : measured.at("experts")) {
    const bool fp8 = row.at("precision") == "fp8";
    const bool per_expert = row.at("method") == "per_expert";
    const double experts_here = row.at("experts_here").get<double>();
    const GemmShape shape{row.at("m").get<double>(), row.at("gemm_n").get<double>(), row.at("gemm_k").get<double>()};
    // The precision the published run did not use is measured too: marked, so that the runs'
    // own figures can be read apart.
    const std::string label =
        fmt::format("{} tp{} cp{} ep{} etp{}{}", row.at("model").get<std::string>(), row.at("tp").get<int>(),
                    row.at("cp").get<int>(), row.at("ep").get<int>(), row.at("etp").get<int>(),
                    row.value("run_precision", true) ? "" : " (not as run)");
    const std::string prefix =
        fmt::format("| {} | {} | {} | {} | {} | {} x ({} x {} x {}) |", fp8 ? "FP8" : "BF16", label,
                    row.at("kernel").get<std::string>(), row.at("product").get<std::string>(),
                    row.at("role").get<std::string>(), experts_here, shape.m, shape.n, shape.k);
    if (row.contains("error")) {
      fmt::print("{} error: {} | | | |\n", prefix, row.at("error").get<std::string>());
      continue;
    }
    const double model_s =
        experts_here * pipescope::sim::gemm_time_s(shape, device, fp8 ? GemmPrecision::fp8 : GemmPrecision::bf16);
    const double got_s = row.at("seconds").get<double>();
    // As the other groups: of FLOP/s, the model's time over the measured (above 1: faster than
    // modelled).
    fmt::print("{} {:.0f} | {:.0f} | {:.0f} | {:.2f} |\n", prefix, got_s * 1e6, model_s * 1e6,
               row.at("tflops").get<double>(), model_s / got_s);
    groups[fmt::format("experts {}, {}", fp8 ? "FP8" : "BF16",
                       per_expert ? "one product per expert" : "one grouped kernel")]
        .add(model_s / got_s);
  }
}

void print_attention(const json& measured, const DeviceSpec& device, std::map<std::string, GroupRatios>& groups) {
  std::puts("\n| backend | shape | keys | forward TFLOP/s (model) | backward TFLOP/s (model) |");
  std::puts("| --- | --- | --- | --- | --- |");
  for (const json& row : measured.at("attention")) {
    if (row.contains("error")) continue;
    const bool flash = row.at("backend") == "flash";
    const double keys = row.at("seq").get<double>();
    const double forward = row.at("forward_tflops").get<double>() * 1e12;
    const double backward = row.at("backward_tflops").get<double>() * 1e12;
    // The model's curve at these keys and blocks: FLOP/s = flops / time, for any flops.
    const AttentionBackend backend = flash ? AttentionBackend::flash : AttentionBackend::fused;
    const double blocks = row.at("batch").get<double>() * row.at("heads").get<double>() * std::ceil(keys / 128);
    const double model_forward =
        1e12 / pipescope::sim::attention_kernel_time_s(1e12, keys, backend, false, device, blocks);
    const double model_backward =
        1e12 / pipescope::sim::attention_kernel_time_s(1e12, keys, backend, true, device, blocks);
    fmt::print("| {} | {}, {} heads, head dim {} | {:.0f} | {:.0f} ({:.0f}) | {:.0f} ({:.0f}) |\n",
               flash ? "FlashAttention-2" : "cuDNN", row.at("label").get<std::string>(), row.at("heads").get<int>(),
               row.at("head_dim").get<int>(), keys, forward / 1e12, model_forward / 1e12, backward / 1e12,
               model_backward / 1e12);
    const std::string group = flash ? "FlashAttention-2" : "cuDNN attention";
    groups[group + " forward"].add(forward / model_forward);
    groups[group + " backward"].add(backward / model_backward);
  }
}

void print_elementwise(const json& measured, const DeviceSpec& device, std::map<std::string, GroupRatios>& groups) {
  const double model = device.memory_bandwidth_bytes_per_s * device.kernels.memory_bandwidth_fraction;
  fmt::print(
      "\n| operation | rows x hidden | measured GB/s | model GB/s | measured / model |\n| --- | --- | --- | --- | --- "
      "|\n");
  for (const json& row : measured.at("elementwise")) {
    if (row.contains("error")) continue;
    const double got = row.at("gb_per_s").get<double>() * 1e9;
    const std::string op = row.at("op").get<std::string>();
    fmt::print("| {} | {} x {} | {:.0f} | {:.0f} | {:.2f} |\n", op, row.at("rows").get<int>(),
               row.at("hidden").get<int>(), got / 1e9, model / 1e9, got / model);
    // Streaming kernels (one read and one write per element, fused) are what the model prices;
    // the norms and the unfused eager compositions are listed apart.
    const bool streaming = op == "copy" || op == "add" || op == "gelu";
    groups[streaming ? "element-wise, streaming" : "element-wise, " + op].add(got / model);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || std::string(argv[2]) != "--gpu") {
    std::fprintf(stderr, "usage: bench_kernel_presets MEASURED.json --gpu PRESET\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "bench_kernel_presets: error: cannot read %s\n", argv[1]);
    return 1;
  }
  try {
    const json measured = json::parse(in);
    DeviceSpec device = pipescope::sim::device_preset(argv[3]);
    device.kernels.sustained_fraction = 1;  // lone against lone
    const json& facts = measured.at("device");
    fmt::print(
        "Measured on {} ({} SMs), torch {}, CUDA {}, cuDNN {}; model: preset {} without its sustained fraction.\n\n",
        facts.at("name").get<std::string>(), facts.at("multiprocessors").get<int>(),
        facts.at("torch").get<std::string>(), facts.at("cuda").get<std::string>(), facts.at("cudnn").get<int>(),
        argv[3]);
    std::map<std::string, GroupRatios> groups;
    print_products(measured, device, groups);
    print_experts(measured, device, groups);
    print_attention(measured, device, groups);
    print_elementwise(measured, device, groups);
    std::puts("\n| group | measured / model |\n| --- | --- |");
    for (const auto& [name, ratios] : groups) fmt::print("| {} | {} |\n", name, ratios.summary());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernel_presets: error: %s: %s\n", argv[1], e.what());
    return 1;
  }
  return 0;
}
