// ppsim end to end: the real binary, run through the shell as a user runs it, on real files in a
// temporary folder (cli_test_support.hpp). Its schedules, their validation and simulation, and
// its usage. Expected:
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
// - `ppsim frobnicate`: exit 2, one line; `ppsim` alone: exit 2 with the usage; `--help` lists the
//   six commands.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_support.hpp"

namespace fs = std::filesystem;
using cli_test::case_dir;
using cli_test::CliRun;
using cli_test::contains;
using cli_test::count_events;
using cli_test::kCosts;
using cli_test::kSmall1f1b;
using cli_test::lines_of;
using cli_test::ppsim;
using cli_test::read_json;
using cli_test::read_text;
using cli_test::trace_end_us;
using cli_test::write_text;
using nlohmann::json;

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
  const CliRun from_file =
      ppsim(dir, "simulate --schedule file:s.json --stages 2 --micro-batches 4 " + kCosts + " --json");
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
  const auto send = std::find_if(first_step.begin(), first_step.end(), [](const json& i) {
    return i.at("op") == "SendActivation" && i.at("micro_batch") == 0;
  });
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
  for (const Bad& bad :
       {Bad{"--schedule 1f1b --stages 4 --micro-batches 0" + costs, "--micro-batches must be at least 1"},
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
