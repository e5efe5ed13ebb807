// ppsim end to end: the real binary, run through the shell as a user runs it, on real files in a
// temporary folder (temp_directory_path()/pipescope-test-cli-<pid>, one subfolder per test case).
// Expected:
// - `schedule 1f1b --stages 2 --micro-batches 4` prints the step x rank grid: 10 steps, step 0
//   "0F0 0LOAD0 0SEND_F0" on rank 0 with rank 1 idle ("."), step 9 the reductions and optimizer
//   of both ranks. Written as JSON and as torch CSV (.csv), `validate` accepts both with "valid:
//   2 ranks, 2 stages, 4 micro-batches, 46 instructions" (2 ranks x (4 LOAD + 4 F + 4 B + 4 sends
//   + 4 receives + REDUCE_TIED + REDUCE_GRAD + OPTIMIZER)); the CSV holds no loads or optimizer
//   and the reader completes it to the same 46, also when one SEND cell is missing. `-o` with the
//   text form writes exactly what stdout shows.
// - Broken files: a truncated JSON, a JSON whose rank 0 lost its SendActivation of micro-batch
//   0, a CSV whose rank 1 receives micro-batch 1 before 0: exit 2, one line `ppsim: error: FILE:
//   ...` (the last two name rank 1, step 0 or 1 and the receive). `--format yaml` exits 2 and
//   writes nothing.
// - `simulate --schedule 1f1b --stages 4 --micro-batches 8 --f-cost 1 --b-cost 1 --w-cost 1`:
//   iteration (m + p - 1)(F + B + W) = 11 * 3 = 33 s, bubble (p - 1)/(m + p - 1) = 3/11 on every
//   rank, busy 24 s, throughput 8/33, peak memory 2 * (4 - r) bytes on rank r (--f-mem 2 per
//   micro-batch in flight); the trace has source "predicted", 32 F and 32 B events and ends at
//   33e6 us. `--schedule file:S.json` of the same schedule gives the same 33 s. Bad values
//   (--micro-batches 0, --schedule nosuch, --stages abc, --f-mem 3): exit 2, one line naming the
//   option or value, no trace file; a trace into a missing folder: exit 1, the path named. A
//   .json.gz trace compares equal to the .json one.
// - `calibrate` on the simulated traces of 1f1b and zb-h1 (2 ranks, m = 4, F 100 us, B 150 us,
//   W 50 us): a profile with F/B/W of 100/150/50 us (full backward 200 us) on both stages, the
//   split measured, calibration.duration_statistic "median" (or "mean" with --statistic mean);
//   the report file is stdout without its last "wrote ..." line. `--statistic average`: exit 2
//   naming --statistic, no profile, no report. `simulate --profile` predicts zb-h1 at m = 8:
//   m(F+B+W) + (p-1)(F+B-W) = 8 * 300 + 200 = 2600 us, as the explicit costs do. A profile of the
//   1f1b trace alone refuses zb-h1 (exit 2, names the profile and the split).
// - `compare` of a measured trace whose otherData says the host took 10% of rank 1's step
//   (stolen_time_s): stolen_time_fraction_measured 0.1 (rank 0: 0), and the table warns; a trace
//   that does not say: null, no line.
// - `compare` of a 1f1b trace (2 ranks, m = 4, F 100 us, B 150 us, W 100 us: 5 * 350 = 1750 us)
//   with itself: error 0, MAPE 0, 46 matched operations, bubble 1/5 on both sides; with the same
//   schedule at doubled costs (3500 us): error -0.5, MAPE 0.5, peak memory error 0 on both ranks;
//   the table's "iteration time" row reads 1.750 ms, 3.500 ms, -50.0%; its time by operation
//   has rank 0's forwards at 0.400 and 0.800 ms (JSON operation_times: its backwards take twice the
//   time measured), and both kinds of receive are counted, every one matched with its send.
// - `plan` of gpt-1.3b on 4 H100, global batch 8, 1f1b and gpipe, micro-batch size 1, no
//   recomputation: 6 configurations (pipeline 1, 2, 4 x 2 schedules), all simulated and fitting;
//   the table and the CSV show the top 3; the JSON rows have pipeline x data_parallel = 4,
//   micro-batches x size x data_parallel = 8, throughput x iteration time = 8, throughput not
//   rising, and the pipeline-2 1f1b row equals `simulate --model gpt-1.3b --stages 2
//   --data-parallel 2 --micro-batches 4 --zero1`.
// - DeepSpeed by release: `schedule deepspeed-train@0.8.3` writes a file that `validate
//   --blocking-sends` accepts; `schedule --help` lists the versioned names; `simulate` of
//   deepspeed-train@0.5 and @0.14.2 (p = 4, m = 8, F allocates 2 bytes by default) peaks at
//   2 * (4 - r) bytes on rank r for both: the same computes in the same steps, and a stage's
//   live activations never outnumber either release's num_pipe_buffers; `plan --schedules`
//   takes deepspeed-train@0.5,deepspeed-train@0.14.2 (rows named as asked) and refuses
//   deepspeed-train@0.4 in one line, exit 2.
// - Megatron: `schedule interleaved-1f1b --stages 4 --micro-batches 6` is refused (a remainder
//   of 2 after groups of 4), and runs with `--microbatch-group-size-per-vp-stage 6` (schedule,
//   validate, simulate: 8 stages); 1f1b runs m < p; a group size of 0, one given to 1f1b or to a
//   file: schedule, and interleaved-1f1b@0.20 are refused in one line, exit 2; `plan` with G 6 on
//   8 GPUs, global batch 12 keeps pipeline 4 (m 6) and refuses pipelines 2 and 8.
// - `ppsim frobnicate`: exit 2, one line; `ppsim` alone: exit 2 with the usage; `--help` lists the
//   six commands.
#include <chrono>
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ppsim_run.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The temporary folder of this test process, removed when the process ends.
struct CliWorkRoot {
  fs::path path = fs::temp_directory_path() / ("pipescope-test-cli-" + std::to_string(::getpid()));
  CliWorkRoot() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~CliWorkRoot() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

const fs::path& work_root() {
  static const CliWorkRoot root;
  return root.path;
}

// A fresh, empty folder for one test case.
fs::path case_dir(const std::string& name) {
  const fs::path dir = work_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

using ppsim_test::quoted;
using ppsim_test::read_text;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

json read_json(const fs::path& path) { return json::parse(read_text(path)); }

using CliRun = ppsim_test::PpsimRun;

// Runs `ppsim ARGS` in `dir`; the case folder holds only what ppsim wrote.
CliRun ppsim(const fs::path& dir, const std::string& args) { return ppsim_test::run_ppsim(args, dir); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

int count_events(const json& trace, const std::string& name) {
  int n = 0;
  for (const auto& e : trace.at("traceEvents"))
    if (e.value("ph", "") == "X" && e.value("name", "") == name) ++n;
  return n;
}

double trace_end_us(const json& trace) {
  double end = 0;
  for (const auto& e : trace.at("traceEvents"))
    if (e.value("ph", "") == "X") end = std::max(end, e.at("ts").get<double>() + e.at("dur").get<double>());
  return end;
}

const std::string kSmall1f1b = "--schedule 1f1b --stages 2 --micro-batches 4";
const std::string kCosts = "--f-cost 100e-6 --b-cost 150e-6 --w-cost 100e-6";
const std::string kDoubledCosts = "--f-cost 200e-6 --b-cost 300e-6 --w-cost 200e-6";

}  // namespace

TEST_CASE("ppsim schedule prints the grid and writes files that validate accepts", "[cli]") {
  const fs::path dir = case_dir("schedule");
  const CliRun grid = ppsim(dir, "schedule 1f1b --stages 2 --micro-batches 4");
  INFO(grid.err);
  REQUIRE(grid.status == 0);
  CHECK(grid.err.empty());
  const auto lines = lines_of(grid.out);
  REQUIRE(lines.size() == 11);  // the header and steps 0..9
  CHECK(lines[0].rfind("step  rank 0", 0) == 0);
  CHECK(contains(lines[0], "rank 1"));
  CHECK(lines[1].rfind("   0  0F0 0LOAD0 0SEND_F0 ", 0) == 0);
  CHECK(lines[1].substr(lines[1].size() - 2) == " .");  // rank 1 waits for its first activation
  CHECK(contains(lines[2], "1F0 1LOAD0 1RECV_F0"));
  CHECK(contains(lines[10], "0B3 0RECV_B3 0REDUCE_TIED 0REDUCE_GRAD 0OPTIMIZER"));
  CHECK(contains(lines[10], "1REDUCE_TIED 1REDUCE_GRAD 1OPTIMIZER"));

  // The text form written with -o is what stdout shows.
  REQUIRE(ppsim(dir, "schedule 1f1b --stages 2 --micro-batches 4 --format text -o grid.txt").status == 0);
  CHECK(read_text(dir / "grid.txt") == grid.out);

  const std::string valid = ": valid: 2 ranks, 2 stages, 4 micro-batches, 46 instructions\n";
  const CliRun to_json = ppsim(dir, "schedule 1f1b --stages 2 --micro-batches 4 --format json -o s.json");
  REQUIRE(to_json.status == 0);
  CHECK(to_json.out.empty());
  const json schedule = read_json(dir / "s.json");
  CHECK(schedule.at("format") == "pipescope.schedule/1");
  CHECK(schedule.at("schedule") == "1f1b");
  CHECK(schedule.at("num_ranks") == 2);
  CHECK(schedule.at("num_micro_batches") == 4);
  CHECK(schedule.at("stage_to_rank") == json::array({0, 1}));
  CHECK(schedule.at("programs").size() == 2);
  const CliRun json_valid = ppsim(dir, "validate s.json");
  INFO(json_valid.err);
  CHECK(json_valid.status == 0);
  CHECK(json_valid.out == "s.json" + valid);

  REQUIRE(ppsim(dir, "schedule 1f1b --stages 2 --micro-batches 4 --format torch-csv -o s.csv").status == 0);
  const std::string csv = read_text(dir / "s.csv");
  const auto rows = lines_of(csv);
  REQUIRE(rows.size() == 2);
  // torch's lowered form: no idle slots, every send waited (at the end of the row).
  CHECK(rows[0].rfind("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,", 0) == 0);
  CHECK(rows[1].rfind("1RECV_F0,1F0,1B0,1SEND_B0,", 0) == 0);
  CHECK(contains(rows[0], ",0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0WAIT_SEND_F0,"));
  CHECK_FALSE(contains(csv, "LOAD"));  // torch's actions have no load or optimizer: the reader adds them
  const CliRun csv_valid = ppsim(dir, "validate s.csv");
  INFO(csv_valid.err);
  CHECK(csv_valid.status == 0);
  // torch's form waits for each of the 8 sends and the 2 gradient reductions: 10 more.
  const std::string valid_with_waits = ": valid: 2 ranks, 2 stages, 4 micro-batches, 56 instructions\n";
  CHECK(csv_valid.out == "s.csv" + valid_with_waits);

  // A CSV missing one SEND cell is a partial file: the reader completes the communication.
  std::string partial = csv;
  partial.erase(partial.find("0SEND_F0,"), std::string("0SEND_F0,").size());
  write_text(dir / "partial.csv", partial);
  const CliRun partial_valid = ppsim(dir, "validate partial.csv");
  CHECK(partial_valid.status == 0);
  CHECK(partial_valid.out == "partial.csv" + valid_with_waits);

  // The JSON file is a schedule the simulator takes: the same iteration as the generated one.
  const CliRun from_file = ppsim(dir, "simulate --schedule file:s.json --stages 2 --micro-batches 4 " + kCosts + " --json");
  const CliRun generated = ppsim(dir, "simulate " + kSmall1f1b + " " + kCosts + " --json");
  REQUIRE(from_file.status == 0);
  REQUIRE(generated.status == 0);
  CHECK(json::parse(from_file.out).at("iteration_time_s").get<double>() == Approx(1750e-6));
  CHECK(json::parse(generated.out).at("iteration_time_s").get<double>() == Approx(1750e-6));

  const CliRun bad_format = ppsim(dir, "schedule 1f1b --stages 2 --micro-batches 4 --format yaml -o y.txt");
  CHECK(bad_format.status == 2);
  CHECK(bad_format.one_error_line());
  CHECK(contains(bad_format.err, "--format"));
  CHECK_FALSE(fs::exists(dir / "y.txt"));
}

TEST_CASE("ppsim validate names the broken file in one error line", "[cli]") {
  const fs::path dir = case_dir("validate");
  REQUIRE(ppsim(dir, "schedule 1f1b --stages 2 --micro-batches 4 --format json -o s.json").status == 0);
  const std::string text = read_text(dir / "s.json");

  write_text(dir / "truncated.json", text.substr(0, text.size() / 2));
  const CliRun truncated = ppsim(dir, "validate truncated.json");
  CHECK(truncated.status == 2);
  CHECK(truncated.out.empty());
  CHECK(truncated.one_error_line());
  CHECK(truncated.err.rfind("ppsim: error: truncated.json: ", 0) == 0);

  // Rank 0 no longer sends micro-batch 0: rank 1's first receive meets the send of micro-batch 1.
  json schedule = json::parse(text);
  auto& first_step = schedule.at("programs").at(0).at(0);
  const auto send = std::find_if(first_step.begin(), first_step.end(),
                                 [](const json& i) { return i.at("op") == "SendActivation" && i.at("micro_batch") == 0; });
  REQUIRE(send != first_step.end());
  first_step.erase(send);
  write_text(dir / "nosend.json", schedule.dump());
  const CliRun nosend = ppsim(dir, "validate nosend.json");
  CHECK(nosend.status == 2);
  CHECK(nosend.out.empty());
  CHECK(nosend.one_error_line());
  CHECK(nosend.err.rfind("ppsim: error: nosend.json: rank 1, step 1", 0) == 0);
  CHECK(contains(nosend.err, "1RECV_F0"));

  // Rank 1 receives micro-batch 1 first, but rank 0 sends 0 first (sends match in order).
  write_text(dir / "order.csv", "0F0,0SEND_F0,0F1,0SEND_F1,0B0,0B1\n1RECV_F1,1F1,1RECV_F0,1F0,1B0,1B1\n");
  const CliRun order = ppsim(dir, "validate order.csv");
  CHECK(order.status == 2);
  CHECK(order.one_error_line());
  CHECK(order.err.rfind("ppsim: error: order.csv: rank 1, step 0", 0) == 0);
  CHECK(contains(order.err, "1RECV_F1"));

  const CliRun missing = ppsim(dir, "validate absent.json");
  CHECK(missing.status == 2);
  CHECK(missing.one_error_line());
  CHECK(contains(missing.err, "absent.json"));
}

TEST_CASE("ppsim simulate gives the 1F1B closed form and writes the predicted trace", "[cli]") {
  const fs::path dir = case_dir("simulate");
  const std::string args = "simulate --schedule 1f1b --stages 4 --micro-batches 8 --f-cost 1 --b-cost 1 --w-cost 1";
  const CliRun run = ppsim(dir, args + " --json --trace t.json");
  INFO(run.err);
  REQUIRE(run.status == 0);
  const json summary = json::parse(run.out);
  CHECK(summary.at("schedule") == "1f1b");
  CHECK(summary.at("num_ranks") == 4);
  CHECK(summary.at("num_micro_batches") == 8);
  CHECK(summary.at("iteration_time_s").get<double>() == Approx((8 + 4 - 1) * (1.0 + 1.0 + 1.0)));
  CHECK(summary.at("bubble_fraction").get<double>() == Approx(3.0 / 11.0));
  CHECK(summary.at("throughput_samples_per_s").get<double>() == Approx(8.0 / 33.0));
  REQUIRE(summary.at("ranks").size() == 4);
  for (int r = 0; r < 4; ++r) {
    const json& rank = summary.at("ranks").at(r);
    INFO("rank " << r);
    CHECK(rank.at("rank") == r);
    CHECK(rank.at("busy_s").get<double>() == Approx(24.0));
    CHECK(rank.at("bubble_fraction").get<double>() == Approx(3.0 / 11.0));
    CHECK(rank.at("peak_memory_bytes") == 2 * (4 - r));
  }

  const json trace = read_json(dir / "t.json");
  const json& meta = trace.at("otherData");
  CHECK(meta.at("format") == "pipescope.trace/1");
  CHECK(meta.at("source") == "predicted");
  CHECK(meta.at("schedule") == "1f1b");
  CHECK(meta.at("num_ranks") == 4);
  CHECK(meta.at("num_micro_batches") == 8);
  CHECK(count_events(trace, "F") == 32);
  CHECK(count_events(trace, "B") == 32);
  CHECK(trace_end_us(trace) == Approx(33e6));

  const CliRun table = ppsim(dir, args);
  REQUIRE(table.status == 0);
  CHECK(contains(table.out, "iteration time   33 s\n"));
  CHECK(contains(table.out, "bubble fraction  27.27 %\n"));

  struct Bad {
    std::string args, named;
  };
  const std::string costs = " --f-cost 1 --b-cost 1 --w-cost 1";
  for (const Bad& bad : {Bad{"--schedule 1f1b --stages 4 --micro-batches 0" + costs, "--micro-batches must be at least 1"},
                         Bad{"--schedule nosuch --stages 4 --micro-batches 8" + costs, "unknown schedule 'nosuch'"},
                         Bad{"--schedule 1f1b --stages abc --micro-batches 8" + costs, "'--stages'"},
                         Bad{"--schedule 1f1b --stages 4 --micro-batches 8 --f-mem 3" + costs, "--f-mem + --b-mem"}}) {
    INFO(bad.args);
    const CliRun refused = ppsim(dir, "simulate " + bad.args + " --trace bad.json");
    INFO(refused.err);
    CHECK(refused.status == 2);
    CHECK(refused.out.empty());
    CHECK(refused.one_error_line());
    CHECK(contains(refused.err, bad.named));
    CHECK_FALSE(fs::exists(dir / "bad.json"));
  }
  // A trace that cannot be written is a failure while running: exit 1.
  const CliRun unwritable = ppsim(dir, args + " --trace absent-folder/t.json");
  CHECK(unwritable.status == 1);
  CHECK(unwritable.one_error_line());
  CHECK(contains(unwritable.err, "absent-folder/t.json"));
}

TEST_CASE("ppsim calibrate learns a profile from simulated traces that simulate then uses", "[cli]") {
  const fs::path dir = case_dir("calibrate");
  const std::string costs = "--stages 2 --micro-batches 4 --f-cost 100e-6 --b-cost 150e-6 --w-cost 50e-6";
  REQUIRE(ppsim(dir, "simulate --schedule 1f1b " + costs + " --trace 1f1b.json").status == 0);
  REQUIRE(ppsim(dir, "simulate --schedule zb-h1 " + costs + " --trace zb-h1.json").status == 0);
  // calibrate refuses predictions: the simulated traces stand in for measurements here.
  for (const char* name : {"1f1b.json", "zb-h1.json"}) {
    json trace = read_json(dir / name);
    trace["otherData"]["source"] = "measured";
    write_text(dir / name, trace.dump());
  }

  const CliRun median = ppsim(dir, "calibrate 1f1b.json zb-h1.json -o profile.json --statistic median --report r.txt");
  INFO(median.err);
  REQUIRE(median.status == 0);
  const std::string report = read_text(dir / "r.txt");
  CHECK(median.out == report + "wrote profile.json\n");
  CHECK(contains(report, "backward split measured"));

  auto check_profile = [](const json& profile, const std::string& statistic) {
    CHECK(profile.at("format") == "pipescope.profile/1");
    CHECK(profile.at("backward_split") == "measured");
    CHECK(profile.at("calibration").at("duration_statistic") == statistic);
    CHECK(profile.at("calibration").at("traces") == json::array({"1f1b.json", "zb-h1.json"}));
    CHECK(profile.at("calibration").at("schedules") == json::array({"1f1b", "zb-h1"}));
    REQUIRE(profile.at("stages").size() == 2);
    for (int s = 0; s < 2; ++s) {
      const json& stage = profile.at("stages").at(s);
      INFO("stage " << s);
      CHECK(stage.at("stage") == s);
      CHECK(stage.at("f_s").get<double>() == Approx(100e-6));
      CHECK(stage.at("b_s").get<double>() == Approx(150e-6));
      CHECK(stage.at("w_s").get<double>() == Approx(50e-6));
      CHECK(stage.at("full_backward_s").get<double>() == Approx(200e-6));
    }
  };
  check_profile(read_json(dir / "profile.json"), "median");

  REQUIRE(ppsim(dir, "calibrate 1f1b.json zb-h1.json -o profile-mean.json --statistic mean --quiet").status == 0);
  check_profile(read_json(dir / "profile-mean.json"), "mean");
  // The default is the mean: what the measured iteration time of a run is.
  REQUIRE(ppsim(dir, "calibrate 1f1b.json zb-h1.json -o profile-default.json --quiet").status == 0);
  CHECK(read_json(dir / "profile-default.json").at("calibration").at("duration_statistic") == "mean");

  const CliRun average = ppsim(dir, "calibrate 1f1b.json zb-h1.json -o profile-average.json --statistic average --report r2.txt");
  CHECK(average.status == 2);
  CHECK(average.one_error_line());
  CHECK(contains(average.err, "--statistic"));
  CHECK_FALSE(fs::exists(dir / "profile-average.json"));
  CHECK_FALSE(fs::exists(dir / "r2.txt"));

  // The profile predicts zb-h1 at twice the micro-batches: m(F+B+W) + (p-1)(F+B-W).
  const std::string zb8 = "simulate --schedule zb-h1 --stages 2 --micro-batches 8 --json";
  const CliRun predicted = ppsim(dir, zb8 + " --profile profile.json");
  INFO(predicted.err);
  REQUIRE(predicted.status == 0);
  const CliRun direct = ppsim(dir, zb8 + " --f-cost 100e-6 --b-cost 150e-6 --w-cost 50e-6");
  REQUIRE(direct.status == 0);
  const double predicted_s = json::parse(predicted.out).at("iteration_time_s").get<double>();
  CHECK(predicted_s == Approx(8 * 300e-6 + (100e-6 + 150e-6 - 50e-6)));
  CHECK(predicted_s == Approx(json::parse(direct.out).at("iteration_time_s").get<double>()).epsilon(1e-9));

  // Full backwards only: the split is estimated, and a split-backward schedule's prediction says
  // so, with an interval around it; left unmeasured, such a schedule is refused.
  REQUIRE(ppsim(dir, "calibrate 1f1b.json -o estimated.json -q").status == 0);
  CHECK(read_json(dir / "estimated.json").at("backward_split") == "estimated");
  const CliRun estimated = ppsim(dir, zb8 + " --profile estimated.json");
  INFO(estimated.err);
  REQUIRE(estimated.status == 0);
  const json with_estimate = json::parse(estimated.out);
  CHECK(contains(with_estimate.at("estimated").at(0).get<std::string>(), "backward split"));
  const auto interval = with_estimate.at("iteration_time_interval_s");
  CHECK(interval.at(0).get<double>() <= with_estimate.at("iteration_time_s").get<double>());
  CHECK(interval.at(1).get<double>() > with_estimate.at("iteration_time_s").get<double>());
  CHECK_FALSE(json::parse(ppsim(dir, "simulate --schedule 1f1b --stages 2 --micro-batches 8 --json --profile estimated.json").out)
                  .contains("estimated"));
  REQUIRE(ppsim(dir, "calibrate 1f1b.json -o full-only.json -q --no-split-estimate").status == 0);
  CHECK(read_json(dir / "full-only.json").at("backward_split") == "unmeasured");
  const CliRun refused = ppsim(dir, zb8 + " --profile full-only.json");
  CHECK(refused.status == 2);
  CHECK(refused.one_error_line());
  CHECK(refused.err.rfind("ppsim: error: full-only.json: ", 0) == 0);
  CHECK(contains(refused.err, "split"));
}

TEST_CASE("ppsim calibrate reads the steps pprun traced beside a file and says what its input lacks", "[cli]") {
  const fs::path dir = case_dir("calibrate-steps");
  const std::string costs = "--stages 2 --micro-batches 4 --f-cost 100e-6 --b-cost 150e-6 --w-cost 50e-6";
  REQUIRE(ppsim(dir, "simulate --schedule 1f1b " + costs + " --trace t.json").status == 0);
  json trace = read_json(dir / "t.json");
  trace["otherData"]["source"] = "measured";
  // pprun --trace t.json --trace-steps 3 writes steps 5 and 6 beside t.json (step 7): the same
  // run, at its end. t.step2.json is left from an earlier run, an hour older.
  for (const char* name : {"t.step5.json", "t.step6.json", "t.json", "t.step2.json"}) write_text(dir / name, trace.dump());
  fs::last_write_time(dir / "t.step2.json", fs::last_write_time(dir / "t.json") - std::chrono::hours(1));

  const CliRun steps = ppsim(dir, "calibrate t.json -o p.json");
  INFO(steps.err);
  REQUIRE(steps.status == 0);
  CHECK(read_json(dir / "p.json").at("calibration").at("traces") == json::array({"t.step5.json", "t.step6.json", "t.json"}));
  CHECK_FALSE(contains(steps.err, "one traced step"));
  // Named together, each file is read once.
  REQUIRE(ppsim(dir, "calibrate t.step6.json t.json -o p2.json -q").status == 0);
  CHECK(read_json(dir / "p2.json").at("calibration").at("traces") == json::array({"t.step6.json", "t.step5.json", "t.json"}));
  // Two traced runs (docs/ACCURACY.md: trace twice on a host that drifts): both, with their steps.
  for (const char* name : {"u.step4.json", "u.json"}) write_text(dir / name, trace.dump());
  REQUIRE(ppsim(dir, "calibrate t.json u.json -o p3.json -q").status == 0);
  CHECK(read_json(dir / "p3.json").at("calibration").at("traces") ==
        json::array({"t.step5.json", "t.step6.json", "t.json", "u.step4.json", "u.json"}));

  // One step alone: calibrate says so, and still writes the profile.
  fs::create_directory(dir / "one");
  write_text(dir / "one" / "t.json", trace.dump());
  const CliRun one = ppsim(dir, "calibrate one/t.json -o one/p.json");
  CHECK(one.status == 0);
  CHECK(contains(one.err, "calibrate: note: one traced step (one/t.json)"));
  CHECK(fs::exists(dir / "one" / "p.json"));
}

TEST_CASE("ppsim compare reports the SPEC section 7 fields of two traces", "[cli]") {
  const fs::path dir = case_dir("compare");
  REQUIRE(ppsim(dir, "simulate " + kSmall1f1b + " " + kCosts + " --trace base.json").status == 0);
  REQUIRE(ppsim(dir, "simulate " + kSmall1f1b + " " + kDoubledCosts + " --trace doubled.json").status == 0);

  const CliRun same = ppsim(dir, "compare base.json base.json --json");
  INFO(same.err);
  REQUIRE(same.status == 0);
  const json itself = json::parse(same.out);
  CHECK(itself.at("iteration_time_predicted_s").get<double>() == Approx(1750e-6));
  CHECK(itself.at("iteration_time_measured_s").get<double>() == Approx(1750e-6));
  CHECK(itself.at("iteration_time_error").get<double>() == 0.0);
  CHECK(itself.at("op_duration_mape").get<double>() == 0.0);
  CHECK(itself.at("peak_memory_error") == json::array({0.0, 0.0}));
  CHECK(itself.at("bubble_fraction_predicted").get<double>() == Approx(0.2));
  CHECK(itself.at("bubble_fraction_measured").get<double>() == Approx(0.2));
  CHECK(itself.at("matched_operations") == 46);
  CHECK(itself.at("unmatched_predicted") == 0);
  CHECK(itself.at("unmatched_measured") == 0);

  const CliRun slower = ppsim(dir, "compare base.json doubled.json --json");
  REQUIRE(slower.status == 0);
  const json half = json::parse(slower.out);
  CHECK(half.at("iteration_time_predicted_s").get<double>() == Approx(1750e-6));
  CHECK(half.at("iteration_time_measured_s").get<double>() == Approx(3500e-6));
  CHECK(half.at("iteration_time_error").get<double>() == Approx(-0.5));
  CHECK(half.at("op_duration_mape").get<double>() == Approx(0.5));
  CHECK(half.at("peak_memory_error") == json::array({0.0, 0.0}));
  CHECK(half.at("bubble_fraction_predicted").get<double>() == Approx(0.2));
  CHECK(half.at("bubble_fraction_measured").get<double>() == Approx(0.2));
  REQUIRE(half.at("ranks").size() == 2);
  CHECK(half.at("ranks").at(0).at("peak_memory_predicted_bytes") == half.at("ranks").at(0).at("peak_memory_measured_bytes"));

  const CliRun table = ppsim(dir, "compare base.json doubled.json --top 2");
  REQUIRE(table.status == 0);
  const auto lines = lines_of(table.out);
  const auto row = std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("iteration time", 0) == 0; });
  REQUIRE(row != lines.end());
  CHECK(contains(*row, "1.750 ms"));
  CHECK(contains(*row, "3.500 ms"));
  CHECK(contains(*row, "-50.0%"));
  CHECK(contains(table.out, "MAPE 50.0% over 46 matched operations"));
  // Rank 0's four forwards: 0.4 ms predicted, 0.8 ms measured; and the receives, both kinds.
  const auto forwards = std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("0     F ", 0) == 0; });
  REQUIRE(forwards != lines.end());
  CHECK(contains(*forwards, "0.400"));
  CHECK(contains(*forwards, "0.800"));
  CHECK(contains(*forwards, "-0.400"));
  CHECK(contains(table.out, "receives whose data was sent before them (their own cost): predicted "));
  CHECK(contains(table.out, "receives that waited (from the send to the data): predicted "));
  const json& backward_times = half.at("operation_times").at(0);  // "B" sorts before "F"
  CHECK((backward_times.at("rank") == 0 && backward_times.at("name") == "B"));
  CHECK(backward_times.at("measured_total_us").get<double>() == Approx(2 * backward_times.at("predicted_total_us").get<double>()));
  const json& receives = half.at("receives");
  CHECK(receives.at("predicted").at("ready").get<int>() + receives.at("predicted").at("waited").get<int>() ==
        receives.at("measured").at("ready").get<int>() + receives.at("measured").at("waited").get<int>());
  CHECK(receives.at("measured").at("unmatched") == 0);
  CHECK_FALSE(contains(table.out, "stolen"));  // a trace that does not say
  CHECK(itself.at("stolen_time_fraction_measured").is_null());

  // A measured step from which the host took 10% of rank 1's time (pprun's
  // otherData.stolen_time_s): reported, and the table warns that the measurement is disturbed.
  json stolen_trace = json::parse(read_text(dir / "base.json"));
  stolen_trace["otherData"]["stolen_time_s"] = json::array({0.0, 175e-6});
  write_text(dir / "stolen.json", stolen_trace.dump());
  const CliRun stolen = ppsim(dir, "compare base.json stolen.json --json");
  INFO(stolen.err);
  REQUIRE(stolen.status == 0);
  const json disturbed = json::parse(stolen.out);
  CHECK(disturbed.at("stolen_time_fraction_measured").get<double>() == Approx(0.1));
  CHECK(disturbed.at("ranks").at(0).at("stolen_time_fraction_measured").get<double>() == 0.0);
  CHECK(disturbed.at("ranks").at(1).at("stolen_time_fraction_measured").get<double>() == Approx(0.1));
  const CliRun stolen_table = ppsim(dir, "compare base.json stolen.json");
  REQUIRE(stolen_table.status == 0);
  CHECK(contains(stolen_table.out, "warning: the host took 10.0% of a rank's measured step from its cores (steal)"));

  // A compressed trace (.json.gz) is the same trace.
  REQUIRE(ppsim(dir, "simulate " + kSmall1f1b + " " + kCosts + " --trace base.json.gz").status == 0);
  const CliRun gzipped = ppsim(dir, "compare base.json base.json.gz --json");
  REQUIRE(gzipped.status == 0);
  CHECK(json::parse(gzipped.out).at("iteration_time_error").get<double>() == 0.0);
  CHECK(json::parse(gzipped.out).at("matched_operations") == 46);

  const CliRun one_file = ppsim(dir, "compare base.json");
  CHECK(one_file.status == 2);
  CHECK(one_file.one_error_line());
  write_text(dir / "truncated.json", read_text(dir / "base.json").substr(0, 200));
  const CliRun truncated = ppsim(dir, "compare base.json truncated.json");
  CHECK(truncated.status == 2);
  CHECK(truncated.one_error_line());
  CHECK(truncated.err.rfind("ppsim: error: truncated.json: ", 0) == 0);
}

TEST_CASE("ppsim plan ranks a small search as a table, CSV and JSON", "[cli]") {
  const fs::path dir = case_dir("plan");
  const std::string search =
      "plan --model gpt-1.3b --gpus 4 --global-batch 8 --schedules 1f1b,gpipe --micro-batch-sizes 1 --recompute off --tensor-parallel-sizes 1 --context-parallel-sizes 1 "
      "--top 6 --quiet";
  const CliRun table = ppsim(dir, search);
  INFO(table.err);
  REQUIRE(table.status == 0);
  const auto lines = lines_of(table.out);
  REQUIRE(lines.size() == 10);  // 2 heading lines, a blank, the column names, 6 rows
  CHECK(lines[0].rfind("gpt-1.3b on 4 x h100 (8 per node), global batch 8", 0) == 0);
  CHECK(lines[1].rfind("6 configurations: 6 simulated, 6 fit, 0 dropped for memory, 0 refused", 0) == 0);
  CHECK(contains(lines[3], "schedule"));
  CHECK(contains(lines[3], "samples/s"));
  for (int i = 0; i < 6; ++i) CHECK(lines[4 + i].rfind("   " + std::to_string(i + 1) + "  ", 0) == 0);

  const CliRun csv = ppsim(dir, search + " --format csv");
  REQUIRE(csv.status == 0);
  const auto csv_lines = lines_of(csv.out);
  REQUIRE(csv_lines.size() == 7);
  CHECK(csv_lines[0].rfind("rank,schedule,pipeline,data_parallel,", 0) == 0);

  const CliRun as_json = ppsim(dir, search + " --format json");
  REQUIRE(as_json.status == 0);
  const json plan = json::parse(as_json.out);
  CHECK(plan.at("model") == "gpt-1.3b");
  CHECK(plan.at("gpus") == 4);
  CHECK(plan.at("global_batch") == 8);
  CHECK(plan.at("considered") == 6);
  CHECK(plan.at("simulated") == 6);
  CHECK(plan.at("fitting") == 6);
  const json& rows = plan.at("configurations");
  REQUIRE(rows.size() == 6);
  double previous_throughput = 1e300;
  const json* pipeline2 = nullptr;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows.at(i);
    INFO("row " << i + 1);
    CHECK(r.at("rank") == i + 1);
    CHECK(r.at("pipeline").get<int>() * r.at("data_parallel").get<int>() == 4);
    CHECK(r.at("num_micro_batches").get<int>() * r.at("micro_batch_size").get<int>() * r.at("data_parallel").get<int>() == 8);
    const double throughput = r.at("throughput_samples_per_s").get<double>();
    CHECK(throughput * r.at("iteration_time_s").get<double>() == Approx(8.0));
    CHECK(throughput <= previous_throughput);
    previous_throughput = throughput;
    CHECK(csv_lines.at(i + 1).rfind(std::to_string(i + 1) + "," + r.at("schedule").get<std::string>() + ",", 0) == 0);
    if (r.at("pipeline") == 2 && r.at("schedule") == "1f1b") pipeline2 = &r;
  }
  // The planner's row is the simulation of that layout.
  REQUIRE(pipeline2 != nullptr);
  const CliRun simulated =
      ppsim(dir, "simulate --model gpt-1.3b --stages 2 --data-parallel 2 --micro-batches 4 --schedule 1f1b --zero1 --json");
  INFO(simulated.err);
  REQUIRE(simulated.status == 0);
  const json summary = json::parse(simulated.out);
  CHECK(pipeline2->at("num_micro_batches") == 4);
  CHECK(pipeline2->at("iteration_time_s").get<double>() == Approx(summary.at("iteration_time_s").get<double>()));
  std::int64_t peak_bytes = 0;
  for (const json& rank : summary.at("ranks")) peak_bytes = std::max(peak_bytes, rank.at("peak_memory_bytes").get<std::int64_t>());
  CHECK(pipeline2->at("peak_memory_bytes") == peak_bytes);

  const CliRun bad = ppsim(dir, search + " --format yaml");
  CHECK(bad.status == 2);
  CHECK(bad.one_error_line());
  CHECK(contains(bad.err, "--format"));
}

TEST_CASE("ppsim takes DeepSpeed's schedules by release", "[cli]") {
  const fs::path dir = case_dir("deepspeed-releases");
  const CliRun written = ppsim(dir, "schedule deepspeed-train@0.8.3 --stages 3 --micro-batches 5 --format json -o ds.json");
  INFO(written.err);
  REQUIRE(written.status == 0);
  CHECK(read_json(dir / "ds.json").at("schedule") == "deepspeed-train@0.8.3");
  const CliRun valid = ppsim(dir, "validate ds.json --blocking-sends");
  INFO(valid.err);
  CHECK(valid.status == 0);
  CHECK(contains(valid.out, "(blocking sends)"));
  const CliRun help = ppsim(dir, "schedule --help");
  for (const char* name : {"deepspeed-train@0.5 ", "deepspeed-train@0.8.3 ", "deepspeed-inference@0.5 "})
    CHECK(contains(help.out, std::string("\n  ") + name));

  for (const std::string name : {"deepspeed-train@0.5", "deepspeed-train@0.14.2"}) {
    INFO(name);
    const CliRun run = ppsim(dir, "simulate --schedule " + name +
                                      " --stages 4 --micro-batches 8 --f-cost 1 --b-cost 1 --w-cost 1 --json");
    INFO(run.err);
    REQUIRE(run.status == 0);
    const json summary = json::parse(run.out);
    for (int r = 0; r < 4; ++r) CHECK(summary.at("ranks").at(r).at("peak_memory_bytes") == 2 * (4 - r));
  }

  const std::string search = "plan --model gpt-1.3b --gpus 2 --global-batch 4 --micro-batch-sizes 1 --recompute off --tensor-parallel-sizes 1 "
                             "--quiet --format json --schedules ";
  const CliRun planned = ppsim(dir, search + "deepspeed-train@0.5,deepspeed-train@0.14.2");
  INFO(planned.err);
  REQUIRE(planned.status == 0);
  std::set<std::string> schedules;
  const json plan = json::parse(planned.out);
  for (const json& row : plan.at("configurations")) schedules.insert(row.at("schedule").get<std::string>());
  CHECK(schedules == std::set<std::string>{"deepspeed-train@0.5", "deepspeed-train@0.14.2"});
  const CliRun too_old = ppsim(dir, search + "deepspeed-train@0.4");
  CHECK(too_old.status == 2);
  CHECK(too_old.out.empty());
  CHECK(too_old.one_error_line());
  CHECK(contains(too_old.err, "deepspeed-train@0.4"));
  CHECK(contains(too_old.err, "older than the oldest one reproduced, deepspeed-train@0.5"));
}

TEST_CASE("ppsim takes Megatron's group size and its releases", "[cli]") {
  const fs::path dir = case_dir("megatron");
  const CliRun refused = ppsim(dir, "schedule interleaved-1f1b --stages 4 --micro-batches 6");
  CHECK(refused.status == 2);
  CHECK(refused.one_error_line());
  CHECK(contains(refused.err, "--micro-batches 6 in groups of 4 leaves a remainder of 2"));
  const CliRun grouped = ppsim(dir, "schedule interleaved-1f1b --stages 4 --micro-batches 6 "
                                    "--microbatch-group-size-per-vp-stage 6 --format json -o il.json");
  INFO(grouped.err);
  REQUIRE(grouped.status == 0);
  CHECK(ppsim(dir, "validate il.json").status == 0);
  const CliRun simulated = ppsim(dir, "simulate --schedule interleaved-1f1b --stages 4 --micro-batches 6 "
                                      "--microbatch-group-size-per-vp-stage 6 --json");
  INFO(simulated.err);
  REQUIRE(simulated.status == 0);
  CHECK(json::parse(simulated.out).at("num_stages") == 8);
  CHECK(ppsim(dir, "schedule 1f1b --stages 4 --micro-batches 2").status == 0);  // Megatron's m < p

  struct Bad {
    std::string args, says;
  };
  for (const Bad& bad : {Bad{"schedule interleaved-1f1b --microbatch-group-size-per-vp-stage 0",
                             "--microbatch-group-size-per-vp-stage must be at least 1, got 0"},
                         Bad{"schedule 1f1b --microbatch-group-size-per-vp-stage 4",
                             "1f1b: --microbatch-group-size-per-vp-stage 4 cannot be honoured"},
                         Bad{"simulate --schedule file:il.json --microbatch-group-size-per-vp-stage 4",
                             "--microbatch-group-size-per-vp-stage 4 cannot be honoured by the schedule file il.json"},
                         Bad{"simulate --schedule interleaved-1f1b@0.20", "newer than the newest one checked, 0.19.2"},
                         Bad{"plan --microbatch-group-size-per-vp-stage -1", "--microbatch-group-size-per-vp-stage"}}) {
    INFO(bad.args);
    const CliRun run = ppsim(dir, bad.args);
    CHECK(run.status == 2);
    CHECK(run.one_error_line());
    CHECK(contains(run.err, bad.says));
  }
  const CliRun help = ppsim(dir, "schedule --help");
  CHECK(contains(help.out, "--microbatch-group-size-per-vp-stage"));
  CHECK(contains(help.out, "\n  interleaved-1f1b@0.1 "));

  // 8 GPUs, global batch 12, G 6: pipeline 2 has m 3 (G above it), 8 has m 12 (G below 8);
  // only pipeline 4 (m 6) can run it, and the others are refused with Megatron's reason.
  const CliRun planned = ppsim(dir, "plan --model gpt-1.3b --gpus 8 --global-batch 12 --micro-batch-sizes 1 --recompute off "
                                    "--tensor-parallel-sizes 1 --context-parallel-sizes 1 --chunks 2 --schedules interleaved-1f1b "
                                    "--microbatch-group-size-per-vp-stage 6 --quiet --format json");
  INFO(planned.err);
  REQUIRE(planned.status == 0);
  const json plan = json::parse(planned.out);
  std::set<int> pipelines;
  for (const json& row : plan.at("configurations")) pipelines.insert(row.at("pipeline").get<int>());
  CHECK(pipelines == std::set<int>{4});
  CHECK(plan.at("refused") == 2);
}

TEST_CASE("ppsim refuses an unknown command in one line and lists its commands", "[cli]") {
  const fs::path dir = case_dir("usage");
  const CliRun unknown = ppsim(dir, "frobnicate");
  CHECK(unknown.status == 2);
  CHECK(unknown.out.empty());
  CHECK(unknown.one_error_line());
  CHECK(contains(unknown.err, "'frobnicate'"));

  const CliRun bare = ppsim(dir, "");
  CHECK(bare.status == 2);
  CHECK(bare.out.empty());
  CHECK(contains(bare.err, "usage: ppsim COMMAND"));

  const CliRun help = ppsim(dir, "--help");
  CHECK(help.status == 0);
  for (const char* command : {"schedule", "validate", "simulate", "plan", "calibrate", "compare"})
    CHECK(contains(help.out, std::string("\n  ") + command + " "));
}
