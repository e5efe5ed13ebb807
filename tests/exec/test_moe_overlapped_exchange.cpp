// An exchange of one pass of an overlapped F&B step (moe/all_to_all.cpp with
// runtime/compute_baton.hpp), its timing settled by the test rather than by the machine's load.
// Scenario: two ranks (threads, over Gloo on loopback), expert parallelism 2, one row each way.
// Rank 0 runs a pair: pass 0 (a forward) holds the baton and starts its dispatch, which gives
// the baton to pass 1 (a backward); pass 1 "computes" (holds the baton) until rank 1's exchange
// is over and 300 ms more, so rank 0's bytes are in long before pass 0 can compute again.
// Rank 1 exchanges alone, outside any pair, once pass 1 holds the baton (so that no byte of
// rank 0's exchange is in before then).
// Expected:
// - the rows arrive as sent (rank 0 gets rank 1's first row, rank 1 rank 0's second);
// - pass 0 held the baton twice: before its exchange and after it; pass 1 once, in between;
// - rank 0's record names pass 0's stage and micro-batch, starts within pass 0's first hold's
//   end, and ends when its bytes were in: inside pass 1's hold, at least 200 ms before pass 0
//   took the baton back (not when the pass got the compute back).
#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <thread>

#include "gloo_in_process.hpp"
#include "moe/all_to_all.hpp"
#include "pipescope/exec/expert_parallel.hpp"
#include "pipescope/exec/transport.hpp"
#include "runtime/compute_baton.hpp"

using namespace pipescope;
using namespace pipescope::exec;
using namespace std::chrono_literals;

namespace {

using Hold = std::pair<double, double>;

at::Tensor exchange_one_row_each_way(int rank, ExpertParallel& expert_parallel, std::vector<AllToAllRecord>& records) {
  const at::Tensor rows = at::arange(2 * 3, at::kFloat).reshape({2, 3}).add(10.0 * rank);
  const moe::AllToAllKinds kinds{traces::EventKind::AllToAllDispatchForward,
                                 traces::EventKind::AllToAllDispatchBackward};
  at::Tensor out = moe::all_to_all(rows, {1, 1}, {1, 1}, expert_parallel, kinds, {1, 1}, "blocks.0");
  records = expert_parallel.take_records();
  return out;
}

// Waits for `flag`, at most 30 s (a rank that failed never sets it; its error is the test's).
void wait_for(const std::atomic<bool>& flag) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!flag && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
}

}  // namespace

TEST_CASE("an overlapped pass's exchange ends when its bytes are in, not when the pass computes again",
          "[moe][all_to_all]") {
  std::array<std::vector<AllToAllRecord>, 2> records;
  std::array<at::Tensor, 2> arrived;
  std::array<std::vector<Hold>, 2> holds;
  std::atomic<bool> other_pass_computing{false};
  std::atomic<bool> rank_1_done{false};
  const Instruction forward{Op::ForwardPass, 1, 3};
  const Instruction backward{Op::BackwardPass, 1, 0};

  testing::run_over_gloo(2, [&](int r, Transport& world) {
    ExpertParallel expert_parallel(2, 2);
    expert_parallel.connect(world, r, 2, 0, 1, 20000ms);
    if (r == 1) {
      wait_for(other_pass_computing);
      arrived[1] = exchange_one_row_each_way(1, expert_parallel, records[1]);
      rank_1_done = true;
      return;
    }
    const Instruction* current = nullptr;
    runtime::ComputeBaton baton(current);
    std::thread other_pass([&] {
      const runtime::PassScope scope(backward, &baton, 1);
      const runtime::HeldBaton held(baton, 1, backward);  // once pass 0 waits on the wire
      other_pass_computing = true;
      wait_for(rank_1_done);
      std::this_thread::sleep_for(300ms);
    });
    {
      const runtime::PassScope scope(forward, &baton, 0);
      const runtime::HeldBaton held(baton, 0, forward);
      arrived[0] = exchange_one_row_each_way(0, expert_parallel, records[0]);
    }
    other_pass.join();
    holds = {baton.holds(0), baton.holds(1)};
  });

  CHECK(at::equal(arrived[0][1], at::arange(3, at::kFloat).add(10.0)));
  CHECK(at::equal(arrived[1][0], at::arange(3, 6, at::kFloat)));
  REQUIRE(holds[0].size() == 2);
  REQUIRE(holds[1].size() == 1);
  CHECK(holds[0][0].second <= holds[1][0].first);
  CHECK(holds[1][0].second <= holds[0][1].first);
  REQUIRE(records[0].size() == 1);
  const AllToAllRecord& exchange = records[0][0];
  CHECK(exchange.kind == traces::EventKind::AllToAllDispatchForward);
  CHECK(exchange.stage == forward.stage);
  CHECK(exchange.micro_batch == forward.micro_batch);
  CHECK(exchange.start_us <= holds[0][0].second);
  CHECK(exchange.end_us > holds[1][0].first);
  CHECK(exchange.end_us < holds[1][0].second);
  CHECK(exchange.end_us < holds[0][1].first - 200'000);
  REQUIRE(records[1].size() == 1);
  CHECK(records[1][0].stage == -1);
}
