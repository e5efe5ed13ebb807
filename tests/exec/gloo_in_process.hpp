// Ranks as threads of the test process over Gloo on loopback, for what the fake transport does
// not do (all-to-all): each thread makes its world from one file store, as pprun's workers do.
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "pipescope/exec/transport.hpp"

namespace pipescope::exec::testing {

inline void run_over_gloo(int ranks, const std::function<void(int rank, Transport& world)>& body) {
  const std::filesystem::path store_file =
      std::filesystem::temp_directory_path() / ("pipescope-gloo-in-process-" + std::to_string(getpid()));
  std::filesystem::remove(store_file);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      WorldOptions options;
      options.store_file = store_file.string();
      options.rank = r;
      options.world_size = ranks;
      options.timeout = std::chrono::milliseconds(20000);
      World world = make_world(at::kCPU, options);
      body(r, *world.transport);
    });
  for (auto& t : threads) t.join();
  std::filesystem::remove(store_file);
}

}  // namespace pipescope::exec::testing
