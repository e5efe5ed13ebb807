// torch.profiler traces read as one measured trace (traces/torch_profiler.hpp), on what torch
// 2.15 wrote (tests/golden/torch/traces): a 2-rank Gloo run of ScheduleInterleaved1F1B with 2
// stages per rank (rank 0: stages 0 and 2, rank 1: stages 1 and 3) and 4 micro-batches, two
// profiled steps (ProfilerStep#0 and #1); and a ScheduleGPipe run, whose single-stage class
// records no PP: spans. No GPU was at hand for the GPU mapping: it is checked on a small
// hand-written trace in the format kineto documents (kernels on a GPU pid and stream tid,
// tied to their cudaLaunchKernel by args.correlation). Steps without ProfilerStep#N spans are
// checked on a hand-written trace too.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unistd.h>

#include <fmt/format.h>

#include "pipescope/traces/trace_arguments.hpp"
#include "pipescope/traces/torch_profiler.hpp"
#include "pipescope/traces/trace_io.hpp"

using namespace pipescope::traces;
namespace fs = std::filesystem;

namespace {

const fs::path kTorchTraces = fs::path(PIPESCOPE_SOURCE_DIR) / "tests/golden/torch/traces";

std::string interleaved() { return (kTorchTraces / "interleaved-1f1b").string(); }

std::size_t count(const Trace& t, int rank, const std::string& name, int stage) {
  std::size_t n = 0;
  for (const auto& e : t.events) n += e.rank == rank && e.name == name && e.stage == stage;
  return n;
}

fs::path write_temp(const std::string& name, const std::string& text) {
  const fs::path dir = fs::temp_directory_path() / ("pipescope-test-torch-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / name) << text;
  return dir / name;
}

}  // namespace

TEST_CASE("a torch run's folder is one trace of its ranks, stages and micro-batches", "[torch_profiler]") {
  REQUIRE(is_torch_profiler_input(interleaved()));
  REQUIRE_FALSE(is_torch_profiler_input((fs::path(PIPESCOPE_SOURCE_DIR) / "traces/examples/measured.json").string()));
  const TorchRun run = read_torch_profiler_run({interleaved()});
  const Trace& t = run.trace;
  CHECK(run.notes.empty());
  CHECK(t.meta.source == "measured");
  CHECK(t.meta.num_ranks == 2);
  CHECK(t.rank_count() == 2);  // the profiler's own "Spans" track is no rank
  CHECK(t.meta.num_stages == 4);
  CHECK(t.meta.num_micro_batches == 4);
  CHECK(t.meta.iteration == 1);  // the last profiled step by default
  for (const auto& [rank, stages] : std::map<int, std::set<int>>{{0, {0, 2}}, {1, {1, 3}}})
    for (int stage = 0; stage < 4; ++stage) {
      const std::size_t expected = stages.count(stage) ? 4 : 0;
      CHECK(count(t, rank, "F", stage) == expected);
      CHECK(count(t, rank, "B", stage) == expected);
      CHECK(count(t, rank, "REDUCE_GRAD", stage) == expected / 4);
      CHECK(count(t, rank, "UNSHARD", stage) == expected / 4);
    }
  // Stage 0 sends activations and receives gradients; stage 3 the other way round.
  CHECK(count(t, 0, "SEND_F", 0) == 4);
  CHECK(count(t, 0, "RECV_B", 0) == 4);
  CHECK(count(t, 1, "RECV_F", 3) == 4);
  CHECK(count(t, 1, "SEND_B", 3) == 4);
  CHECK(count(t, 0, "WAIT_SEND_F", 2) == 4);
  for (const auto& e : t.events) {
    CHECK(e.ts_us >= 0);
    if (e.name == "SEND_F" || e.name == "RECV_B" || e.name == "RECV_F" || e.name == "SEND_B") {
      CHECK(e.peer_rank == 1 - e.rank);
      CHECK(e.bytes == 4 * 32 * 64 * 4);  // a float activation of micro-batch 4, sequence 32, hidden 64
    }
    if (e.name == "F" || e.name == "B") CHECK(e.lane == static_cast<int>(Lane::Compute));
  }
  // The memory curve of each rank, from the allocator's totals.
  for (int rank = 0; rank < 2; ++rank) {
    std::size_t samples = 0;
    std::int64_t peak = 0;
    for (const auto& m : t.memory)
      if (m.rank == rank) ++samples, peak = std::max(peak, m.bytes);
    CHECK(samples > 100);
    CHECK(peak > 1'000'000);
  }
}

TEST_CASE("a torch trace keeps the operators run inside each action as its detail", "[torch_profiler]") {
  const Trace t = read_torch_profiler_run({interleaved()}).trace;
  std::size_t in_forward = 0, transport = 0;
  for (const auto& e : t.events) {
    if (e.lane != kOperatorsLane) continue;
    in_forward += e.name.rfind("aten::", 0) == 0 && e.stage >= 0;
    transport += e.name == "gloo:recv" || e.name == "gloo:send";
  }
  CHECK(in_forward > 100);
  CHECK(transport == 2 * 24);  // per rank and step: 12 sends and 12 receives (2 stages x 4 micro-batches)
  REQUIRE(t.lane_names[0].size() > static_cast<std::size_t>(kOperatorsLane));
  CHECK(t.lane_names[0][kOperatorsLane] == "operators");

  TorchReadOptions actions_only;
  actions_only.keep_operators = false;
  for (const auto& e : read_torch_profiler_run({interleaved()}, actions_only).trace.events) CHECK(e.lane < kNumLanes);
}

TEST_CASE("--step picks a profiled step; a missing one is named", "[torch_profiler]") {
  TorchReadOptions first;
  first.step = 0;
  const Trace t0 = read_torch_profiler_run({interleaved()}, first).trace;
  CHECK(t0.meta.iteration == 0);
  CHECK(count(t0, 0, "F", 0) == 4);
  TorchReadOptions missing;
  missing.step = 7;
  CHECK_THROWS_WITH(read_torch_profiler_run({interleaved()}, missing),
                    Catch::Contains("--step 7: no ProfilerStep#7 (steps there: 0, 1)"));
}

TEST_CASE("files of one rank twice, or of two runs, are refused with both names", "[torch_profiler]") {
  const std::string rank0 = interleaved() + "/rank0.pt.trace.json.gz";
  CHECK_THROWS_WITH(read_torch_profiler_run({rank0, rank0}), Catch::Contains("both hold rank 0"));
  const std::string other_run = (kTorchTraces / "gpipe/rank1.pt.trace.json.gz").string();
  CHECK_THROWS_WITH(read_torch_profiler_run({rank0, other_run}), Catch::Contains("are not of one run"));
  // One rank alone is read, and the missing one is said.
  const TorchRun alone = read_torch_profiler_run({rank0});
  REQUIRE(alone.notes.size() == 1);
  CHECK(alone.notes[0] == "the run has 2 ranks; no file of rank(s) 1");
}

TEST_CASE("a single-stage schedule class's trace says it has no PP: spans", "[torch_profiler]") {
  const TorchRun run = read_torch_profiler_run({(kTorchTraces / "gpipe").string()});
  REQUIRE(run.notes.size() == 2);  // one per rank
  CHECK_THAT(run.notes[0], Catch::Contains("no PP: action spans (a single-stage schedule class"));
  CHECK(count(run.trace, 0, "Forward 0", -1) == 1);
  CHECK(count(run.trace, 1, "Backward 3", -1) == 1);
  CHECK(run.trace.meta.num_stages == 0);
}

TEST_CASE("command-line inputs: a torch run is one trace beside a plain file", "[torch_profiler]") {
  std::vector<std::string> notes;
  const std::string plain = (fs::path(PIPESCOPE_SOURCE_DIR) / "traces/examples/predicted.json").string();
  const auto loaded = read_trace_arguments(
      {plain, interleaved() + "/rank0.pt.trace.json.gz", interleaved() + "/rank1.pt.trace.json.gz"}, {}, notes);
  REQUIRE(loaded.size() == 2);
  CHECK(loaded[0].trace.meta.source == "predicted");
  CHECK(loaded[1].trace.rank_count() == 2);
  TorchReadOptions step;
  step.step = 1;
  CHECK_THROWS_WITH(read_trace_arguments({plain}, step, notes), Catch::Contains("--step"));
  // Each folder is a run of its own (here a ScheduleGPipe run beside the interleaved one).
  const auto two_runs = read_trace_arguments({interleaved(), (kTorchTraces / "gpipe").string()}, {}, notes);
  REQUIRE(two_runs.size() == 2);
  CHECK(two_runs[0].name == interleaved());
  CHECK(count(two_runs[0].trace, 0, "F", 0) == 4);
  REQUIRE(two_runs[1].trace.meta.run.torch_profiler);
  CHECK(two_runs[1].trace.meta.run.torch_profiler->files.at(0).find("gpipe") != std::string::npos);
}

TEST_CASE("GPU kernels belong to the action that launched them (hand-written kineto trace)", "[torch_profiler]") {
  // Rank 0 of 1: a forward whose CPU span [100, 200) launches one kernel that runs at
  // [300, 350) on stream 7, and a send whose NCCL kernel runs at [360, 380) on stream 20.
  const std::string text =
      R"json({"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
  "traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 10, "tid": 10, "ts": 50, "dur": 1000},
  {"ph": "X", "cat": "user_annotation", "name": "PP:0F0", "pid": 10, "tid": 10, "ts": 100, "dur": 100},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 10, "ts": 140, "dur": 20},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 150, "dur": 5, "args": {"correlation": 7}},
  {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": 300, "dur": 50, "args": {"correlation": 7}},
  {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 7, "pid": 10, "tid": 10, "ts": 150},
  {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 7, "pid": 0, "tid": 7, "ts": 300, "bp": "e"},
  {"ph": "X", "cat": "user_annotation", "name": "PP:0SEND_F0", "pid": 10, "tid": 10, "ts": 210, "dur": 10},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 215, "dur": 2, "args": {"correlation": 8}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv", "pid": 0, "tid": 20, "ts": 360, "dur": 20, "args": {"correlation": 8}},
  {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 0, "dur": 2000}
  ]})json";
  const fs::path path = write_temp("gpu.pt.trace.json", text);
  REQUIRE(is_torch_profiler_input(path.string()));
  const TorchRun run = read_torch_profiler_run({path.string()});
  const Trace& t = run.trace;
  CHECK(t.meta.iteration == 3);
  CHECK(t.rank_count() == 1);
  const TraceEvent* forward = nullptr;
  const TraceEvent* send = nullptr;
  const TraceEvent* gemm = nullptr;
  const TraceEvent* nccl = nullptr;
  for (const auto& e : t.events) {
    if (e.name == "F") forward = &e;
    if (e.name == "SEND_F") send = &e;
    if (e.name == "sm90_gemm") gemm = &e;
    if (e.name == "ncclDevKernel_SendRecv") nccl = &e;
  }
  REQUIRE(forward);
  REQUIRE(send);
  REQUIRE(gemm);
  REQUIRE(nccl);
  // Times from the step's start (50).
  CHECK(forward->ts_us == Approx(250));  // its kernel's start, 300
  CHECK(forward->dur_us == Approx(50));
  CHECK(send->ts_us == Approx(310));
  CHECK(send->dur_us == Approx(20));
  CHECK(gemm->stage == 0);
  CHECK(gemm->micro_batch == 0);
  CHECK(nccl->category == "p2p");
  CHECK(gemm->lane != nccl->lane);  // one lane per stream
  CHECK(t.lane_names[0][static_cast<std::size_t>(gemm->lane)] == "GPU 0 stream 7");
  fs::remove_all(path.parent_path());
}

TEST_CASE("a RECV lasts to its data when its consumer waited for it, else it is its post", "[torch_profiler]") {
  // Stage 1 posts two receives at 100 and 120 (20 us each). Micro-batch 0's forward starts at
  // 200 and its gloo:recv ends at 230: a quick wait, the data was there. Micro-batch 1's
  // forward starts at 400 and its gloo:recv ends at 900: it waited 500 us for the data.
  const std::string text =
      R"json({"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": 1, "world_size": 2},
  "traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 5, "tid": 5, "ts": 0, "dur": 2000},
  {"ph": "X", "cat": "user_annotation", "name": "PP:1RECV_F0", "pid": 5, "tid": 5, "ts": 100, "dur": 20},
  {"ph": "X", "cat": "user_annotation", "name": "gloo:recv", "pid": 5, "tid": 5, "ts": 105, "dur": 125,
   "args": {"Input Dims": [[4, 8]], "Input type": ["float"]}},
  {"ph": "X", "cat": "user_annotation", "name": "PP:1RECV_F1", "pid": 5, "tid": 5, "ts": 120, "dur": 20},
  {"ph": "X", "cat": "user_annotation", "name": "gloo:recv", "pid": 5, "tid": 5, "ts": 125, "dur": 775,
   "args": {"Input Dims": [[4, 8]], "Input type": ["float"]}},
  {"ph": "X", "cat": "user_annotation", "name": "PP:1F0", "pid": 5, "tid": 5, "ts": 200, "dur": 150},
  {"ph": "X", "cat": "user_annotation", "name": "PP:1F1", "pid": 5, "tid": 5, "ts": 400, "dur": 600}
  ]})json";
  const fs::path path = write_temp("rank1.pt.trace.json", text);
  TorchReadOptions actions_only;
  actions_only.keep_operators = false;
  const Trace t = read_torch_profiler_run({path.string()}, actions_only).trace;
  std::map<int, const TraceEvent*> receives;
  for (const auto& e : t.events)
    if (e.name == "RECV_F") receives[e.micro_batch] = &e;
  REQUIRE(receives.size() == 2);
  CHECK(receives[0]->category == kPostedReceiveCategory);
  CHECK(receives[0]->dur_us == Approx(20));
  CHECK(receives[0]->bytes == 4 * 8 * 4);
  CHECK(receives[1]->category == kWaitedReceiveCategory);
  CHECK(receives[1]->ts_us == Approx(120));
  CHECK(receives[1]->end_us() == Approx(900));
  for (const auto& [mb, e] : receives) {
    const std::string* args = t.args_of(static_cast<std::size_t>(e - t.events.data()));
    REQUIRE(args);
    CHECK(*args == R"({"post_us":20.0})");
  }
  // torch waits for the data first thing inside the forward's span: the work starts when the
  // data is there, and the wait is said in the event's args.
  std::map<int, const TraceEvent*> forwards;
  for (const auto& e : t.events)
    if (e.name == "F") forwards[e.micro_batch] = &e;
  REQUIRE(forwards.size() == 2);
  CHECK(forwards[0]->ts_us == Approx(230));
  CHECK(forwards[0]->end_us() == Approx(350));
  CHECK(forwards[1]->ts_us == Approx(900));
  CHECK(forwards[1]->dur_us == Approx(100));
  const std::string* wait = t.args_of(static_cast<std::size_t>(forwards[1] - t.events.data()));
  REQUIRE(wait);
  CHECK(*wait == R"({"data_wait_us":500.0})");
  fs::remove_all(path.parent_path());
}

TEST_CASE("every profiled step can be read as its own trace, with its length and operator count", "[torch_profiler]") {
  TorchReadOptions every;
  every.keep_operators = false;
  every.every_step = true;
  const std::vector<TorchRun> runs = read_torch_profiler_steps({interleaved()}, every);
  REQUIRE(runs.size() == 2);
  for (int step = 0; step < 2; ++step) {
    const Trace& t = runs[static_cast<std::size_t>(step)].trace;
    CHECK(t.meta.iteration == step);
    CHECK(count(t, 1, "F", 3) == 4);
    REQUIRE(t.meta.run.torch_profiler);
    const TorchProfilerRun& torch = *t.meta.run.torch_profiler;
    CHECK(torch.step == step);
    CHECK(torch.step_duration_us.value() > 10'000);   // each step took over 10 ms
    CHECK(torch.operators_per_rank.value() > 1'000);  // and recorded thousands of operators
  }
  // Written as a pipescope trace and read back, a step keeps its torch.profiler record.
  const Trace back = parse_trace(to_trace_json(runs[1].trace), "step1.json");
  CHECK(back.meta.run.torch_profiler == runs[1].trace.meta.run.torch_profiler);
  CHECK(back.meta.run.torch_profiler.value().files.size() == 2);
  every.step = 0;  // a step named reads that one alone
  REQUIRE(read_torch_profiler_steps({interleaved()}, every).size() == 1);
  CHECK(read_torch_profiler_steps({interleaved()}, every).front().trace.meta.iteration == 0);

  std::vector<std::string> notes;
  TorchReadOptions every_step;
  every_step.every_step = true;
  const auto named = read_trace_arguments({interleaved()}, every_step, notes);
  REQUIRE(named.size() == 2);
  CHECK(named[0].name == interleaved() + " (ProfilerStep#0)");
  CHECK(named[1].name == interleaved() + " (ProfilerStep#1)");
}

TEST_CASE("DualPipeV's OVERLAP_F_B becomes its forward and its backward, split at the first autograd operator",
          "[torch_profiler]") {
  // Rank 0 runs (0F3;3B1)OVERLAP_F_B from 1000 to 1400: the forward's operators end at 1110, the
  // backward's data came at 1250 (its gloo:recv, posted at 900), its first autograd operator
  // starts at 1260.
  const std::string text =
      R"json({"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 2},
  "traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 5, "tid": 5, "ts": 0, "dur": 2000},
  {"ph": "X", "cat": "user_annotation", "name": "PP:3RECV_B1", "pid": 5, "tid": 5, "ts": 900, "dur": 20},
  {"ph": "X", "cat": "user_annotation", "name": "gloo:recv", "pid": 5, "tid": 5, "ts": 905, "dur": 345},
  {"ph": "X", "cat": "user_annotation", "name": "PP:(0F3;3B1)OVERLAP_F_B", "pid": 5, "tid": 5, "ts": 1000, "dur": 400},
  {"ph": "X", "cat": "cpu_op", "name": "aten::embedding", "pid": 5, "tid": 5, "ts": 1010, "dur": 60},
  {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 5, "tid": 5, "ts": 1075, "dur": 35},
  {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0", "pid": 5, "tid": 5, "ts": 1260, "dur": 90},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 5, "tid": 5, "ts": 1265, "dur": 80}
  ]})json";
  const fs::path path = write_temp("rank0.pt.trace.json", text);
  TorchReadOptions actions_only;
  actions_only.keep_operators = false;
  const Trace t = read_torch_profiler_run({path.string()}, actions_only).trace;
  const TraceEvent *forward = nullptr, *backward = nullptr;
  for (const auto& e : t.events) {
    CHECK(e.name != "OVERLAP_F_B");
    if (e.name == "F") forward = &e;
    if (e.name == "B") backward = &e;
  }
  REQUIRE(forward);
  REQUIRE(backward);
  CHECK(forward->stage == 0);
  CHECK(forward->micro_batch == 3);
  CHECK(forward->ts_us == Approx(1000));
  CHECK(forward->end_us() == Approx(1110));
  CHECK(backward->stage == 3);
  CHECK(backward->micro_batch == 1);
  CHECK(backward->ts_us == Approx(1260));  // the wait for its data before it is the rank idle
  CHECK(backward->end_us() == Approx(1400));
  fs::remove_all(path.parent_path());
}

TEST_CASE("without ProfilerStep#N spans, a trace is split into steps where each rank's PP: actions repeat",
          "[torch_profiler]") {
  // One rank runs its program (0F0 0F1 0B0 0B1, 100 us each) three times, 1000 us apart, under
  // a profiler without a schedule: no ProfilerStep#N. Each repetition is a step: the last is
  // read by default, every one with every_step, and one note says how the steps were found.
  std::string events;
  const char* program[] = {"0F0", "0F1", "0B0", "0B1"};
  for (int step = 0; step < 3; ++step)
    for (int i = 0; i < 4; ++i)
      events += fmt::format(
          R"({{"ph": "X", "cat": "user_annotation", "name": "PP:{}", "pid": 5, "tid": 5, "ts": {}, "dur": 100}},)",
          program[i], 1000 * step + 100 * i);
  events += R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 5, "tid": 5, "ts": 2810, "dur": 50})";
  const fs::path path = write_temp(
      "rank0.pt.trace.json",
      R"({"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1}, "traceEvents": [)" +
          events + "]}");
  TorchReadOptions actions_only;
  actions_only.keep_operators = false;
  const TorchRun last = read_torch_profiler_run({path.string()}, actions_only);
  CHECK(last.trace.meta.iteration == 2);
  CHECK(count(last.trace, 0, "F", 0) == 2);
  CHECK(count(last.trace, 0, "B", 0) == 2);
  REQUIRE(last.notes.size() == 1);
  CHECK_THAT(last.notes[0],
             Catch::Contains("split into steps where its PP: actions repeat") && Catch::Contains("3 steps"));
  // The step starts at its first action: the last step's F0 is at 0. It lasts to its rank's
  // last operator's end (2860 us, 860 us after its start): what calibrate's profiler scaling
  // takes as the step's length.
  for (const auto& e : last.trace.events)
    if (e.name == "F" && e.micro_batch == 0) CHECK(e.ts_us == Approx(0));
  CHECK(last.trace.meta.run.torch_profiler.value().step_duration_us.value() == Approx(860));

  TorchReadOptions every = actions_only;
  every.every_step = true;
  const std::vector<TorchRun> steps = read_torch_profiler_steps({path.string()}, every);
  REQUIRE(steps.size() == 3);
  for (int step = 0; step < 3; ++step) {
    CHECK(steps[static_cast<std::size_t>(step)].trace.meta.iteration == step);
    CHECK(count(steps[static_cast<std::size_t>(step)].trace, 0, "B", 0) == 2);
  }
  CHECK(steps[0].trace.meta.run.torch_profiler.value().step_duration_us.value() == Approx(1000));
  TorchReadOptions first = actions_only;
  first.step = 0;
  CHECK(read_torch_profiler_run({path.string()}, first).trace.meta.iteration == 0);

  // A program run once has nothing to repeat: one step, said as before.
  std::string once;
  for (int i = 0; i < 4; ++i)
    once += fmt::format(
        R"({}{{"ph": "X", "cat": "user_annotation", "name": "PP:{}", "pid": 5, "tid": 5, "ts": {}, "dur": 100}})",
        i ? "," : "", program[i], 100 * i);
  const fs::path single = write_temp(
      "single.pt.trace.json",
      R"({"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1}, "traceEvents": [)" +
          once + "]}");
  const TorchRun one = read_torch_profiler_run({single.string()}, actions_only);
  REQUIRE(one.notes.size() == 1);
  CHECK_THAT(one.notes[0], Catch::Contains("the whole trace is read as one step"));
  fs::remove_all(path.parent_path());
}
