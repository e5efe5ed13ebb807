// Thread CPU time (thread_cpu_time.hpp), from /proc/self/task/TID/schedstat.
// Expected: a thread that spins until its own clock (CLOCK_THREAD_CPUTIME_ID) says 50 ms reads
// about that much (the scheduler's statistics and the thread clock count the same runtime; a
// loaded host changes the wall time it takes, not the CPU time); its time is read while it runs
// and after it stops; once it has ended it reads nullopt and counts 0 in a sum; a sum of nothing
// readable is nullopt.
#include <catch2/catch.hpp>

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "pprun/thread_cpu_time.hpp"

using namespace pipescope::exec;

TEST_CASE("thread_cpu_seconds reads a spinning thread's CPU time, and nothing once it ended") {
  std::atomic<pid_t> tid{0};
  std::atomic<bool> stop{false}, spun{false};
  std::thread spinner([&] {
    tid = static_cast<pid_t>(syscall(SYS_gettid));
    timespec used{};
    do clock_gettime(CLOCK_THREAD_CPUTIME_ID, &used);
    while (used.tv_sec == 0 && used.tv_nsec < 50'000'000);
    spun = true;
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!spun) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto spent = thread_cpu_seconds(tid);
  REQUIRE(spent);
  CHECK(*spent >= 0.045);
  CHECK(*spent < 1.0);
  const auto sum = threads_cpu_seconds({tid, static_cast<pid_t>(syscall(SYS_gettid))});
  REQUIRE(sum);
  CHECK(*sum >= *spent);
  stop = true;
  spinner.join();
  // join returns once the thread has cleared its id, which the kernel does a moment before the
  // task is gone: wait for it, a bounded time.
  for (int tries = 0; tries < 500 && thread_cpu_seconds(tid); ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_FALSE(thread_cpu_seconds(tid));
  CHECK_FALSE(threads_cpu_seconds({tid}));
  CHECK_FALSE(threads_cpu_seconds({}));
}
