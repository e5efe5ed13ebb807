// The experts' calls and exchanges timed by a device that times its own work (a GPU, where the
// host returns from a call before its kernels ran): moe/expert_calls.hpp, the ExpertParallel
// records of pipescope/exec/expert_parallel.hpp, moe/all_to_all.hpp.
// Scenario: a scripted device times every piece of work from 5000 to 5600 us.
// - An expert call (one linear map on 6 rows of 4) logged on that device gives a forward and,
//   through autograd, a backward record, each spanning 5000-5600 us: two timings started, both
//   stopped. On a device that leaves timing to the host (no span scripted) the records keep the
//   host's clock, which reads far from 5000 us, and no timing is started.
// - Two ranks (threads, over Gloo on loopback: the fake transport has no all-to-all) exchange one
//   row each way (expert parallelism 2): the
//   forward's dispatch, which began on the host at 4000 us (its count exchange), keeps that start
//   and ends at the device's 5600 us; the backward's exchange (the gradients going back) spans
//   the device's 5000-5600 us; the rows arrive as sent (each rank's first row goes to rank 0,
//   its second to rank 1).
#include <catch2/catch.hpp>

#include <array>
#include <chrono>

#include "moe/all_to_all.hpp"
#include "moe/expert_calls.hpp"
#include "pipescope/exec/expert_parallel.hpp"
#include "gloo_in_process.hpp"
#include "pipescope/exec/transport.hpp"
#include "scripted_device.hpp"

using namespace pipescope;
using namespace pipescope::exec;
using namespace std::chrono_literals;
using pipescope::exec::testing::ScriptedDevice;

namespace {

// The device's span of every piece of work in these tests.
constexpr double kDeviceStartUs = 5000;
constexpr double kDeviceEndUs = 5600;

std::shared_ptr<ScriptedDevice> timing_device() {
  auto device = std::make_shared<ScriptedDevice>();
  device->timed_span = std::make_pair(kDeviceStartUs, kDeviceEndUs);
  return device;
}

std::vector<moe::ExpertCallRecord> forward_and_backward_call(moe::ExpertCallLog& log) {
  const at::Tensor weight = at::ones({4, 4}).requires_grad_(true);
  const at::Tensor rows = at::ones({6, 4}).requires_grad_(true);
  const auto expert = [&weight](const at::Tensor& x) { return at::matmul(x, weight); };
  moe::timed_expert_call(expert, rows, log, "blocks.0", 1).sum().backward();
  return log.take_records();
}

}  // namespace

TEST_CASE("on a device that times its work, an expert call's forward and backward spans are the device's",
          "[moe][expert_calls]") {
  const auto device = timing_device();
  moe::ExpertCallLog log;
  log.time_on(device);
  const auto records = forward_and_backward_call(log);
  REQUIRE(records.size() == 2);
  CHECK_FALSE(records[0].backward);
  CHECK(records[1].backward);
  for (const auto& r : records) {
    CHECK(r.start_us == kDeviceStartUs);
    CHECK(r.end_us == kDeviceEndUs);
    CHECK(r.rows == 6);
  }
  CHECK(device->timings_started == 2);
  CHECK(device->timings_stopped == 2);
}

TEST_CASE("on a device that leaves timing to the host, an expert call keeps the host's clock", "[moe][expert_calls]") {
  const auto device = std::make_shared<ScriptedDevice>();  // no span: as the CPU
  moe::ExpertCallLog log;
  log.time_on(device);
  const auto records = forward_and_backward_call(log);
  REQUIRE(records.size() == 2);
  for (const auto& r : records) {
    CHECK(r.start_us != kDeviceStartUs);
    CHECK(r.end_us >= r.start_us);
  }
  CHECK(device->timings_started == 0);
}

TEST_CASE("on a device that times its work, an exchange's span is the device's, the dispatch's start the host's",
          "[moe][all_to_all]") {
  std::array<std::vector<AllToAllRecord>, 2> records;
  std::array<at::Tensor, 2> arrived;
  std::array<std::shared_ptr<ScriptedDevice>, 2> devices{timing_device(), timing_device()};
  testing::run_over_gloo(2, [&](int r, Transport& world) {
    ExpertParallel expert_parallel(2, 2);
    expert_parallel.connect(world, r, 2, 0, 1, 20000ms);
    expert_parallel.time_on(devices[r]);
    // Row 0 goes to rank 0, row 1 to rank 1.
    const at::Tensor rows = at::arange(2 * 3, at::kFloat).reshape({2, 3}).add(10.0 * r).requires_grad_(true);
    const moe::AllToAllKinds kinds{traces::EventKind::AllToAllDispatchForward,
                                   traces::EventKind::AllToAllDispatchBackward};
    const double count_exchange_started_us = 4000;
    at::Tensor out =
        moe::all_to_all(rows, {1, 1}, {1, 1}, expert_parallel, kinds, {1, 1}, "blocks.0", count_exchange_started_us);
    arrived[r] = out.detach().clone();
    out.sum().backward();
    records[r] = expert_parallel.take_records();
  });

  CHECK(at::equal(arrived[0][1], at::arange(3, at::kFloat).add(10.0)));
  CHECK(at::equal(arrived[1][0], at::arange(3, 6, at::kFloat)));
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(records[r].size() == 2);
    const AllToAllRecord& forward = records[r][0];
    CHECK(forward.kind == traces::EventKind::AllToAllDispatchForward);
    CHECK(forward.start_us == 4000);
    CHECK(forward.end_us == kDeviceEndUs);
    const AllToAllRecord& backward = records[r][1];
    CHECK(backward.kind == traces::EventKind::AllToAllDispatchBackward);
    CHECK(backward.start_us == kDeviceStartUs);
    CHECK(backward.end_us == kDeviceEndUs);
    CHECK(devices[r]->timings_stopped == 2);
  }
}
