// Issue 19, items 3 and 5: sizes that cannot fit, rank counts that differ, numbers that are not
// numbers, directories given as files, predictions given as measurements, flags that
// contradict a schedule file, a deferral limit that is no count. Each case runs ppsim as a user
// would and expects one line on stderr naming the option (or file) and a non-zero exit, quickly,
// with nothing allocated first.
#include <catch2/catch.hpp>

#include <cstdio>

#include "reliability_support.hpp"

using namespace reliability;

namespace {

const std::string ppsim = PPSIM_PATH;

// A pipescope trace of `ranks` ranks, one compute event each, written directly (fast: a 100k
// rank file in well under a second, not through ppsim).
void write_trace_of_ranks(const fs::path& path, int ranks, const std::string& source) {
  std::FILE* out = std::fopen(path.c_str(), "w");
  REQUIRE(out);
  std::fprintf(out, "{\"traceEvents\":[");
  for (int r = 0; r < ranks; ++r)
    std::fprintf(out,
                 "%s{\"name\":\"F\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%d,\"dur\":1,\"args\":{\"stage\":%d,"
                 "\"micro_batch\":0}}",
                 r ? "," : "", r, r, r);
  std::fprintf(out, "],\"otherData\":{\"format\":\"pipescope.trace/1\",\"source\":\"%s\",\"num_ranks\":%d}}\n",
               source.c_str(), ranks);
  std::fclose(out);
}

}  // namespace

TEST_CASE("simulate refuses 64 stages x 1e8 micro-batches before allocating, naming the options",
          "[reliability][limits]") {
  const auto dir = case_dir("huge-micro-batches");
  const CliRun run = run_cli(ppsim, dir, "simulate --schedule 1f1b --stages 64 --micro-batches 100000000", 20);
  CHECK_FALSE(run.timed_out);
  CHECK(run.status == 2);
  CHECK(run.one_error_line("ppsim"));
  CHECK(contains(run.err, "--micro-batches 100000000"));
  CHECK(contains(run.err, "instructions"));
}

// --wgrad-deferral-limit past an int, not a number, or negative: one line naming the option, and
// the --trace asked for is not written.
TEST_CASE("simulate refuses a deferral limit that is no count, naming the option", "[reliability][limits]") {
  const auto dir = case_dir("deferral-limit");
  for (const std::string limit : {"99999999999", "abc", "-3"}) {
    INFO(limit);
    const CliRun run = run_cli(ppsim, dir,
                               "simulate --model llama-3-70b --stages 4 --defer-embedding-wgrad-compute "
                               "--wgrad-deferral-limit=" +
                                   limit + " --trace t.json",
                               20);
    CHECK_FALSE(run.timed_out);
    CHECK(run.status == 2);
    CHECK(run.one_error_line("ppsim"));
    CHECK(contains(run.err, "--wgrad-deferral-limit"));
    CHECK_FALSE(fs::exists(dir / "t.json"));
  }
}

// Megatron's size names and --node-pace-spread past their types or their ranges: one line naming
// the option as typed, and the --trace asked for is not written.
TEST_CASE("simulate refuses Megatron's sizes and a node pace spread out of range, naming the option",
          "[reliability][limits]") {
  const auto dir = case_dir("megatron-sizes");
  for (const std::string option : {"--pipeline-model-parallel-size=99999999999", "--global-batch-size=99999999999",
                                   "--tensor-model-parallel-size=-2", "--node-pace-spread=1e400",
                                   "--node-pace-spread=abc", "--node-pace-spread=-0.5"}) {
    INFO(option);
    const CliRun run = run_cli(ppsim, dir, "simulate --model llama-3-8b " + option + " --trace t.json", 20);
    CHECK_FALSE(run.timed_out);
    CHECK(run.status == 2);
    CHECK(run.one_error_line("ppsim"));
    CHECK(contains(run.err, option.substr(0, option.find('='))));
    CHECK_FALSE(fs::exists(dir / "t.json"));
  }
}

TEST_CASE("simulate refuses a million stages, naming --stages", "[reliability][limits]") {
  const auto dir = case_dir("huge-stages");
  const CliRun run = run_cli(ppsim, dir, "simulate --schedule gpipe --stages 1000000", 20);
  CHECK_FALSE(run.timed_out);
  CHECK(run.status == 2);
  CHECK(run.one_error_line("ppsim"));
  CHECK(contains(run.err, "--stages 1000000"));
}

TEST_CASE("plan refuses a global batch of 1e9, naming --global-batch", "[reliability][limits]") {
  const auto dir = case_dir("huge-global-batch");
  const CliRun run = run_cli(ppsim, dir, "plan --global-batch 1000000000 -q", 20);
  CHECK_FALSE(run.timed_out);
  CHECK(run.status == 2);
  CHECK(run.one_error_line("ppsim"));
  CHECK(contains(run.err, "--global-batch 1000000000"));
}

TEST_CASE("a schedule file declaring 2e9 micro-batches is refused, naming the file", "[reliability][limits]") {
  const auto dir = case_dir("absurd-file");
  REQUIRE(run_cli(ppsim, dir, "schedule gpipe --stages 1 --micro-batches 1 --format json -o s.json", 20).status == 0);
  std::string text = read_text(dir / "s.json");
  const std::string declared = "\"num_micro_batches\": 1";
  REQUIRE(contains(text, declared));
  text.replace(text.find(declared), declared.size(), "\"num_micro_batches\": 2000000000");
  write_text(dir / "s.json", text);
  const CliRun run = run_cli(ppsim, dir, "simulate --schedule file:s.json", 20);
  CHECK_FALSE(run.timed_out);
  CHECK(run.status == 2);
  CHECK(run.one_error_line("ppsim"));
  CHECK(contains(run.err, "s.json: num_stages 1 x num_micro_batches 2000000000"));
}

TEST_CASE("simulate --trace refuses a trace larger than the memory budget", "[reliability][limits]") {
  const auto dir = case_dir("trace-budget");
  // 56,032 instructions: 12.5 MB to simulate fits in 20 MB, 39 MB of trace does not.
  const CliRun run = run_cli(ppsim, dir, "simulate --stages 8 --micro-batches 1000 --trace t.json", 20,
                             "PIPESCOPE_MEMORY_BUDGET=20000000");
  CHECK(run.status == 2);
  CHECK(run.one_error_line("ppsim"));
  CHECK(contains(run.err, "--trace t.json"));
  CHECK(contains(run.err, "PIPESCOPE_MEMORY_BUDGET"));
  CHECK_FALSE(fs::exists(dir / "t.json"));
}

TEST_CASE("simulate --steady-state refuses four iterations larger than the memory budget", "[reliability][limits]") {
  const auto dir = case_dir("steady-budget");
  // 46,024 instructions of 1f1b 8 x 1000 fit 20 MB; four iterations of them (36.8 MB) do not.
  const CliRun run = run_cli(ppsim, dir, "simulate --stages 8 --micro-batches 1000 --steady-state", 20,
                             "PIPESCOPE_MEMORY_BUDGET=20000000");
  CHECK(run.status == 2);
  CHECK(run.one_error_line("ppsim"));
  CHECK(contains(run.err, "--steady-state: 4 iterations of"));
  CHECK(contains(run.err, "PIPESCOPE_MEMORY_BUDGET"));
}

TEST_CASE("compare refuses 2 ranks against 100k quickly, with both counts", "[reliability][limits]") {
  const auto dir = case_dir("compare-ranks");
  write_trace_of_ranks(dir / "pred.json", 2, "predicted");
  write_trace_of_ranks(dir / "meas.json", 100000, "measured");
  // Refused from the rank counts alone, before any matching: well inside the hang guard.
  const CliRun run = run_cli(ppsim, dir, "compare pred.json meas.json", 60);
  CHECK_FALSE(run.timed_out);
  CHECK(run.status == 2);
  CHECK(run.one_error_line("ppsim"));
  CHECK(contains(run.err, "pred.json has 2 ranks, meas.json has 100000"));
}

TEST_CASE("compare of two 100k-rank traces is linear, not ranks x events", "[reliability][limits]") {
  const auto dir = case_dir("compare-many-ranks");
  write_trace_of_ranks(dir / "pred.json", 100000, "predicted");
  write_trace_of_ranks(dir / "meas.json", 100000, "measured");
  // Matching rank by rank against every rank (the quadratic way) takes 10^10 steps here, far
  // past the hang guard; the linear matching ends in seconds.
  const CliRun run = run_cli(ppsim, dir, "compare pred.json meas.json --json", 120);
  CHECK_FALSE(run.timed_out);
  CHECK(run.status == 0);
  CHECK(contains(run.out, "\"matched_operations\":100000"));
}

TEST_CASE("costs whose sum overflows are refused with the options, not reported as a deadlock",
          "[reliability][limits]") {
  const auto dir = case_dir("cost-overflow");
  const CliRun run = run_cli(ppsim, dir, "simulate --f-cost 1e308 --b-cost 1e308", 20);
  CHECK(run.status == 2);
  CHECK(run.one_error_line("ppsim"));
  CHECK(contains(run.err, "--f-cost 1e+308 --b-cost 1e+308"));
  CHECK_FALSE(contains(run.err, "deadlock"));
}

TEST_CASE("--efficiency nan and other non-finite options are refused by name", "[reliability][limits]") {
  const auto dir = case_dir("nan-options");
  const std::pair<std::string, std::string> cases[] = {
      {"simulate --model gpt-7b --efficiency nan", "--efficiency"},
      {"simulate --f-cost nan", "--f-cost"},
      {"simulate --c-cost inf", "--c-cost"},
      {"simulate --model gpt-7b --inter-latency nan", "--inter-latency"},
      {"plan --efficiency nan -q", "--efficiency"},
      {"plan --intra-latency=-1 -q", "--intra-latency"},
      {"calibrate x.json -o p.json --outlier-fraction inf", "--outlier-fraction"}};
  for (const auto& [args, option] : cases) {
    const CliRun run = run_cli(ppsim, dir, args, 20);
    INFO(args << " -> " << run.err);
    CHECK(run.status == 2);
    CHECK(run.one_error_line("ppsim"));
    CHECK(contains(run.err, option + ": must be"));
  }
}

TEST_CASE("a directory given as a file is refused as such, for every file input", "[reliability][limits]") {
  const auto dir = case_dir("directory-inputs");
  fs::create_directories(dir / "d");
  const std::pair<std::string, std::string> cases[] = {
      {"simulate --schedule file:d", "d is a directory, expected a schedule file"},
      {"validate d", "d is a directory, expected a schedule file"},
      {"compare d d", "d is a directory, expected a trace file"},
      {"calibrate d -o p.json", "d is a directory, expected a trace file"},
      {"simulate --profile d", "d is a directory, expected a profile file"},
      // A model's folder is read for its config.json (a Hugging Face snapshot): one without it is named so.
      {"simulate --model d", "d is a folder without a config.json (a Hugging Face model's)"}};
  for (const auto& [args, message] : cases) {
    const CliRun run = run_cli(ppsim, dir, args, 20);
    INFO(args << " -> " << run.err);
    CHECK(run.status != 0);
    CHECK(run.one_error_line("ppsim"));
    CHECK(contains(run.err, message));
  }
}

TEST_CASE("calibrate refuses a predicted trace, naming the file", "[reliability][limits]") {
  const auto dir = case_dir("calibrate-predicted");
  REQUIRE(run_cli(ppsim, dir, "simulate --trace pred.json", 20).status == 0);
  const CliRun run = run_cli(ppsim, dir, "calibrate pred.json -o p.json", 20);
  CHECK(run.status == 2);
  CHECK(run.one_error_line("ppsim"));
  CHECK(contains(run.err, "pred.json: a predicted trace"));
  CHECK_FALSE(fs::exists(dir / "p.json"));
}

TEST_CASE("a flag that contradicts a schedule file is refused, naming both", "[reliability][limits]") {
  const auto dir = case_dir("flag-vs-file");
  REQUIRE(run_cli(ppsim, dir, "schedule 1f1b --stages 4 --micro-batches 8 --format json -o s.json", 20).status == 0);
  for (const std::string& args : {std::string("simulate --schedule file:s.json --micro-batches 4"),
                                  std::string("simulate --schedule file:s.json --stages 2"),
                                  std::string("schedule file:s.json --micro-batches 4")}) {
    const CliRun run = run_cli(ppsim, dir, args, 20);
    INFO(args << " -> " << run.err);
    CHECK(run.status == 2);
    CHECK(run.one_error_line("ppsim"));
    CHECK(contains(run.err, "contradicts the schedule file s.json"));
  }
  // The same values as the file's are no contradiction.
  CHECK(run_cli(ppsim, dir, "simulate --schedule file:s.json --micro-batches 8 --stages 4", 20).status == 0);
}
