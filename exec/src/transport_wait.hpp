// How a thread waits for a transfer. By default a wait blocks: the thread sleeps until the
// transport's threads complete the transfer. Around a wait that is short and frequent, on a core
// of its own, the thread may instead keep the core busy (SpinWhileWaiting): it checks for
// completion, yielding the core to any other runnable thread of it (the transport's own) in
// between, and blocks only after `limit`. On a virtual machine a core that sleeps is handed
// back to the host, and the thread that wakes there pays for it twice: the wake-up itself, and
// the compute after it, which runs slower for a while (tiny-moe's expert exchanges on this
// machine: docs/MOE-EXEC.md, "Waiting for an exchange"). A core shared with other ranks must
// not spin: the spinning would take it from them.
#pragma once

#include <chrono>

namespace pipescope::exec {

class SpinWhileWaiting {
 public:
  explicit SpinWhileWaiting(std::chrono::microseconds limit);
  ~SpinWhileWaiting();
  SpinWhileWaiting(const SpinWhileWaiting&) = delete;
  SpinWhileWaiting& operator=(const SpinWhileWaiting&) = delete;

 private:
  std::chrono::microseconds saved_;
};

// How long this thread's next wait may spin before it blocks; zero: it blocks at once.
std::chrono::microseconds spin_limit_of_this_thread();

}  // namespace pipescope::exec
