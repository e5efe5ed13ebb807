// Thread CPU time (thread_cpu_time.hpp), from /proc/self/task/TID/schedstat.
// Expected: a thread that spins for 50 ms of wall time has run at least 10 ms of CPU (it may
// share its core) and at most its wall time and a little; its time is read while it runs and
// after it stops; once it has ended it reads nullopt and counts 0 in a sum; a sum of nothing
// readable is nullopt.
#include <catch2/catch.hpp>

#include <sys/syscall.h>
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
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    while (std::chrono::steady_clock::now() < until) {
    }
    spun = true;
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!spun) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto spent = thread_cpu_seconds(tid);
  REQUIRE(spent);
  CHECK(*spent >= 0.010);
  CHECK(*spent < 1.0);
  const auto sum = threads_cpu_seconds({tid, static_cast<pid_t>(syscall(SYS_gettid))});
  REQUIRE(sum);
  CHECK(*sum >= *spent);
  stop = true;
  spinner.join();
  CHECK_FALSE(thread_cpu_seconds(tid));
  CHECK_FALSE(threads_cpu_seconds({tid}));
  CHECK_FALSE(threads_cpu_seconds({}));
}
