// CPU time of threads of this process. pprun records how much CPU its transport's threads take
// in a step: with --bind-cores they share the rank's core with the computation, and every
// message they move (about 350 us of CPU per 64 KiB over Gloo's TCP on this project's VM)
// delays the computation running then (docs/ACCURACY.md).
#pragma once

#include <sys/types.h>

#include <optional>
#include <vector>

namespace pipescope::exec {

// Seconds of CPU thread `tid` of this process has run so far (/proc/self/task/TID/schedstat,
// in nanoseconds); nullopt when the thread has ended or the kernel keeps no schedstat.
std::optional<double> thread_cpu_seconds(pid_t tid);

// The sum over `threads`; a thread that has ended counts as 0, nullopt when none can be read.
std::optional<double> threads_cpu_seconds(const std::vector<pid_t>& threads);

}  // namespace pipescope::exec
