// ppsim end to end: `plan` ranks a small search (cli_test_support.hpp). Expected:
// - `plan` of gpt-1.3b on 4 H100, global batch 8, 1f1b and gpipe, micro-batch size 1, no
//   recomputation: 6 configurations (pipeline 1, 2, 4 x 2 schedules), all simulated and fitting;
//   the table and the CSV show the top 3; the JSON rows have pipeline x data_parallel = 4,
//   micro-batches x size x data_parallel = 8, throughput x iteration time = 8, throughput not
//   rising, and the pipeline-2 1f1b row equals `simulate --model gpt-1.3b --stages 2
//   --data-parallel 2 --micro-batches 4 --zero1`.
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
using cli_test::lines_of;
using cli_test::ppsim;
using nlohmann::json;

TEST_CASE("ppsim plan ranks a small search as a table, CSV and JSON", "[cli]") {
  const fs::path dir = case_dir("plan");
  const std::string search =
      "plan --model gpt-1.3b --gpus 4 --global-batch 8 --schedules 1f1b,gpipe --micro-batch-sizes 1 --recompute off "
      "--tensor-parallel-sizes 1 --context-parallel-sizes 1 "
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
    CHECK(r.at("num_micro_batches").get<int>() * r.at("micro_batch_size").get<int>() *
              r.at("data_parallel").get<int>() ==
          8);
    const double throughput = r.at("throughput_samples_per_s").get<double>();
    CHECK(throughput * r.at("iteration_time_s").get<double>() == Approx(8.0));
    CHECK(throughput <= previous_throughput);
    previous_throughput = throughput;
    CHECK(csv_lines.at(i + 1).rfind(std::to_string(i + 1) + "," + r.at("schedule").get<std::string>() + ",", 0) == 0);
    if (r.at("pipeline") == 2 && r.at("schedule") == "1f1b") pipeline2 = &r;
  }
  // The planner's row is the simulation of that layout.
  REQUIRE(pipeline2 != nullptr);
  const CliRun simulated = ppsim(
      dir, "simulate --model gpt-1.3b --stages 2 --data-parallel 2 --micro-batches 4 --schedule 1f1b --zero1 --json");
  INFO(simulated.err);
  REQUIRE(simulated.status == 0);
  const json summary = json::parse(simulated.out);
  CHECK(pipeline2->at("num_micro_batches") == 4);
  CHECK(pipeline2->at("iteration_time_s").get<double>() == Approx(summary.at("iteration_time_s").get<double>()));
  std::int64_t peak_bytes = 0;
  for (const json& rank : summary.at("ranks"))
    peak_bytes = std::max(peak_bytes, rank.at("peak_memory_bytes").get<std::int64_t>());
  CHECK(pipeline2->at("peak_memory_bytes") == peak_bytes);

  const CliRun bad = ppsim(dir, search + " --format yaml");
  CHECK(bad.status == 2);
  CHECK(bad.one_error_line());
  CHECK(contains(bad.err, "--format"));
}
