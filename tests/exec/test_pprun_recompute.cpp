// pprun --recompute end to end: real worker processes over loopback (Gloo), as a user runs them.
// Model: mlp, 8 blocks of hidden 256, 256 classes (so the head's output is the size of a
// block's), micro-batches of 256 samples, fp32, GPipe with 4 micro-batches on 2 ranks (4 or 5
// layers per stage): every micro-batch's activations are held at once, so they are most of a
// rank's peak (weights, gradients and AdamW state ~1 MB a layer, a hidden-state tensor 256 KiB,
// ~9 of them per micro-batch and stage without recomputation, 5-6 with it).
// Expected:
// - --recompute gives bitwise the losses of the run without it (the models have no dropout, but
//   the recomputed forward also replays the random state), a lower peak on every rank in every
//   step, "recompute_layers": 1 in the metrics rows (absent without) and in the trace's run
//   description (0 without); --recompute-layers 2 the same losses and a lower peak too (here lower than
//   --recompute's: half the inputs kept for 4 micro-batches, two layers rebuilt at a time).
// - the last step's peak per rank that `ppsim simulate --profile P --recompute` predicts from a
//   profile calibrated on the traced last step without recomputation is within 5% of the
//   measured one, and the predicted drop within 20% of the measured drop. Why these bounds:
//   GPipe's peak comes between instructions (after the last forward), where the profile's
//   memory is measured, so without recomputation it is predicted within ~2%; the recompute rule
//   adds two approximations that hold for the mlp (a run's input is a transfer's size, a run's
//   activations the stage's per-layer share) and cost up to ~5% of the drop in the measurements
//   of docs/ACCURACY.md ("Memory with recomputation": +0.6% to +5.1% on 2 and 4 ranks). The
//   drop is a difference of two peaks (~3 MB of ~13 MB on the last rank): their errors of up to
//   ~4% each fall on it, up to ~17%.
// - option errors: one `pprun: error: ...` line, exit status 2, before any worker starts.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pipescope/traces/trace_io.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kRun =
    "--nproc-per-node 2 --schedule gpipe --micro-batches 4 --steps 3 --model mlp --layers 8 --hidden 256 --vocab 256 "
    "--micro-batch-size 256 --quiet --timeout 30";

fs::path recompute_dir() {
  fs::path dir = fs::path(PIPESCOPE_BINARY_DIR) / "tests" / "exec-work" / "recompute";
  fs::create_directories(dir);
  return dir;
}

struct Command {
  int status = -1;
  std::string out, err;
};

Command shell(const std::string& name, const std::string& command) {
  const fs::path out = recompute_dir() / (name + ".out"), err = recompute_dir() / (name + ".err");
  const int raw = std::system((command + " > " + out.string() + " 2> " + err.string()).c_str());
  Command c;
  c.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream o(out), e(err);
  c.out.assign(std::istreambuf_iterator<char>(o), {});
  c.err.assign(std::istreambuf_iterator<char>(e), {});
  return c;
}

struct RecomputeRun {
  Command command;
  std::vector<nlohmann::json> rows;  // the metrics file
  fs::path trace;
};

RecomputeRun run_recompute(const std::string& name, const std::string& extra) {
  RecomputeRun run;
  const fs::path metrics = recompute_dir() / (name + ".jsonl");
  run.trace = recompute_dir() / (name + ".trace.json");
  fs::remove(metrics);
  fs::remove(run.trace);
  run.command = shell(name, fmt::format("{} {} {} --metrics {} --trace {}", PPRUN_PATH, kRun, extra, metrics.string(),
                                        run.trace.string()));
  std::ifstream m(metrics);
  for (std::string line; std::getline(m, line);) run.rows.push_back(nlohmann::json::parse(line));
  return run;
}

// The three runs are shared by the test cases.
const RecomputeRun& cached(const std::string& extra) {
  static std::map<std::string, RecomputeRun> runs;
  auto it = runs.find(extra);
  if (it == runs.end()) {
    std::string name = extra.empty() ? "plain" : extra.substr(2);
    std::replace(name.begin(), name.end(), ' ', '-');  // a file name for the shell
    it = runs.emplace(extra, run_recompute(name, extra)).first;
  }
  return it->second;
}

std::vector<std::int64_t> peaks(const nlohmann::json& row) { return row.at("peak_memory_bytes").get<std::vector<std::int64_t>>(); }

// The peak of each rank in the last step: the traced one, which the profile learnt from.
std::vector<std::int64_t> last_step_peaks(const RecomputeRun& run) { return peaks(run.rows.back()); }

}  // namespace

TEST_CASE("pprun --recompute: the same losses bit for bit, less memory on every rank") {
  const RecomputeRun& plain = cached("");
  const RecomputeRun& full = cached("--recompute");
  const RecomputeRun& pairs = cached("--recompute-layers 2");
  for (const RecomputeRun* run : {&plain, &full, &pairs}) {
    INFO(run->command.err);
    REQUIRE(run->command.status == 0);
    REQUIRE(run->rows.size() == 3);
  }
  for (std::size_t step = 0; step < 3; ++step) {
    INFO("step " << step);
    CHECK(full.rows[step].at("loss").get<double>() == plain.rows[step].at("loss").get<double>());
    CHECK(pairs.rows[step].at("loss").get<double>() == plain.rows[step].at("loss").get<double>());
    CHECK_FALSE(plain.rows[step].contains("recompute_layers"));
    CHECK(full.rows[step].at("recompute_layers") == 1);
    CHECK(pairs.rows[step].at("recompute_layers") == 2);
    for (std::size_t r = 0; r < 2; ++r) {
      INFO("rank " << r);
      CHECK(peaks(full.rows[step]).at(r) < peaks(plain.rows[step]).at(r));
      CHECK(peaks(pairs.rows[step]).at(r) < peaks(plain.rows[step]).at(r));
    }
  }
  // The trace says how its memory was measured.
  CHECK(pipescope::traces::read_trace(full.trace.string()).meta.run.recompute_layers == 1);
  CHECK(pipescope::traces::read_trace(plain.trace.string()).meta.run.recompute_layers == 0);
}

TEST_CASE("pprun --recompute: the peak per rank is what ppsim simulate --recompute predicts") {
  const RecomputeRun& plain = cached("");
  const RecomputeRun& full = cached("--recompute");
  REQUIRE(plain.command.status == 0);
  REQUIRE(full.command.status == 0);
  const fs::path profile = recompute_dir() / "profile.json";
  // Memory does not depend on the time the host takes from the cores (steal): no trace is left out.
  const Command calibrate = shell("calibrate", fmt::format("{} calibrate {} -o {} --max-stolen 1 --quiet", PPSIM_PATH,
                                                           plain.trace.string(), profile.string()));
  INFO(calibrate.err);
  REQUIRE(calibrate.status == 0);
  auto predict = [&](const std::string& name, const std::string& extra) {
    const Command c = shell(name, fmt::format("{} simulate --schedule gpipe --stages 2 --micro-batches 4 --profile {} --json {}",
                                              PPSIM_PATH, profile.string(), extra));
    INFO(c.err);
    REQUIRE(c.status == 0);
    std::vector<std::int64_t> out;
    const nlohmann::json summary = nlohmann::json::parse(c.out);  // kept: the loop walks a part of it
    for (const auto& rank : summary.at("ranks")) out.push_back(rank.at("peak_memory_bytes").get<std::int64_t>());
    return out;
  };
  const std::vector<std::int64_t> predicted_plain = predict("predict-plain", "");
  const std::vector<std::int64_t> predicted_full = predict("predict-recompute", "--recompute");
  const std::vector<std::int64_t> measured_plain = last_step_peaks(plain), measured_full = last_step_peaks(full);
  REQUIRE(predicted_full.size() == 2);
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r << ": predicted " << predicted_plain[r] << " -> " << predicted_full[r] << ", measured " << measured_plain[r]
                 << " -> " << measured_full[r]);
    CHECK(predicted_full[r] == Approx(measured_full[r]).epsilon(0.05));
    CHECK(predicted_plain[r] - predicted_full[r] == Approx(measured_plain[r] - measured_full[r]).epsilon(0.20));
  }
}

TEST_CASE("pprun --recompute: option errors are one line before any worker starts") {
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--recompute-layers 0", "pprun: error: option --recompute-layers: 0 is below the minimum 1"},
      {"--recompute-layers x", "pprun: error: option --recompute-layers: 'x' is not a valid number"},
      {"--recompute --recompute-layers 3",
       "pprun: error: option --recompute-layers: asks for runs of 3 layer(s), but runs of 1 were asked for already"},
      {"--recompute-layers 6",
       "pprun: error: option --recompute-layers 6: no stage has that many layers (layers per stage: 5, 4, --partition "
       "parameters); --recompute-layers 5 already recomputes the largest stage as one run"},
  };
  for (const auto& c : cases) {
    INFO(c.args);
    const Command run = shell("bad-option", fmt::format("{} {} {}", PPRUN_PATH, kRun, c.args));
    CHECK(run.status == 2);
    CHECK_THAT(run.err, Catch::StartsWith(c.message));
    CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
  }
}
