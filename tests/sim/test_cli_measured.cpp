// ppsim end to end on measured traces: `calibrate` learns a profile that `simulate` uses, and
// `compare` sets a measured trace beside a prediction (cli_test_support.hpp). Expected:
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
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_support.hpp"

namespace fs = std::filesystem;
using cli_test::case_dir;
using cli_test::CliRun;
using cli_test::contains;
using cli_test::kCosts;
using cli_test::kDoubledCosts;
using cli_test::kSmall1f1b;
using cli_test::lines_of;
using cli_test::ppsim;
using cli_test::read_json;
using cli_test::read_text;
using cli_test::write_text;
using nlohmann::json;

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

  const CliRun average =
      ppsim(dir, "calibrate 1f1b.json zb-h1.json -o profile-average.json --statistic average --report r2.txt");
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
  const auto& interval = with_estimate.at("iteration_time_interval_s");
  CHECK(interval.at(0).get<double>() <= with_estimate.at("iteration_time_s").get<double>());
  CHECK(interval.at(1).get<double>() > with_estimate.at("iteration_time_s").get<double>());
  CHECK_FALSE(
      json::parse(
          ppsim(dir, "simulate --schedule 1f1b --stages 2 --micro-batches 8 --json --profile estimated.json").out)
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
  for (const char* name : {"t.step5.json", "t.step6.json", "t.json", "t.step2.json"})
    write_text(dir / name, trace.dump());
  fs::last_write_time(dir / "t.step2.json", fs::last_write_time(dir / "t.json") - std::chrono::hours(1));

  const CliRun steps = ppsim(dir, "calibrate t.json -o p.json");
  INFO(steps.err);
  REQUIRE(steps.status == 0);
  CHECK(read_json(dir / "p.json").at("calibration").at("traces") ==
        json::array({"t.step5.json", "t.step6.json", "t.json"}));
  CHECK_FALSE(contains(steps.err, "one traced step"));
  // Named together, each file is read once.
  REQUIRE(ppsim(dir, "calibrate t.step6.json t.json -o p2.json -q").status == 0);
  CHECK(read_json(dir / "p2.json").at("calibration").at("traces") ==
        json::array({"t.step6.json", "t.step5.json", "t.json"}));
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
  CHECK(half.at("op_duration_weighted_error").get<double>() == Approx(0.5));
  CHECK(half.at("peak_memory_error") == json::array({0.0, 0.0}));
  CHECK(half.at("bubble_fraction_predicted").get<double>() == Approx(0.2));
  CHECK(half.at("bubble_fraction_measured").get<double>() == Approx(0.2));
  REQUIRE(half.at("ranks").size() == 2);
  CHECK(half.at("ranks").at(0).at("peak_memory_predicted_bytes") ==
        half.at("ranks").at(0).at("peak_memory_measured_bytes"));

  const CliRun table = ppsim(dir, "compare base.json doubled.json --top 2");
  REQUIRE(table.status == 0);
  const auto lines = lines_of(table.out);
  const auto row =
      std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("iteration time", 0) == 0; });
  REQUIRE(row != lines.end());
  CHECK(contains(*row, "1.750 ms"));
  CHECK(contains(*row, "3.500 ms"));
  CHECK(contains(*row, "-50.0%"));
  CHECK(contains(table.out, "MAPE 50.0%, weighted by duration 50.0%, over 46 matched operations"));
  // Rank 0's four forwards: 0.4 ms predicted, 0.8 ms measured; and the receives, both kinds.
  const auto forwards =
      std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("0     F ", 0) == 0; });
  REQUIRE(forwards != lines.end());
  CHECK(contains(*forwards, "0.400"));
  CHECK(contains(*forwards, "0.800"));
  CHECK(contains(*forwards, "-0.400"));
  CHECK(contains(table.out, "receives whose data was sent before them (their own cost): predicted "));
  CHECK(contains(table.out, "receives that waited (from the send to the data): predicted "));
  const json& backward_times = half.at("operation_times").at(0);  // "B" sorts before "F"
  CHECK((backward_times.at("rank") == 0 && backward_times.at("name") == "B"));
  CHECK(backward_times.at("measured_total_us").get<double>() ==
        Approx(2 * backward_times.at("predicted_total_us").get<double>()));
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
