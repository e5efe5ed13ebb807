// Core binding (pprun --bind-cores): each local rank's share of the cores.
// Expected:
// - 8 cores for 3 ranks: slices of 3, 3 and 2 cores, contiguous in the order given, together
//   every core once; 2 cores for 2 ranks: one each; fewer cores than ranks, or a rank outside
//   0..ranks-1: UsageError naming --bind-cores and the cores there are.
// - core_list writes taskset's notation: {0,1,2,3,8,10,11} -> "0-3,8,10-11".
// - bind_to_core_share(1, 2) in a child process with at least 2 cores: afterwards the process
//   may use exactly the second half of its cores, and so may a thread started before the call
//   (libraries start threads of their own when they are loaded) and one started after it;
//   bind_threads gives that one all the cores back; an ended thread has no cores.
// - binds_cores: --bind-cores binds and --no-bind-cores does not, whatever else holds; neither
//   binds a worker of pprun's own launcher (store file set) beside others when each gets a core.
#include <catch2/catch.hpp>

#include <sched.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

#include "pipescope/core/errors.hpp"
#include "launcher.hpp"
#include "pprun/core_binding.hpp"

using namespace pipescope::exec;

TEST_CASE("core_share slices the cores evenly and contiguously") {
  const std::vector<int> cores = {0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(core_share(cores, 0, 3) == std::vector<int>{0, 1, 2});
  CHECK(core_share(cores, 1, 3) == std::vector<int>{3, 4, 5});
  CHECK(core_share(cores, 2, 3) == std::vector<int>{6, 7});
  CHECK(core_share({4, 9}, 0, 2) == std::vector<int>{4});
  CHECK(core_share({4, 9}, 1, 2) == std::vector<int>{9});
  CHECK(core_share({4, 9}, 0, 1) == std::vector<int>{4, 9});
  CHECK_THROWS_MATCHES(core_share({5}, 0, 2), pipescope::UsageError,
                       Catch::Message("--bind-cores: 2 local ranks but only 1 core(s) to share (this process's cores: 5)"));
  CHECK_THROWS_AS(core_share(cores, 3, 3), pipescope::UsageError);
  CHECK_THROWS_AS(core_share(cores, -1, 3), pipescope::UsageError);
}

TEST_CASE("core_list writes ranges as taskset does") {
  CHECK(core_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(core_list({5}) == "5");
  CHECK(core_list({}).empty());
}

TEST_CASE("binding worker: second half of the cores", "[.]") {
  const std::vector<int> before = allowed_cores();
  REQUIRE(before.size() >= 2);
  // A thread that exists before the binding, as OpenBLAS's pool does.
  std::mutex mutex;
  std::condition_variable changed;
  bool bound = false, read = false;
  std::vector<int> seen_by_thread;
  std::thread early([&] {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return bound; });
    seen_by_thread = allowed_cores();
    read = true;
    changed.notify_all();
  });
  const std::vector<int> share = bind_to_core_share(1, 2);
  {
    std::unique_lock lock(mutex);
    bound = true;
    changed.notify_all();
    changed.wait(lock, [&] { return read; });
  }
  early.join();
  CHECK(share == std::vector<int>(before.begin() + static_cast<long>(before.size() / 2), before.end()));
  CHECK(allowed_cores() == share);
  CHECK(seen_by_thread == share);

  // A thread started afterwards inherits the share; bind_threads gives it all the cores back
  // (pprun's transport threads).
  pid_t late_tid = 0;
  std::vector<int> inherited;
  bool released = false;
  std::thread late([&] {
    std::unique_lock lock(mutex);
    late_tid = gettid();
    inherited = allowed_cores();
    changed.notify_all();
    changed.wait(lock, [&] { return released; });
  });
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return late_tid != 0; });
  }
  CHECK(inherited == share);
  const std::vector<pid_t> threads = process_threads();
  CHECK(std::find(threads.begin(), threads.end(), late_tid) != threads.end());
  bind_threads({late_tid}, before);
  CHECK(thread_cores(late_tid) == before);
  {
    std::unique_lock lock(mutex);
    released = true;
    changed.notify_all();
  }
  late.join();
  // join returns once the thread has cleared its id, which the kernel does before the task is
  // gone: for a moment after, the ended thread may still answer. Wait for it, a bounded time.
  bool gone = false;
  for (int tries = 0; tries < 500 && !gone; ++tries) {
    gone = thread_cores(late_tid).empty();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(gone);  // ended
}

TEST_CASE("bind_to_core_share binds every thread of the process") {
  if (allowed_cores().size() < 2) {
    WARN("one core only: nothing to split");
    return;
  }
  // In a child: the binding would otherwise stay on this test process.
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::filesystem::path log =
      std::filesystem::temp_directory_path() / ("core-binding-worker-" + std::to_string(getpid()) + ".log");
  const int status =
      std::system(("'" + self + "' 'binding worker: second half of the cores' > '" + log.string() + "' 2>&1").c_str());
  std::string output;
  if (std::FILE* file = std::fopen(log.c_str(), "r")) {
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, file)) > 0;) output.append(buffer, n);
    std::fclose(file);
  }
  std::filesystem::remove(log);
  INFO("the worker printed:\n" << output);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("binds_cores: asked or refused decides; else on for pprun's own workers that each get a core") {
  WorkerEnvironment own;
  own.store_file = "/tmp/pprun-x/store";  // set by pprun's launcher only
  own.local_world_size = 2;
  WorkerEnvironment torchrun = own;
  torchrun.store_file.clear();

  CHECK(binds_cores(true, false, torchrun));
  CHECK_FALSE(binds_cores(false, true, own));
  CHECK_FALSE(binds_cores(false, false, torchrun));  // another launcher's cores are kept
  WorkerEnvironment alone = own;
  alone.local_world_size = 1;
  CHECK_FALSE(binds_cores(false, false, alone));  // one worker has every core anyway
  const std::size_t cores = allowed_cores().size();
  CHECK(binds_cores(false, false, own) == (cores >= 2));
  WorkerEnvironment crowded = own;
  crowded.local_world_size = static_cast<int>(cores) + 1;
  CHECK_FALSE(binds_cores(false, false, crowded));  // more workers than cores: they share
}
