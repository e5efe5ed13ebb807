// `ppsim calibrate` and `ppsim compare` on torch.profiler traces, through the real binary, on
// what torch 2.15 wrote (tests/golden/torch/traces: ScheduleInterleaved1F1B, 2 ranks x 2
// stages, 4 micro-batches, ProfilerStep#0 and #1; ScheduleGPipe, which records no PP: spans).
// Calibrate learns the 4 stages' F and B and a transfer delay from the run's folder; the
// simulated interleaved-1f1b of that profile is compared with the folder: the pipeline's
// operations match by rank, name, stage and micro-batch, and each rank's measured peak memory
// comes from torch's [memory] events.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "pipescope/traces/torch_profiler.hpp"
#include "ppsim_run.hpp"
#include "scratch_folder.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kTorchTraces = fs::path(PIPESCOPE_SOURCE_DIR) / "tests/golden/torch/traces";

using ppsim_test::read_text;

// This process's own folder, which goes when the process ends.
const fs::path& work_dir() {
  static const test_support::ScratchFolder scratch("torch-cli");
  return scratch.path();
}

using ppsim_test::run_ppsim;

std::string arg(const fs::path& p) { return ppsim_test::quoted(p.string()); }

}  // namespace

TEST_CASE("calibrate and compare read a torch run's folder as one measured trace", "[cli][torch]") {
  const fs::path run = kTorchTraces / "interleaved-1f1b";
  const fs::path profile = work_dir() / "profile.json", predicted = work_dir() / "predicted.json";
  const ppsim_test::PpsimRun calibrated = run_ppsim("calibrate " + arg(run) + " -o " + arg(profile) + " --quiet");
  INFO(calibrated.err);
  REQUIRE(calibrated.status == 0);
  CHECK(calibrated.err.empty());
  const json p = json::parse(read_text(profile));
  REQUIRE(p.at("stages").size() == 4);
  for (const auto& stage : p.at("stages")) {
    CHECK(stage.at("f_s").get<double>() > 0);
    CHECK(stage.at("b_s").get<double>() > stage.at("f_s").get<double>() / 4);
    CHECK(stage.at("activation_bytes").get<std::int64_t>() == 4 * 32 * 64 * 4);
  }
  // Learnt from receives whose consumer waited for the data, not from torch's post spans.
  CHECK(p.at("transfer").at("latency_s").get<double>() > 50e-6);
  // A computation's wait for its data (inside torch's span, milliseconds here) is neither its
  // work nor the program's time between instructions (tens of microseconds).
  CHECK(p.at("instruction_overhead_s").get<double>() < 100e-6);

  REQUIRE(run_ppsim("simulate --schedule interleaved-1f1b --stages 2 --chunks 2 --micro-batches 4 --profile " +
                    arg(profile) + " --trace " + arg(predicted))
              .status == 0);
  const ppsim_test::PpsimRun compared =
      run_ppsim("compare " + arg(predicted) + " " + arg(run / "rank0.pt.trace.json.gz") + " " +
                arg(run / "rank1.pt.trace.json.gz") + " --json --top 0");
  INFO(compared.err);
  REQUIRE(compared.status == 0);
  const json c = json::parse(compared.out);
  CHECK(c.at("matched_operations").get<int>() >= 2 * (4 * 4 + 4 * 2));  // per rank: F, B of 2 stages; sends, receives
  CHECK(c.at("iteration_time_measured_s").get<double>() > 0.01);
  for (const auto& rank : c.at("ranks")) CHECK(rank.at("peak_memory_measured_bytes").get<std::int64_t>() > 1'000'000);

  // Another step is another measurement of the same run.
  const ppsim_test::PpsimRun first_step = run_ppsim("compare " + arg(predicted) + " " + arg(run) + " --json --step 0");
  REQUIRE(first_step.status == 0);
  CHECK(json::parse(first_step.out).at("iteration_time_measured_s") != c.at("iteration_time_measured_s"));
}

TEST_CASE("calibrate learns from every profiled step, and takes the profiler's cost out when told the step without it",
          "[cli][torch]") {
  const fs::path run = kTorchTraces / "interleaved-1f1b";
  const fs::path profiled = work_dir() / "profiled.json", scaled = work_dir() / "scaled.json";
  const ppsim_test::PpsimRun plain = run_ppsim("calibrate " + arg(run) + " -o " + arg(profiled));
  INFO(plain.err);
  REQUIRE(plain.status == 0);
  CHECK(plain.err.find("one profiled step") == std::string::npos);  // both steps were read
  CHECK(plain.err.find("CPU operators per rank in a step") != std::string::npos);
  CHECK(plain.err.find("--unprofiled-step-time") != std::string::npos);
  // Every SEND span of both steps is a sample of the send's cost: 2 steps x 2 ranks x 12 sends.
  const std::size_t sends = plain.out.find("send posting (all stages)");
  REQUIRE(sends != std::string::npos);
  CHECK(std::stoi(plain.out.substr(sends + std::string("send posting (all stages)").size())) == 48);

  // The profiled steps' mean length, as the reader measures it; the run without the profiler
  // said to take 80% of it.
  pipescope::traces::TorchReadOptions every;
  every.keep_operators = false;
  every.every_step = true;
  double profiled_us = 0;
  const auto steps = pipescope::traces::read_torch_profiler_steps({run.string()}, every);
  REQUIRE(steps.size() == 2);
  for (const auto& step : steps) profiled_us += step.trace.meta.run.torch_profiler.value().step_duration_us.value() / 2;
  const double unprofiled_s = 0.8 * profiled_us * 1e-6;
  const ppsim_test::PpsimRun taken_out = run_ppsim("calibrate " + arg(run) + " -o " + arg(scaled) +
                                                   " --unprofiled-step-time " + std::to_string(unprofiled_s));
  INFO(taken_out.err);
  REQUIRE(taken_out.status == 0);
  CHECK(taken_out.err.find("CPU operators per rank") == std::string::npos);
  CHECK(taken_out.out.find("torch.profiler's own cost taken out") != std::string::npos);
  const json a = json::parse(read_text(profiled)), b = json::parse(read_text(scaled));
  const double factor = b.at("calibration").at("profiler_overhead_factor").get<double>();
  CHECK(factor == Approx(0.8).epsilon(1e-3));
  for (std::size_t s = 0; s < 4; ++s) {
    CHECK(b["stages"][s]["f_s"].get<double>() == Approx(factor * a["stages"][s]["f_s"].get<double>()));
    CHECK(b["stages"][s]["b_s"].get<double>() == Approx(factor * a["stages"][s]["b_s"].get<double>()));
    CHECK(b["stages"][s]["recv_s"].get<double>() == Approx(factor * a["stages"][s]["recv_s"].get<double>()));
  }
  CHECK(b["instruction_overhead_s"].get<double>() == Approx(factor * a["instruction_overhead_s"].get<double>()));
  CHECK(b["transfer"] == a["transfer"]);  // time on the wire is not the program's

  // Without torch.profiler steps there is nothing to compare the time with; a time must be > 0.
  const fs::path example = fs::path(PIPESCOPE_SOURCE_DIR) / "traces/examples/measured.json";
  const ppsim_test::PpsimRun not_torch =
      run_ppsim("calibrate " + arg(example) + " -o " + arg(work_dir() / "x.json") + " --unprofiled-step-time 0.5");
  CHECK(not_torch.status != 0);
  CHECK(not_torch.err.find("--unprofiled-step-time: none of the traces is a step of torch.profiler") !=
        std::string::npos);
  CHECK(std::count(not_torch.err.begin(), not_torch.err.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(work_dir() / "x.json"));
  for (const std::string bad : {"-1", "0", "abc", "0.1,", "0.1,0.2"}) {
    const ppsim_test::PpsimRun refused =
        run_ppsim("calibrate " + arg(run) + " -o " + arg(work_dir() / "x.json") + " --unprofiled-step-time=" + bad);
    INFO(bad << ": " << refused.err);
    CHECK(refused.status != 0);
    CHECK(refused.err.find("--unprofiled-step-time") != std::string::npos);
    CHECK(std::count(refused.err.begin(), refused.err.end(), '\n') == 1);
    CHECK_FALSE(fs::exists(work_dir() / "x.json"));
  }
  // One time per run: "0.1,0.2" is two for this one run.
  CHECK(run_ppsim("calibrate " + arg(run) + " -o " + arg(work_dir() / "x.json") + " --unprofiled-step-time 0.1,0.2")
            .err.find("2 time(s) given for 1 profiled torch run(s)") != std::string::npos);
}

TEST_CASE("a step that is not there, and a trace with no PP: spans, are said in one line each", "[cli][torch]") {
  const fs::path profile = work_dir() / "unused.json";
  const ppsim_test::PpsimRun missing =
      run_ppsim("calibrate " + arg(kTorchTraces / "interleaved-1f1b") + " -o " + arg(profile) + " --step 9");
  CHECK(missing.status != 0);
  CHECK(missing.err.find("--step 9: no ProfilerStep#9 (steps there: 0, 1)") != std::string::npos);
  CHECK(std::count(missing.err.begin(), missing.err.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(profile));

  const ppsim_test::PpsimRun gpipe = run_ppsim("calibrate " + arg(kTorchTraces / "gpipe") + " -o " + arg(profile));
  CHECK(gpipe.status != 0);
  CHECK(gpipe.err.find("rank0.pt.trace.json.gz: no PP: action spans (a single-stage schedule class") !=
        std::string::npos);
  CHECK(gpipe.err.find("no events with a stage") != std::string::npos);
  CHECK_FALSE(fs::exists(profile));
  fs::remove_all(work_dir());
}
