// Waiting for a transfer with the core kept busy (transport_wait.hpp; Gloo's waits in
// transport_gloo.cpp; the expert exchanges' limit in ExpertParallel).
// Expected:
// - a thread's spin limit is zero until a SpinWhileWaiting scope sets it, nested scopes restore
//   the one before, and another thread keeps its own;
// - two ranks over Gloo on loopback exchange rows by all-to-all with a spin limit of 20 ms, and
//   each gets the other's rows, as without one;
// - a wait that outlasts its spin limit (1 ms, the peer 200 ms late) goes on to block and
//   completes with the rows: spinning never ends a wait early;
// - an ExpertParallel spins for as long as it is told (none by default), and its exchanges
//   give the same rows either way.
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <thread>

#include "gloo_in_process.hpp"
#include "moe/all_to_all.hpp"
#include "pipescope/exec/expert_parallel.hpp"
#include "transport_wait.hpp"

using namespace pipescope;
using namespace pipescope::exec;
using namespace std::chrono_literals;

namespace {

// Each rank sends its row r (of rows 10 r, 10 r + 1) to rank r; returns what arrived.
at::Tensor exchange_rows_over(Transport& world, int rank) {
  const at::Tensor input = at::tensor({10.0F * rank, 10.0F * rank + 1});
  at::Tensor output = at::empty({2});
  world.all_to_all(output, input, {1, 1}, {1, 1})->wait(20000ms);
  return output;
}

}  // namespace

TEST_CASE("a thread's spin limit is set by its scope and restored after it", "[transport]") {
  CHECK(spin_limit_of_this_thread().count() == 0);
  {
    const SpinWhileWaiting outer(500us);
    CHECK(spin_limit_of_this_thread() == 500us);
    {
      const SpinWhileWaiting inner(0us);
      CHECK(spin_limit_of_this_thread().count() == 0);
    }
    CHECK(spin_limit_of_this_thread() == 500us);
    std::chrono::microseconds other{-1};
    std::thread([&other] { other = spin_limit_of_this_thread(); }).join();
    CHECK(other.count() == 0);
  }
  CHECK(spin_limit_of_this_thread().count() == 0);
}

TEST_CASE("an all-to-all waited with the core kept busy gives the rows, a late peer included", "[transport]") {
  std::array<at::Tensor, 2> spun, late;
  testing::run_over_gloo(2, [&](int r, Transport& world) {
    {
      const SpinWhileWaiting spin(20ms);
      spun[r] = exchange_rows_over(world, r);
    }
    // Rank 1 comes 200 ms late: rank 0's 1 ms of spinning runs out and its wait blocks.
    if (r == 1) std::this_thread::sleep_for(200ms);
    const SpinWhileWaiting spin(1ms);
    late[r] = exchange_rows_over(world, r);
  });
  for (const auto& arrived : {spun, late}) {
    CHECK(at::equal(arrived[0], at::tensor({0.0F, 10.0F})));
    CHECK(at::equal(arrived[1], at::tensor({1.0F, 11.0F})));
  }
}

TEST_CASE("an expert-parallel group spins as long as it is told, and exchanges the same rows", "[transport][moe]") {
  ExpertParallel unset(2, 2);
  CHECK(unset.spin_limit().count() == 0);
  std::array<at::Tensor, 2> blocking, spinning;
  std::array<std::chrono::microseconds, 2> limits{};
  testing::run_over_gloo(2, [&](int r, Transport& world) {
    ExpertParallel expert_parallel(2, 2);
    expert_parallel.connect(world, r, 2, 0, 1, 20000ms);
    const at::Tensor rows = at::arange(4, at::kFloat).reshape({2, 2}).add(10.0 * r);
    const moe::AllToAllKinds kinds{traces::EventKind::AllToAllDispatchForward,
                                   traces::EventKind::AllToAllDispatchBackward};
    blocking[r] = moe::all_to_all(rows, {1, 1}, {1, 1}, expert_parallel, kinds, {1, 1}, "blocks.0");
    expert_parallel.set_spin_limit(20ms);
    limits[r] = expert_parallel.spin_limit();
    spinning[r] = moe::all_to_all(rows, {1, 1}, {1, 1}, expert_parallel, kinds, {1, 1}, "blocks.0");
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(limits[r] == 20ms);
    CHECK(at::equal(blocking[r], spinning[r]));
  }
  CHECK(at::equal(blocking[0][1], at::tensor({10.0F, 11.0F})));
}
