// pprun on the schedules torch.distributed.pipelining 2.15.0 itself wrote
// (tests/golden/torch/schedules/, 2 ranks, 4 micro-batches), run as `--schedule file:X.csv` by
// real worker processes over loopback (Gloo), with torch's communication semantics: a RECV
// posts the receive and the compute that needs it waits; sends are waited at their WAIT_SEND or
// at the end of the step; REDUCE_GRAD stands per stage in the middle of a rank's program.
// Model: tiny-gpt, 2 blocks, hidden 32, vocab 64, seq 8, micro-batch size 2 (5 layers, the
// embedding tied to the head), synthetic data, fp32, one thread per rank, 2 steps.
// Expected:
// - ScheduleGPipe (compute-only), ScheduleInterleaved1F1B and ScheduleLoopedBFS (lowered and
//   compute-only, 4 stages) give bitwise the losses of one process (`--schedule data-parallel`);
//   the split-backward classes ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble and
//   ScheduleDualPipeV (lowered and compute-only) within 1e-6 relative, as test_pprun's zb-h1
//   and zbv do.
// - The lowered ScheduleInterleaved1F1B puts stage 3's REDUCE_GRAD before stage 1's last two
//   backwards on rank 1 and stage 2's before stage 0's on rank 0. On a 2 x 2 grid (--dp 2) that
//   is a data-parallel all-reduce in the middle of the program (stage 2) and a tied-weight sum
//   that must wait for the rank's other stage (stage 3, tied to stage 0's embedding on the other
//   rank): the losses match one process with 8 micro-batches within 1e-5, as test_pprun's grid.
// - Its measured trace (first replica) has a RECV_F for each of the 12 (stage, micro-batch) pairs of stages 1-3
//   and a RECV_B for each of stages 0-2, and every RECV_F's data was in (the event ends) before
//   the forward that needed it started.
// - A hand-written lowered CSV (2 stages, 2 micro-batches) that only torch's semantics can run:
//   rank 0 posts its RECV_B0 before it sends micro-batch 1's activation, and rank 1 posts both
//   RECV_Fs before it computes; were a receive waited where it stands, rank 0 would wait for a
//   gradient that rank 1 computes only after the activation rank 0 has not sent yet (a
//   deadlock, then a timeout). pprun runs it and gives bitwise the losses of one process.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pipescope/traces/trace_io.hpp"
#include "pprun_run.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kTorchModel =
    "--data synthetic --model tiny-gpt --layers 2 --hidden 32 --seq-len 8 --vocab 64 --micro-batch-size 2 --quiet --timeout 30";

using pprun_test::PprunRun;
using pprun_test::run_pprun;
using pprun_test::work_dir;

std::string torch_csv(const std::string& file) {
  return (fs::path(PIPESCOPE_SOURCE_DIR) / "tests" / "golden" / "torch" / "schedules" / file).string();
}

}  // namespace

TEST_CASE("torch's own schedules reproduce the single-process losses", "[pprun][torch]") {
  const PprunRun ref = run_pprun("torch-reference", "--nproc-per-node 1 --schedule data-parallel --micro-batches 4 --steps 2 " + kTorchModel);
  INFO(ref.err);
  REQUIRE(ref.status == 0);
  REQUIRE(ref.losses.size() == 2);

  struct Case {
    std::string file;
    bool bitwise;
  };
  const std::vector<Case> cases = {
      {"ScheduleGPipe-p2-m4.csv", true},
      {"ScheduleInterleaved1F1B-p2-m4.lowered.csv", true},
      {"ScheduleInterleaved1F1B-p2-m4.csv", true},
      {"ScheduleLoopedBFS-p2-m4.lowered.csv", true},
      {"ScheduleLoopedBFS-p2-m4.csv", true},
      {"ScheduleInterleavedZeroBubble-p2-m4.lowered.csv", false},
      {"ScheduleInterleavedZeroBubble-p2-m4.csv", false},
      {"ScheduleZBVZeroBubble-p2-m4.lowered.csv", false},
      {"ScheduleZBVZeroBubble-p2-m4.csv", false},
      {"ScheduleDualPipeV-p2-m4.lowered.csv", false},
      {"ScheduleDualPipeV-p2-m4.csv", false},
  };
  for (const auto& c : cases) {
    INFO(c.file);
    const PprunRun run =
        run_pprun("torch-" + c.file, "--nproc-per-node 2 --schedule file:" + torch_csv(c.file) + " --micro-batches 4 --steps 2 " + kTorchModel);
    INFO(run.err);
    REQUIRE(run.status == 0);
    REQUIRE(run.losses.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) {
      if (c.bitwise)
        CHECK(run.losses[i] == ref.losses[i]);
      else
        CHECK(run.losses[i] == Approx(ref.losses[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("REDUCE_GRAD in the middle of a program on a data-parallel grid", "[pprun][torch]") {
  const PprunRun ref = run_pprun("torch-reference-8", "--nproc-per-node 1 --schedule data-parallel --micro-batches 8 --steps 2 " + kTorchModel);
  INFO(ref.err);
  REQUIRE(ref.status == 0);
  const fs::path trace_path = work_dir() / "torch-grid-trace.json";
  fs::remove(trace_path);
  const PprunRun grid =
      run_pprun("torch-grid", "--nproc-per-node 4 --dp 2 --schedule file:" + torch_csv("ScheduleInterleaved1F1B-p2-m4.lowered.csv") +
                                  " --micro-batches 4 --steps 2 --trace " + trace_path.string() + " " + kTorchModel);
  INFO(grid.err);
  REQUIRE(grid.status == 0);
  REQUIRE(grid.losses.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) CHECK(grid.losses[i] == Approx(ref.losses[i]).epsilon(1e-5));

  // The first replica's pipeline: world ranks 0 and 1 (each stage on one of them).
  const auto trace = pipescope::traces::read_trace(trace_path.string());
  std::map<std::pair<int, int>, double> forward_start_us, recv_f_end_us;
  int recv_b = 0;
  for (const auto& e : trace.events) {
    if (e.rank >= 2) continue;
    const std::pair<int, int> key{e.stage, e.micro_batch};
    if (e.name == "F") forward_start_us[key] = e.ts_us;
    if (e.name == "RECV_F") recv_f_end_us[key] = e.ts_us + e.dur_us;
    recv_b += e.name == "RECV_B";
  }
  CHECK(recv_f_end_us.size() == 12);
  CHECK(recv_b == 12);
  for (const auto& [key, end_us] : recv_f_end_us) {
    INFO("stage " << key.first << ", micro-batch " << key.second);
    REQUIRE(forward_start_us.count(key) == 1);
    CHECK(end_us <= forward_start_us.at(key));
  }
}

TEST_CASE("a receive posted early does not block the program", "[pprun][torch]") {
  const fs::path csv = work_dir() / "torch-posted-receives.csv";
  {
    std::ofstream out(csv);
    out << "0F0,0SEND_F0,0RECV_B0,0F1,0SEND_F1,0B0,0RECV_B1,0B1,0WAIT_SEND_F0,0WAIT_SEND_F1,0REDUCE_GRAD\n"
           "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1WAIT_SEND_B0,1WAIT_SEND_B1\n";
  }
  const PprunRun ref = run_pprun("torch-reference-2", "--nproc-per-node 1 --schedule data-parallel --micro-batches 2 --steps 2 " + kTorchModel);
  INFO(ref.err);
  REQUIRE(ref.status == 0);
  const PprunRun run =
      run_pprun("torch-posted-receives", "--nproc-per-node 2 --schedule file:" + csv.string() + " --micro-batches 2 --steps 2 " + kTorchModel);
  INFO(run.err);
  REQUIRE(run.status == 0);
  REQUIRE(run.losses.size() == 2);
  CHECK(run.losses == ref.losses);
}
