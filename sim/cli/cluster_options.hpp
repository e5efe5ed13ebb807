// The machine that `ppsim simulate` and `ppsim plan` both describe: the device and its
// efficiency, the GPUs of a node and the links inside and between nodes, and the runtime choices
// every configuration on it shares (the tensor-parallel backward's collectives, the gradient
// reduction). Declared here once with their help text, checked and turned into a device and a
// topology once; each command adds the blocks where its help lists them.
#pragma once

#include <boost/program_options.hpp>
#include <optional>
#include <string>
#include <vector>

#include "pipescope/sim/efficiency.hpp"
#include "pipescope/sim/topology.hpp"

namespace pipescope::cli {

// The two commands word three help lines differently (simulate: --efficiency prices every
// operation alike, the bandwidths are per direction); their help stays as it was.
enum class ClusterHelp { simulate, plan };

struct ClusterOptions {
  std::string gpu = "h100";
  double efficiency = 0;                   // 0: the device preset's
  std::optional<double> node_pace_spread;  // nothing: the device preset's
  int gpus_per_node = 8;
  std::string intra_bandwidth = "0";  // 0: the device's NVLink
  std::string inter_bandwidth = "50GB";
  double intra_latency_s = 2e-6;
  double inter_latency_s = 5e-6;
  bool no_async_tp = false;  // --no-async-tensor-model-parallel-allreduce
  bool overlap_grad_reduce = false;

  // --gpu, --efficiency, --node-pace-spread
  void add_device_to(boost::program_options::options_description& options, ClusterHelp help);
  // --gpus-per-node, --intra-bandwidth, --intra-latency, --inter-bandwidth, --inter-latency
  void add_links_to(boost::program_options::options_description& options, ClusterHelp help);
  // --no-async-tensor-model-parallel-allreduce, --overlap-grad-reduce
  void add_runtime_to(boost::program_options::options_description& options);

  // The options' names, without "--", in the order above: what a measured profile replaces.
  static std::vector<const char*> names();

  // Throws UsageError naming the option: an efficiency outside (0, 1] (0 allowed), a node pace
  // spread outside [0, 1), a latency that is not a finite number >= 0.
  void check_numbers() const;
  // Throws UsageError "--gpus-per-node must be at least 1".
  void check_gpus_per_node() const;
  // The --gpu preset with --efficiency and --node-pace-spread where given.
  sim::DeviceSpec device() const;
  // GPUs per node and the two links (an intra-node bandwidth of 0 is `device`'s NVLink); throws
  // UsageError for a bandwidth that does not read or an inter-node one of 0.
  sim::Topology topology(const sim::DeviceSpec& device) const;
};

}  // namespace pipescope::cli
