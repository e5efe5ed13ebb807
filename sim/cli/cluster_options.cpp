#include "cluster_options.hpp"

#include <fmt/format.h>

#include "number_options.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/sim/units.hpp"

namespace po = boost::program_options;

namespace pipescope::cli {

void ClusterOptions::add_device_to(po::options_description& options, ClusterHelp help) {
  const char* efficiency_help =
      help == ClusterHelp::simulate
          ? "a constant fraction of peak FLOP/s for every operation (0: each priced by its shape, docs/MODEL.md)"
          : "achievable fraction of peak FLOP/s (0: the device's, 0.5)";
  // clang-format off
  options.add_options()
      ("gpu", po::value(&gpu)->default_value(gpu), "device: h100, h200, b200, a100")
      ("efficiency", po::value(&efficiency)->default_value(efficiency), efficiency_help)
      ("node-pace-spread", po::value<double>()->notifier([this](double s) { node_pace_spread = s; }),
       "S: how much a node's pace varies from step to step (one standard deviation); a step of N nodes "
       "computes at its slowest node's, 1 + S x the expected largest of N standard normals as long as one "
       "node's (0: every node alike; default: the device's, 0.02 on h100, h200 and b200, 0 on a100)");
  // clang-format on
}

void ClusterOptions::add_links_to(po::options_description& options, ClusterHelp help) {
  const bool simulate = help == ClusterHelp::simulate;
  // clang-format off
  options.add_options()
      ("gpus-per-node", po::value(&gpus_per_node)->default_value(gpus_per_node), "GPUs per node")
      ("intra-bandwidth", po::value(&intra_bandwidth)->default_value(intra_bandwidth),
       simulate ? "bytes/s per direction inside a node (0: the device's NVLink)"
                : "bytes/s inside a node (0: the device's NVLink)")
      ("intra-latency", po::value(&intra_latency_s)->default_value(intra_latency_s, "2e-6"),
       "seconds per transfer inside a node")
      ("inter-bandwidth", po::value(&inter_bandwidth)->default_value(inter_bandwidth),
       simulate ? "bytes/s per direction between nodes" : "bytes/s between nodes")
      ("inter-latency", po::value(&inter_latency_s)->default_value(inter_latency_s, "5e-6"),
       "seconds per transfer between nodes");
  // clang-format on
}

void ClusterOptions::add_runtime_to(po::options_description& options) {
  // clang-format off
  options.add_options()
      ("no-async-tensor-model-parallel-allreduce", po::bool_switch(&no_async_tp),
       "the backward's tensor-parallel collectives wait on the compute stream, as in Megatron before 2022 "
       "(default: each column-parallel linear's runs beside its weight gradient)")
      ("overlap-grad-reduce", po::bool_switch(&overlap_grad_reduce),
       "reduce gradients in buckets during the last backward, as Megatron's --overlap-grad-reduce and torch DDP "
       "do (default: after the backward)");
  // clang-format on
}

std::vector<const char*> ClusterOptions::names() {
  return {"gpu",
          "efficiency",
          "node-pace-spread",
          "gpus-per-node",
          "intra-bandwidth",
          "intra-latency",
          "inter-bandwidth",
          "inter-latency",
          "no-async-tensor-model-parallel-allreduce",
          "overlap-grad-reduce"};
}

void ClusterOptions::check_numbers() const {
  require_efficiency(efficiency, "--efficiency");
  if (node_pace_spread && !(*node_pace_spread >= 0 && *node_pace_spread < 1))
    throw UsageError(fmt::format("--node-pace-spread: must be in [0, 1), not {:g}", *node_pace_spread));
  require_finite_at_least(intra_latency_s, "--intra-latency", 0);
  require_finite_at_least(inter_latency_s, "--inter-latency", 0);
}

void ClusterOptions::check_gpus_per_node() const {
  if (gpus_per_node < 1) throw UsageError("--gpus-per-node must be at least 1");
}

sim::DeviceSpec ClusterOptions::device() const {
  sim::DeviceSpec spec = sim::device_preset(gpu);
  if (efficiency > 0) spec.efficiency = efficiency;
  if (node_pace_spread) spec.kernels.node_pace_spread = *node_pace_spread;
  return spec;
}

sim::Topology ClusterOptions::topology(const sim::DeviceSpec& spec) const {
  check_gpus_per_node();
  sim::Topology topology;
  topology.gpus_per_node = gpus_per_node;
  const std::int64_t intra = sim::parse_bytes(intra_bandwidth, "--intra-bandwidth");
  topology.intra_node = {intra > 0 ? static_cast<double>(intra) : spec.nvlink.bandwidth_bytes_per_s, intra_latency_s};
  const std::int64_t inter = sim::parse_bytes(inter_bandwidth, "--inter-bandwidth");
  if (inter <= 0) throw UsageError("--inter-bandwidth must be > 0");
  topology.inter_node = {static_cast<double>(inter), inter_latency_s};
  return topology;
}

}  // namespace pipescope::cli
