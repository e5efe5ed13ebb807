#include "pprun/core_binding.hpp"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "pipescope/core/errors.hpp"

namespace pipescope::exec {

std::vector<int> allowed_cores() {
  std::vector<int> cores = thread_cores(0);
  if (cores.empty()) throw std::runtime_error(fmt::format("cannot read this thread's cores: {}", std::strerror(errno)));
  return cores;
}

std::vector<int> thread_cores(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(tid, sizeof set, &set) != 0) return {};
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

std::vector<int> core_share(const std::vector<int>& cores, int local_rank, int local_world_size) {
  const int n = static_cast<int>(cores.size());
  if (local_world_size < 1 || local_rank < 0 || local_rank >= local_world_size)
    throw UsageError(fmt::format("--bind-cores: local rank {} of {} local ranks", local_rank, local_world_size));
  if (n < local_world_size)
    throw UsageError(fmt::format("--bind-cores: {} local ranks but only {} core(s) to share (this process's cores: {})",
                                 local_world_size, n, core_list(cores)));
  // Slice r is [r * n / w, (r + 1) * n / w): sizes differ by at most one, larger first.
  const int base = n / local_world_size, extra = n % local_world_size;
  const int begin = local_rank * base + std::min(local_rank, extra);
  const int size = base + (local_rank < extra ? 1 : 0);
  return {cores.begin() + begin, cores.begin() + begin + size};
}

std::vector<pid_t> process_threads() {
  std::vector<pid_t> threads;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task"))
    threads.push_back(static_cast<pid_t>(std::stol(task.path().filename().string())));
  std::sort(threads.begin(), threads.end());
  return threads;
}

void bind_threads(const std::vector<pid_t>& threads, const std::vector<int>& cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores) CPU_SET(c, &set);
  for (pid_t tid : threads)
    if (sched_setaffinity(tid, sizeof set, &set) != 0 && errno != ESRCH)  // ESRCH: the thread has ended
      throw std::runtime_error(fmt::format("--bind-cores: cannot bind thread {} to cores {}: {}", tid,
                                           core_list(cores), std::strerror(errno)));
}

std::vector<int> bind_to_core_share(int local_rank, int local_world_size) {
  const std::vector<int> share = core_share(allowed_cores(), local_rank, local_world_size);
  // sched_setaffinity binds one thread; libraries may have started threads of their own
  // already (OpenBLAS starts its pool when it is loaded), so every thread is bound.
  bind_threads(process_threads(), share);
  return share;
}

std::string core_list(const std::vector<int>& cores) {
  std::string text;
  for (std::size_t i = 0; i < cores.size();) {
    std::size_t j = i;
    while (j + 1 < cores.size() && cores[j + 1] == cores[j] + 1) ++j;
    if (!text.empty()) text += ',';
    text += j == i ? std::to_string(cores[i]) : fmt::format("{}-{}", cores[i], cores[j]);
    i = j + 1;
  }
  return text;
}

}  // namespace pipescope::exec
