// Binding each local rank to cores of its own (pprun --bind-cores, as DeepSpeed's launcher does
// with --bind_cores_to_rank). Ranks that share a machine otherwise share all its cores: the
// scheduler moves their threads from core to core, and one rank's communication threads
// preempt another rank's computation. Every thread of a rank is bound, its transport's
// included: on this project's 2-core machine, leaving Gloo's threads free to run on either
// core made interleaved 1F1B 24% and GPipe 17% slower than binding them too
// (docs/BENCHMARKS.md).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace pipescope::exec {

// The cores this thread may run on (its affinity mask), ascending.
std::vector<int> allowed_cores();

// The cores thread `tid` of this process may run on; empty when it has ended.
std::vector<int> thread_cores(pid_t tid);

// Local rank `local_rank`'s share when `local_world_size` ranks split `cores`: contiguous slices
// in the order given, as even as they come (the first cores.size() % local_world_size ranks get
// one core more). Throws UsageError when there are fewer cores than ranks.
std::vector<int> core_share(const std::vector<int>& cores, int local_rank, int local_world_size);

// The threads of this process (their ids), ascending.
std::vector<pid_t> process_threads();

// Binds `threads` to `cores`. A thread that has ended meanwhile is skipped; throws
// std::runtime_error when the system refuses.
void bind_threads(const std::vector<pid_t>& threads, const std::vector<int>& cores);

// Binds every thread of this process (and so the threads it starts later) to its share of
// allowed_cores(), and returns the share. Throws UsageError as core_share does.
std::vector<int> bind_to_core_share(int local_rank, int local_world_size);

// "0-3,8" for {0, 1, 2, 3, 8}: the notation of taskset and /proc/self/status.
std::string core_list(const std::vector<int>& cores);

}  // namespace pipescope::exec
