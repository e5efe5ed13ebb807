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

#include "ppsim_run.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kTorchTraces = fs::path(PIPESCOPE_SOURCE_DIR) / "tests/golden/torch/traces";

using ppsim_test::read_text;

fs::path work_dir() {
  const fs::path dir = fs::temp_directory_path() / ("pipescope-test-torch-cli-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

ppsim_test::PpsimRun ppsim(const std::string& args) { return ppsim_test::run_ppsim(args); }

std::string arg(const fs::path& p) { return ppsim_test::quoted(p.string()); }

}  // namespace

TEST_CASE("calibrate and compare read a torch run's folder as one measured trace", "[cli][torch]") {
  const fs::path run = kTorchTraces / "interleaved-1f1b";
  const fs::path profile = work_dir() / "profile.json", predicted = work_dir() / "predicted.json";
  const ppsim_test::PpsimRun calibrated = ppsim("calibrate " + arg(run) + " -o " + arg(profile) + " --quiet");
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

  REQUIRE(ppsim("simulate --schedule interleaved-1f1b --stages 2 --chunks 2 --micro-batches 4 --profile " + arg(profile) +
                " --trace " + arg(predicted))
              .status == 0);
  const ppsim_test::PpsimRun compared = ppsim("compare " + arg(predicted) + " " + arg(run / "rank0.pt.trace.json.gz") + " " +
                             arg(run / "rank1.pt.trace.json.gz") + " --json --top 0");
  INFO(compared.err);
  REQUIRE(compared.status == 0);
  const json c = json::parse(compared.out);
  CHECK(c.at("matched_operations").get<int>() >= 2 * (4 * 4 + 4 * 2));  // per rank: F, B of 2 stages; sends, receives
  CHECK(c.at("iteration_time_measured_s").get<double>() > 0.01);
  for (const auto& rank : c.at("ranks")) CHECK(rank.at("peak_memory_measured_bytes").get<std::int64_t>() > 1'000'000);

  // Another step is another measurement of the same run.
  const ppsim_test::PpsimRun first_step = ppsim("compare " + arg(predicted) + " " + arg(run) + " --json --step 0");
  REQUIRE(first_step.status == 0);
  CHECK(json::parse(first_step.out).at("iteration_time_measured_s") != c.at("iteration_time_measured_s"));
}

TEST_CASE("a step that is not there, and a trace with no PP: spans, are said in one line each", "[cli][torch]") {
  const fs::path profile = work_dir() / "unused.json";
  const ppsim_test::PpsimRun missing = ppsim("calibrate " + arg(kTorchTraces / "interleaved-1f1b") + " -o " + arg(profile) + " --step 9");
  CHECK(missing.status != 0);
  CHECK(missing.err.find("--step 9: no ProfilerStep#9 (steps there: 0, 1)") != std::string::npos);
  CHECK(std::count(missing.err.begin(), missing.err.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(profile));

  const ppsim_test::PpsimRun gpipe = ppsim("calibrate " + arg(kTorchTraces / "gpipe") + " -o " + arg(profile));
  CHECK(gpipe.status != 0);
  CHECK(gpipe.err.find("rank0.pt.trace.json.gz: no PP: action spans (a single-stage schedule class") != std::string::npos);
  CHECK(gpipe.err.find("no events with a stage") != std::string::npos);
  CHECK_FALSE(fs::exists(profile));
  fs::remove_all(work_dir());
}
