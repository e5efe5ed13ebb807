#include "pprun/thread_cpu_time.hpp"

#include <fstream>
#include <string>

namespace pipescope::exec {

std::optional<double> thread_cpu_seconds(pid_t tid) {
  // schedstat: time on the CPU (ns), time waiting to run (ns), time slices run.
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  unsigned long long on_cpu_ns = 0;
  if (!(in >> on_cpu_ns)) return std::nullopt;
  return static_cast<double>(on_cpu_ns) * 1e-9;
}

std::optional<double> threads_cpu_seconds(const std::vector<pid_t>& threads) {
  std::optional<double> sum;
  for (pid_t tid : threads)
    if (const auto s = thread_cpu_seconds(tid)) sum = sum.value_or(0.0) + *s;
  return sum;
}

}  // namespace pipescope::exec
