// Several ranks of one node on one GPU: more local ranks than GPUs, as on a workstation with one
// GPU that runs a pipeline of four. NCCL tells ranks apart by host and GPU, and refuses two ranks
// of one communicator on one device ("Duplicate GPU detected"). Each rank that shares a GPU gets
// a host identity of its own (NCCL_HOSTID, which NCCL reads in place of the machine's), so NCCL
// connects the ranks as it connects ranks of different hosts: through its network transport over
// this machine's sockets. Slower than between GPUs, and their kernels take turns on the one GPU,
// but the same program, the same instructions and the same numbers as on separate GPUs.
#pragma once

#include <optional>
#include <string>

namespace pipescope::exec {

// Whether the ranks started on this node (LOCAL_WORLD_SIZE; 0 when unknown) outnumber its GPUs.
bool ranks_share_gpus(int local_world_size, int gpus);

// The NCCL_HOSTID `rank` runs with: one per rank, `host_name` and the rank, when ranks share
// GPUs; nothing when they do not, or when the user set NCCL_HOSTID (`user_host_id`, null when
// unset), whose choice stands.
std::optional<std::string> nccl_host_id_for_shared_gpu(int rank, int local_world_size, int gpus,
                                                       const char* user_host_id, const std::string& host_name);

// What pprun says once when ranks share GPUs: that NCCL connects them over sockets and that
// their kernels take turns, so a trace's times are not those of one GPU a rank. One line.
std::string shared_gpu_notice(int local_world_size, int gpus);

// This machine's name (gethostname), or "localhost" when it has none.
std::string this_host_name();

}  // namespace pipescope::exec
