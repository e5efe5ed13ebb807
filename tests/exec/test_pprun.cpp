// pprun end to end: real worker processes over loopback (Gloo), started by pprun itself.
// Model: tiny-gpt, 2 blocks, hidden 32, vocab 64, seq 8, micro-batch size 2 (5 layers, the
// embedding tied to the head), 4 micro-batches, fp32, one thread per rank.
// Expected:
// - 2 ranks 1f1b and interleaved-1f1b --chunks 2 (4 stages), 4 ranks 1f1b, and 2 ranks of
//   DeepSpeed's TrainSchedule by release (deepspeed-train@0.5, deepspeed-train@0.19) give
//   exactly (bitwise) the losses of `--nproc-per-node 1 --schedule data-parallel`; the
//   split-backward schedules zb-h1 and zbv (V placement, 4 stages on 2 ranks) within 1e-6
//   relative.
// - --dp 2 on 4 ranks (2 x 2 grid) matches the single process with 8 micro-batches within 1e-5
//   and reports 4 peak memory figures and 4 stolen times (each from 0 to under a second more
//   than the step's time) per step.
// - the measured trace of the 1f1b run holds 8 F, 8 B, 4 SEND_F and 4 RECV_F events (2 stages x
//   4 micro-batches), source "measured", the earliest event or counter at 0, memory counters,
//   the backward split probe and no expert-call probe (no experts), each rank's stolen time and
//   its transport threads' CPU time (above 0 on some rank: they moved the step's messages); with
//   --trace-steps 2 the step before sits in 1f1b-trace.step2.json with the same events and no
//   probe, and no earlier step is written.
// - a forward-only schedule (deepspeed-inference, 2 ranks): runs its forwards and losses (step 0's
//   loss is the reference's first: the same samples and weights), and its trace has 8 F and no B.
// - a run killed at step 2 with --checkpoint-every 1 resumes and then gives steps 2 and 3 with
//   exactly the uninterrupted losses.
// - a worker killed (SIGKILL) or hung at step 1: pprun exits 1, names the rank that failed first,
//   and the surviving rank names itself, the instruction it was blocked in and the peer.
// - bad options, a schedule for another world size, an unsplittable model: one line
//   `pprun: error: ...`, exit status 2, before any worker starts; so do --device cuda in a
//   build without the CUDA path, a --trace into a folder that does not exist, and --bind-cores
//   with more ranks than cores.
// - --bind-cores on 2 ranks: the same losses; the trace names each rank's half of the cores, for
//   its compute and its transport's threads alike.
// - text, the default corpus (kText), 8 steps of 4 micro-batches: 4 ranks (4 stages, 1f1b) give
//   bitwise the losses of one process, and the loss falls by more than 1.0 (nats) from the
//   first step to the last; a 2 x 2 grid (--dp 2) matches one process with 8 micro-batches within
//   1e-5 (the replicas read disjoint samples that together are the single run's); --eval-every 3
//   writes eval_loss on steps 2, 5 and the last (7) only, the same on 4 ranks as on one within
//   1e-6, falling too; a run killed at step 3 resumes with the uninterrupted losses bit for bit
//   (the data position comes back with the checkpoint).
// - text refusals, one line and exit 2 before any worker: --vocab that is not 256, --model mlp
//   on text, an empty file, a binary file, a missing path, --eval-every on synthetic data.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "pprun/core_binding.hpp"
#include "pipescope/exec/device.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "pprun_run.hpp"

namespace fs = std::filesystem;

namespace {

// The exactness cases below run on the synthetic generator (said explicitly: pprun's default
// data is the text corpus); the text cases at the end use kText.
const std::string kPprunModel =
    "--data synthetic --model tiny-gpt --layers 2 --hidden 32 --seq-len 8 --vocab 64 --micro-batch-size 2 --quiet "
    "--timeout 20";
// tiny-gpt on the default corpus (the project's docs, byte tokens): 4 layers (2 blocks), so 4
// stages fit; a learning rate at which 8 steps show the loss falling.
const std::string kText =
    "--model tiny-gpt --layers 2 --hidden 32 --seq-len 32 --micro-batch-size 4 --lr 0.01 --quiet --timeout 20";

using pprun_test::PprunRun;
using pprun_test::run_pprun;
using pprun_test::work_dir;

// Runs shared by several test cases are made once.
const PprunRun& cached_run(const std::string& name, const std::string& args) {
  static std::map<std::string, PprunRun> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, run_pprun(name, args)).first;
  return it->second;
}

const PprunRun& reference_run() {
  return cached_run("reference",
                    "--nproc-per-node 1 --schedule data-parallel --micro-batches 4 --steps 4 " + kPprunModel);
}

int line_count(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

}  // namespace

// A run with --trace and no --trace-steps: the default traces every step after the first.
std::string interleaved_traced_args() {
  return "--nproc-per-node 2 --schedule interleaved-1f1b --chunks 2 --trace " +
         (work_dir() / "interleaved-trace.json").string();
}

TEST_CASE("pipelined schedules reproduce the single-process losses") {
  const PprunRun& ref = reference_run();
  REQUIRE(ref.status == 0);
  REQUIRE(ref.losses.size() == 4);

  struct Case {
    std::string name, args;
    bool bitwise;
  };
  const std::vector<Case> cases = {
      {"1f1b",
       "--nproc-per-node 2 --schedule 1f1b --trace-steps 2 --trace " + (work_dir() / "1f1b-trace.json").string(), true},
      {"interleaved", interleaved_traced_args(), true},
      {"1f1b-4", "--nproc-per-node 4 --schedule 1f1b", true},
      {"zb-h1", "--nproc-per-node 2 --schedule zb-h1", false},
      {"zbv", "--nproc-per-node 2 --schedule zbv", false},
      // DeepSpeed's TrainSchedule as 0.5 and as 0.19 write it (the transfers of a step swapped).
      {"deepspeed-train@0.5", "--nproc-per-node 2 --schedule deepspeed-train@0.5", true},
      {"deepspeed-train@0.19", "--nproc-per-node 2 --schedule deepspeed-train@0.19", true},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const PprunRun& run = cached_run(c.name, c.args + " --micro-batches 4 --steps 4 " + kPprunModel);
    INFO(run.err);
    REQUIRE(run.status == 0);
    REQUIRE(run.losses.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) {
      if (c.bitwise)
        CHECK(run.losses[i] == ref.losses[i]);
      else
        CHECK(run.losses[i] == Approx(ref.losses[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("a forward-only schedule runs its forwards through the engine") {
  const PprunRun& ref = reference_run();
  const fs::path trace_path = work_dir() / "inference-trace.json";
  const PprunRun run =
      run_pprun("inference", "--nproc-per-node 2 --schedule deepspeed-inference --micro-batches 4 --steps 2 --trace " +
                                 trace_path.string() + " " + kPprunModel);
  INFO(run.err);
  REQUIRE(run.status == 0);
  REQUIRE(run.losses.size() == 2);
  REQUIRE(ref.losses.size() == 4);
  CHECK(run.losses[0] == Approx(ref.losses[0]).epsilon(1e-6));
  const auto trace = pipescope::traces::read_trace(trace_path.string());
  int forwards = 0, backwards = 0;
  for (const auto& e : trace.events) {
    forwards += e.name == "F";
    backwards += e.name == "B";
  }
  CHECK(forwards == 8);
  CHECK(backwards == 0);
}

TEST_CASE("data parallel x pipeline grid") {
  const PprunRun& ref8 = cached_run(
      "reference-8", "--nproc-per-node 1 --schedule data-parallel --micro-batches 8 --steps 3 " + kPprunModel);
  const PprunRun& grid =
      cached_run("dp2xpp2", "--nproc-per-node 4 --dp 2 --schedule 1f1b --micro-batches 4 --steps 3 " + kPprunModel);
  INFO(grid.err);
  REQUIRE(ref8.status == 0);
  REQUIRE(grid.status == 0);
  REQUIRE(grid.losses.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(grid.losses[i] == Approx(ref8.losses[i]).epsilon(1e-5));
  CHECK(grid.metrics[0].at("peak_memory_bytes").size() == 4);
  CHECK(grid.metrics[0].at("peak_memory_bytes")[0].get<std::int64_t>() > 0);
  CHECK(grid.metrics[0].at("iteration_time_s").get<double>() > 0);
  // The time the host took from each rank's cores during the step (0 outside a virtual
  // machine): a difference of the counters, not the counters since boot. /proc/stat counts in
  // ticks, and a rank's step starts while rank 0 still writes the metrics of the one before, so
  // a rank's reading may pass rank 0's step time by a little.
  for (const auto& step : grid.metrics) {
    REQUIRE(step.at("stolen_time_s").size() == 4);
    for (const auto& s : step.at("stolen_time_s")) {
      CHECK(s.get<double>() >= 0);
      CHECK(s.get<double>() < step.at("iteration_time_s").get<double>() + 1.0);
    }
  }
}

TEST_CASE("measured trace of the last step") {
  const PprunRun& run =
      cached_run("1f1b", "--nproc-per-node 2 --schedule 1f1b --trace-steps 2 --trace " +
                             (work_dir() / "1f1b-trace.json").string() + " --micro-batches 4 --steps 4 " + kPprunModel);
  REQUIRE(run.status == 0);
  const auto trace = pipescope::traces::read_trace((work_dir() / "1f1b-trace.json").string());
  CHECK(trace.meta.source == "measured");
  CHECK(trace.meta.schedule == "1f1b");
  CHECK(trace.meta.num_ranks == 2);
  CHECK(trace.meta.iteration == 3);
  std::map<std::string, int> counts;
  double earliest = 1e300;
  for (const auto& m : trace.memory) earliest = std::min(earliest, m.ts_us);
  for (const auto& e : trace.events) {
    ++counts[e.name];
    earliest = std::min(earliest, e.ts_us);
    CHECK(e.dur_us >= 0);
    if (e.name == "SEND_F") {
      CHECK(e.rank == 0);
      CHECK(e.peer_rank == 1);
      CHECK(e.lane == 1);
      CHECK(e.bytes == 2 * 8 * 32 * 4);
    }
  }
  CHECK(earliest == Approx(0).margin(1e-6));
  CHECK(counts["F"] == 8);
  CHECK(counts["B"] == 8);
  CHECK(counts["SEND_F"] == 4);
  CHECK(counts["RECV_F"] == 4);
  CHECK(counts["OPTIMIZER"] >= 2);
  CHECK_FALSE(trace.memory.empty());
  // The probe times each stage's backward halves; the first stage also its layers after the
  // first, as an inner stage runs them.
  const auto& described = trace.meta.run;
  REQUIRE(described.backward_split_probe);
  const auto& probe = *described.backward_split_probe;
  REQUIRE(probe.size() == 2);
  CHECK(probe[0].stage == 0);
  CHECK(probe[0].own.full_us.size() > 0);
  REQUIRE(probe[0].inner);
  CHECK(probe[0].inner->full_us.size() == probe[0].own.full_us.size());
  CHECK(probe[0].inner->input_us.size() == probe[0].own.full_us.size());
  CHECK_FALSE(probe[1].inner);
  CHECK_FALSE(described.expert_call_probe);  // tiny-gpt has no experts
  CHECK(described.threads_per_rank.value_or(0) == 1);
  CHECK_FALSE(described.blas.value_or("").empty());
  REQUIRE(described.stolen_time_s);
  CHECK(described.stolen_time_s->size() == 2);
  // The transport threads' CPU time in the step, per rank: they moved the step's messages.
  REQUIRE(described.transport_cpu_s);
  REQUIRE(described.transport_cpu_s->size() == 2);
  CHECK((*described.transport_cpu_s)[0] >= 0);
  CHECK((*described.transport_cpu_s)[0] + (*described.transport_cpu_s)[1] > 0);

  // --trace-steps 2: the step before the last goes next to it, with the same operations and
  // without the probe (it runs once, after the last step).
  const auto before = pipescope::traces::read_trace((work_dir() / "1f1b-trace.step2.json").string());
  CHECK(before.meta.iteration == 2);
  CHECK_FALSE(before.meta.run.backward_split_probe);
  std::map<std::string, int> before_counts;
  for (const auto& e : before.events) ++before_counts[e.name];
  CHECK(before_counts == counts);
  CHECK_FALSE(fs::exists(work_dir() / "1f1b-trace.step1.json"));
}

TEST_CASE("a killed run resumes from its last checkpoint with the same losses") {
  const PprunRun& full =
      cached_run("1f1b", "--nproc-per-node 2 --schedule 1f1b --trace-steps 2 --trace " +
                             (work_dir() / "1f1b-trace.json").string() + " --micro-batches 4 --steps 4 " + kPprunModel);
  REQUIRE(full.status == 0);
  const fs::path dir = work_dir() / "checkpoints";
  fs::remove_all(dir);
  const std::string args =
      "--nproc-per-node 2 --schedule 1f1b --micro-batches 4 --steps 4 --checkpoint-every 1 "
      "--checkpoint-dir " +
      dir.string() + " " + kPprunModel;
  const PprunRun killed = run_pprun("resume-killed", args, "env PIPESCOPE_FAULT=1:2:kill");
  REQUIRE(killed.status == 1);
  REQUIRE(killed.losses.size() == 2);
  REQUIRE(fs::exists(dir / "manifest.json"));
  const PprunRun resumed = run_pprun("resume-resumed", args + " --resume");
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  REQUIRE(resumed.metrics.size() == 2);
  CHECK(resumed.metrics[0].at("step") == 2);
  CHECK(resumed.losses[0] == full.losses[2]);
  CHECK(resumed.losses[1] == full.losses[3]);
}

TEST_CASE("a dead or hung worker stops the run with errors naming ranks and instruction") {
  SECTION("killed") {
    const PprunRun run = run_pprun("killed", "--nproc-per-node 2 --schedule 1f1b --steps 3 " + kPprunModel,
                                   "env PIPESCOPE_FAULT=1:1:kill");
    INFO(run.err);
    CHECK(run.status == 1);
    CHECK_THAT(run.err, Catch::Contains("pprun: error: rank 1 failed first (killed by signal 9"));
    // Rank 0 fails in whichever transfer with rank 1 it was in (a send to it or a receive from it).
    CHECK_THAT(run.err, Catch::Contains("pprun: error: rank 0: step 1: "));
    CHECK_THAT(run.err, Catch::Contains("instruction 0"));
    CHECK_THAT(run.err, Catch::Contains("peer rank 1"));
  }
  SECTION("hung") {
    const PprunRun run =
        run_pprun("hung", "--nproc-per-node 2 --schedule gpipe --steps 3 " + kPprunModel + " --timeout 2",
                  "env PIPESCOPE_FAULT=1:1:hang");
    INFO(run.err);
    CHECK(run.status == 1);
    CHECK_THAT(run.err, Catch::Contains("pprun: error: rank 0: step 1: blocked in"));
    CHECK_THAT(run.err, Catch::Contains("0RECV_B"));
    CHECK_THAT(run.err, Catch::Contains("peer rank 1"));
    CHECK_THAT(run.err, Catch::Contains("rank 0 failed first"));
    CHECK_THAT(run.err, Catch::Contains("killed rank(s) 1"));
  }
}

TEST_CASE("pprun --trace alone traces every step after the first, on cores bound by default") {
  const PprunRun& run =
      cached_run("interleaved", interleaved_traced_args() + " --micro-batches 4 --steps 4 " + kPprunModel);
  INFO(run.err);
  REQUIRE(run.status == 0);
  // Steps 1 and 2 beside the file, step 3 (the last) in it; step 0, the warm-up, not traced.
  CHECK_FALSE(fs::exists(work_dir() / "interleaved-trace.step0.json"));
  for (const char* name : {"interleaved-trace.step1.json", "interleaved-trace.step2.json", "interleaved-trace.json"}) {
    INFO(name);
    REQUIRE(fs::exists(work_dir() / name));
    const auto trace = pipescope::traces::read_trace((work_dir() / name).string());
    // pprun's own launcher binds its 2 workers when each can have a core (binds_cores).
    CHECK(trace.meta.run.bind_cores == (pipescope::exec::allowed_cores().size() >= 2));
  }
}

TEST_CASE("pprun --bind-cores gives each rank cores of its own and the same losses") {
  const std::vector<int> cores = pipescope::exec::allowed_cores();
  if (cores.size() < 2) {
    WARN("one core only: nothing to split");
    return;
  }
  const fs::path trace_path = work_dir() / "bound-trace.json";
  const PprunRun run =
      run_pprun("bound", "--nproc-per-node 2 --bind-cores --schedule 1f1b --micro-batches 4 --steps 2 --trace " +
                             trace_path.string() + " " + kPprunModel);
  INFO(run.err);
  REQUIRE(run.status == 0);
  const PprunRun& ref = reference_run();
  REQUIRE(run.losses.size() == 2);
  CHECK(run.losses[0] == ref.losses[0]);
  CHECK(run.losses[1] == ref.losses[1]);
  const auto trace = pipescope::traces::read_trace(trace_path.string());
  CHECK(trace.meta.run.bind_cores == true);
  const std::vector<int> first(cores.begin(), cores.begin() + static_cast<long>(cores.size() / 2));
  const std::vector<int> second(cores.begin() + static_cast<long>(cores.size() / 2), cores.end());
  CHECK(trace.meta.run.cores_per_rank ==
        std::vector<std::string>{pipescope::exec::core_list(first), pipescope::exec::core_list(second)});
  // Gloo's threads are bound with the rank's.
  CHECK(trace.meta.run.transport_cores_per_rank == trace.meta.run.cores_per_rank);
}

TEST_CASE("bad runs are refused before any worker starts") {
  // A schedule file for 3 ranks, run on 2.
  const fs::path file = work_dir() / "three-ranks.json";
  pipescope::ScheduleParams params;
  params.num_ranks = 3;
  params.num_micro_batches = 4;
  pipescope::write_file_atomic(file.string(), pipescope::to_schedule_json(pipescope::make_schedule("1f1b", params)));

  struct Refusal {
    std::string args, expected;
    bool applies = true;
  };
  const std::size_t cores = pipescope::exec::allowed_cores().size();
  // One list, no appending: g++ 12 -O2 warns falsely (-Warray-bounds) on pairs of strings
  // appended to a vector made from an initializer list.
  const std::vector<Refusal> cases = {
      {"--nproc-per-node 2 --bogus", "unknown option '--bogus'"},
      {"--nproc-per-node 2 --dp 3", "--dp 3"},
      {"--nproc-per-node 2 --schedule file:" + file.string(), "has 3 pipeline ranks, but the run has 2"},
      {"--nproc-per-node 2 --schedule zbv --model mlp --layers 1", "cannot be split into 4 stages"},
      {"--nproc-per-node 2 --device cuda", "option --device cuda", !pipescope::exec::cuda_support_built()},
      {"--nproc-per-node 2 --trace " + (work_dir() / "no-such-folder" / "t.json").string(), "does not exist"},
      {fmt::format("--nproc-per-node {} --bind-cores", cores + 1),
       fmt::format("--bind-cores: {} local ranks but only {} core(s)", cores + 1, cores)},
  };
  for (const auto& [args, expected, applies] : cases) {
    if (!applies) continue;
    const PprunRun run = run_pprun("refused", args);
    INFO(args);
    CHECK(run.status == 2);
    CHECK_THAT(run.err, Catch::StartsWith("pprun: error: "));
    CHECK_THAT(run.err, Catch::Contains(expected));
    CHECK(line_count(run.err) == 1);
  }
}

namespace {

const PprunRun& text_reference_run() {
  return cached_run("text-reference",
                    "--nproc-per-node 1 --schedule data-parallel --micro-batches 4 --steps 8 --eval-every 3 " + kText);
}

}  // namespace

TEST_CASE("text: pipelined runs on the default corpus equal one process bit for bit, and learn") {
  const PprunRun& ref = text_reference_run();
  INFO(ref.err);
  REQUIRE(ref.status == 0);
  REQUIRE(ref.losses.size() == 8);
  CHECK(ref.losses.front() - ref.losses.back() > 1.0);
  const PprunRun& four = cached_run(
      "text-1f1b-4", "--nproc-per-node 4 --schedule 1f1b --micro-batches 4 --steps 8 --eval-every 3 " + kText);
  INFO(four.err);
  REQUIRE(four.status == 0);
  REQUIRE(four.losses.size() == 8);
  for (std::size_t i = 0; i < 8; ++i) CHECK(four.losses[i] == ref.losses[i]);

  const PprunRun& ref8 = cached_run("text-reference-8",
                                    "--nproc-per-node 1 --schedule data-parallel --micro-batches 8 --steps 4 " + kText);
  const PprunRun& grid =
      cached_run("text-dp2xpp2", "--nproc-per-node 4 --dp 2 --schedule 1f1b --micro-batches 4 --steps 4 " + kText);
  INFO(grid.err);
  REQUIRE(ref8.status == 0);
  REQUIRE(grid.status == 0);
  REQUIRE(grid.losses.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) CHECK(grid.losses[i] == Approx(ref8.losses[i]).epsilon(1e-5));
  CHECK(grid.losses.front() > grid.losses.back());
}

TEST_CASE("text: --eval-every writes the held-out loss on its steps and the last") {
  const PprunRun& ref = text_reference_run();
  const PprunRun& four = cached_run(
      "text-1f1b-4", "--nproc-per-node 4 --schedule 1f1b --micro-batches 4 --steps 8 --eval-every 3 " + kText);
  REQUIRE(ref.status == 0);
  REQUIRE(four.status == 0);
  std::vector<int> evaluated;
  for (std::size_t i = 0; i < ref.metrics.size(); ++i) {
    if (!ref.metrics[i].contains("eval_loss")) {
      CHECK_FALSE(four.metrics[i].contains("eval_loss"));
      continue;
    }
    evaluated.push_back(ref.metrics[i].at("step").get<int>());
    const double loss = ref.metrics[i].at("eval_loss").get<double>();
    CHECK(loss > 0);
    REQUIRE(four.metrics[i].contains("eval_loss"));
    CHECK(four.metrics[i].at("eval_loss").get<double>() == Approx(loss).epsilon(1e-6));
  }
  CHECK(evaluated == std::vector<int>{2, 5, 7});
  CHECK(ref.metrics[7].at("eval_loss").get<double>() < ref.metrics[2].at("eval_loss").get<double>());
}

TEST_CASE("text: a killed run resumes at its data position with the same losses") {
  const PprunRun& full = text_reference_run();
  REQUIRE(full.status == 0);
  const fs::path dir = work_dir() / "text-checkpoints";
  fs::remove_all(dir);
  const std::string args =
      "--nproc-per-node 2 --schedule 1f1b --micro-batches 4 --steps 8 --eval-every 3 --checkpoint-every 1 "
      "--checkpoint-dir " +
      dir.string() + " " + kText;
  const PprunRun killed = run_pprun("text-resume-killed", args, "env PIPESCOPE_FAULT=1:3:kill");
  REQUIRE(killed.status == 1);
  REQUIRE(killed.losses.size() == 3);
  const PprunRun resumed = run_pprun("text-resume-resumed", args + " --resume");
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  REQUIRE(resumed.metrics.size() == 5);  // steps 3 to 7 (its metrics file is a fresh one)
  CHECK(resumed.metrics[0].at("step") == 3);
  for (std::size_t i = 0; i < 5; ++i) CHECK(resumed.losses[i] == full.losses[i + 3]);
  CHECK(resumed.metrics[4].at("eval_loss").get<double>() ==
        Approx(full.metrics[7].at("eval_loss").get<double>()).epsilon(1e-6));
}

TEST_CASE("text: bad data and options that do not fit it are refused before any worker starts") {
  const fs::path empty = work_dir() / "empty.txt", binary = work_dir() / "binary.bin";
  pipescope::write_file_atomic(empty.string(), "");
  pipescope::write_file_atomic(binary.string(), std::string("text\0more", 9));
  struct Refusal {
    std::string args, expected;
  };
  const std::vector<Refusal> cases = {
      {"--vocab 64", "option --vocab 64: text is read as bytes"},
      {"--model mlp --data " + empty.string(), "--model mlp reads vectors"},
      {"--data " + empty.string(), "file " + empty.string() + ": is empty"},
      {"--data " + binary.string(), "file " + binary.string() + ": is binary, not text (a NUL byte at offset 4)"},
      {"--data " + (work_dir() / "no-such.txt").string(), "no-such.txt: no such file or folder"},
      {"--data synthetic --eval-every 2", "--eval-every: synthetic data has no held-out part"},
  };
  for (const auto& [args, expected] : cases) {
    const PprunRun run = run_pprun("text-refused", "--nproc-per-node 2 " + args);
    INFO(args);
    CHECK(run.status == 2);
    CHECK_THAT(run.err, Catch::StartsWith("pprun: error: "));
    CHECK_THAT(run.err, Catch::Contains(expected));
    CHECK(line_count(run.err) == 1);
  }
}
