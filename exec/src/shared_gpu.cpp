#include "shared_gpu.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <array>

namespace pipescope::exec {

bool ranks_share_gpus(int local_world_size, int gpus) { return gpus > 0 && local_world_size > gpus; }

std::optional<std::string> nccl_host_id_for_shared_gpu(int rank, int local_world_size, int gpus,
                                                       const char* user_host_id, const std::string& host_name) {
  if (user_host_id != nullptr || !ranks_share_gpus(local_world_size, gpus)) return std::nullopt;
  return fmt::format("{}/pipescope-rank-{}", host_name, rank);
}

std::string shared_gpu_notice(int local_world_size, int gpus) {
  return fmt::format(
      "pprun: {} ranks share {} GPU{} on this node: NCCL connects them as ranks of separate hosts, over sockets, "
      "and their kernels take turns (times are not those of one GPU a rank)\n",
      local_world_size, gpus, gpus == 1 ? "" : "s");
}

std::string this_host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') return "localhost";
  return name.data();
}

}  // namespace pipescope::exec
