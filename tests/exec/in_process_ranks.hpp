// Ranks as threads of the test process over the fake transport: the engine tests train the same
// model on several ranks without starting processes.
#pragma once

#include <ATen/Parallel.h>

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "pipescope/exec/transport.hpp"

namespace pipescope::exec::testing {

// Runs `body(rank, transport, run)` for every rank on its own thread, one intra-op thread each
// (the bitwise comparisons need it). A rank that throws keeps the message in `run.error` and
// fails its transfers, so that its peers stop with an error instead of waiting for it.
// `Run` is the per-rank result; it needs a `std::string error`.
template <typename Run>
std::vector<Run> run_in_process_ranks(int ranks, const std::function<void(int rank, Transport& transport, Run& run)>& body) {
  at::set_num_threads(1);
  auto network = make_fake_network(ranks);
  std::vector<Run> runs(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      Run& run = runs[static_cast<std::size_t>(r)];
      try {
        auto transport = make_fake_transport(network, r);
        body(r, *transport, run);
      } catch (const std::exception& e) {
        run.error = e.what();
        fake_network_fail_rank(*network, r);
      }
    });
  for (auto& t : threads) t.join();
  return runs;
}

}  // namespace pipescope::exec::testing
