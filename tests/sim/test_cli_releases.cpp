// ppsim end to end: the releases of DeepSpeed's and Megatron's schedules, from `schedule` to
// `plan` (cli_test_support.hpp). Expected:
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
#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_test_support.hpp"

namespace fs = std::filesystem;
using cli_test::case_dir;
using cli_test::CliRun;
using cli_test::contains;
using cli_test::ppsim;
using cli_test::read_json;
using nlohmann::json;

TEST_CASE("ppsim takes DeepSpeed's schedules by release", "[cli]") {
  const fs::path dir = case_dir("deepspeed-releases");
  const CliRun written =
      ppsim(dir, "schedule deepspeed-train@0.8.3 --stages 3 --micro-batches 5 --format json -o ds.json");
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
    const CliRun run = ppsim(
        dir, "simulate --schedule " + name + " --stages 4 --micro-batches 8 --f-cost 1 --b-cost 1 --w-cost 1 --json");
    INFO(run.err);
    REQUIRE(run.status == 0);
    const json summary = json::parse(run.out);
    for (int r = 0; r < 4; ++r) CHECK(summary.at("ranks").at(r).at("peak_memory_bytes") == 2 * (4 - r));
  }

  const std::string search =
      "plan --model gpt-1.3b --gpus 2 --global-batch 4 --micro-batch-sizes 1 --recompute off --tensor-parallel-sizes 1 "
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
  const CliRun grouped = ppsim(dir,
                               "schedule interleaved-1f1b --stages 4 --micro-batches 6 "
                               "--microbatch-group-size-per-vp-stage 6 --format json -o il.json");
  INFO(grouped.err);
  REQUIRE(grouped.status == 0);
  CHECK(ppsim(dir, "validate il.json").status == 0);
  const CliRun simulated = ppsim(dir,
                                 "simulate --schedule interleaved-1f1b --stages 4 --micro-batches 6 "
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
  const CliRun planned =
      ppsim(dir,
            "plan --model gpt-1.3b --gpus 8 --global-batch 12 --micro-batch-sizes 1 --recompute off "
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
