// The runtime's step recorder (exec/src/runtime/step_recorder.hpp) with a scripted device.
// Scenario: rank 3 records a step. The device starts at 0 bytes (one sample), stays there (no
// new sample), then holds 512 bytes (a second sample); its peak, 4096 bytes, is the step's.
// A forward of stage 1, micro-batch 2 is an event "F" of category "compute" on the compute
// lane; the device times it from 100 to 350 us after the step's origin, which replaces the
// host's span at the end of the step (ts 100 us, 250 us long). A receive from rank 2 whose
// wait began 10 us after the origin starts there. An optimizer step has no micro-batch (-1).
#include <catch2/catch.hpp>

#include <optional>

#include "runtime/step_recorder.hpp"
#include "scripted_device.hpp"

using namespace pipescope;
using namespace pipescope::exec;
using namespace pipescope::exec::runtime;
using pipescope::exec::testing::ScriptedDevice;

namespace {

Instruction instruction(Op op, int stage, int micro_batch) {
  Instruction instr;
  instr.op = op;
  instr.stage = stage;
  instr.micro_batch = micro_batch;
  return instr;
}

}  // namespace

TEST_CASE("the step recorder keeps events, memory changes and device spans", "[runtime][step_recorder]") {
  ScriptedDevice device;
  StepRecorder recorder(3);
  recorder.begin_step(device);
  CHECK(device.steps == 1);
  const double origin = recorder.result().origin_us;
  recorder.sample_memory(device);
  device.current_bytes = 512;
  recorder.sample_memory(device);

  device.timed_span = std::make_pair(origin + 100, origin + 350);
  bool ran = false;
  recorder.timed(traces::Lane::Compute, instruction(Op::ForwardPass, 1, 2), device, [&] { ran = true; });
  device.timed_span.reset();
  const auto recv = recorder.begin_event(traces::Lane::Recv, instruction(Op::RecvActivation, 1, 2), 2, 64);
  recorder.move_event_start(recv, origin + 10);
  recorder.end_event(recv, now_us());
  recorder.timed(traces::Lane::Collective, instruction(Op::OptimizerStep, 1, 0), device, [] {});
  const StepResult result = recorder.finish(device);

  CHECK(ran);
  CHECK(result.peak_memory_bytes == 4096);
  CHECK(result.time_s > 0);
  REQUIRE(result.memory.size() == 2);
  CHECK(result.memory[0].bytes == 0);
  CHECK(result.memory[1].bytes == 512);
  CHECK(result.memory[1].rank == 3);
  REQUIRE(result.events.size() == 3);
  const auto& forward = result.events[0];
  CHECK(forward.rank == 3);
  CHECK(forward.name == "F");
  CHECK(forward.category == "compute");
  CHECK(forward.lane == static_cast<int>(traces::Lane::Compute));
  CHECK(forward.stage == 1);
  CHECK(forward.micro_batch == 2);
  CHECK(forward.ts_us == Approx(100));
  CHECK(forward.dur_us == Approx(250));
  const auto& receive = result.events[1];
  CHECK(receive.category == "p2p");
  CHECK(receive.peer_rank == 2);
  CHECK(receive.bytes == 64);
  CHECK(receive.ts_us == Approx(10));
  CHECK(receive.dur_us >= 0);
  CHECK(result.events[2].category == "collective");
  CHECK(result.events[2].micro_batch == -1);
  // The recorder starts over: the next step's result is empty until it records.
  CHECK(recorder.result().events.empty());
}
