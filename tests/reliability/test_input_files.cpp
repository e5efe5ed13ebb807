// Issue 34, the files every reader takes: FIFOs and devices where a regular file is read,
// nesting deep enough to exhaust a recursive parser, byte order marks, empty folders. Scenario
// and expected, one case each (ppsim and ppview as a user runs them, 10 s at most each):
// - a FIFO given as a schedule, trace, model, profile or torch.profiler rank file, and /dev/zero
//   as a trace: exit 2 at once, one line "F is a FIFO (named pipe), expected a ... file" (before:
//   blocked forever on the open, or read /dev/zero until memory ran out);
// - a trace whose event args hold 200,000 nested arrays or objects: compare and ppview exit 2 with
//   one line naming the event and the limit of 1000 levels (before: SIGSEGV); the same nesting in
//   otherData, a torch.profiler file, a model file (before: accepted), a schedule and a profile
//   (before: SIGSEGV, as their extra fields were copied): refused likewise;
// - a torch CSV and a model file that start with a UTF-8 byte order mark: read as without it
//   (before: "bad action '???0F0'");
// - an empty folder as the measured run: "d is a directory, expected a trace file or the folder
//   of a torch.profiler run: it holds no .json or .json.gz file";
// - `ppsim calibrate --run-spread` below 0, NaN or infinite: exit 2, one line naming the option,
//   no profile written.
#include <catch2/catch.hpp>

#include "hostile_files.hpp"
#include "reliability_support.hpp"

using namespace reliability;

namespace {

// A predicted trace of 2 ranks, from ppsim itself.
void write_prediction(const fs::path& dir) {
  REQUIRE(
      run_cli(PPSIM_PATH, dir, "simulate --schedule 1f1b --stages 2 --micro-batches 2 --trace pred.json", 20).status ==
      0);
}

}  // namespace

TEST_CASE("a FIFO or a device where a file is read is refused at once", "[reliability][inputs]") {
  const auto dir = case_dir("inputs-fifo");
  write_prediction(dir);
  make_fifo(dir / "f");
  struct Case {
    std::string args, expected;
  };
  const std::vector<Case> cases = {
      {"validate f", "f is a FIFO (named pipe), expected a schedule file"},
      {"simulate --schedule file:f", "f is a FIFO (named pipe), expected a schedule file"},
      {"compare f pred.json", "f is a FIFO (named pipe), expected a trace file"},
      {"compare pred.json f", "f is a FIFO (named pipe), expected a trace file"},
      {"calibrate f -o p.json", "f is a FIFO (named pipe), expected a trace file"},
      {"simulate --model f --gpu h100 --stages 2 --micro-batches 2", "f is a FIFO (named pipe), expected a model file"},
      {"simulate --profile f --stages 2 --micro-batches 2", "f is a FIFO (named pipe), expected a profile file"},
      {"compare pred.json /dev/zero", "/dev/zero is a character device, expected a trace file"},
      {"compare --explain f", "f is a FIFO (named pipe), expected a trace file"},
      {"compare --explain pred.json f", "f is a FIFO (named pipe), expected a trace file"},
  };
  for (const auto& c : cases) {
    INFO(c.args);
    const CliRun run = run_cli(PPSIM_PATH, dir, c.args, 10);
    INFO(run.err);
    CHECK_FALSE(run.timed_out);
    CHECK(run.status == 2);
    CHECK(run.one_error_line("ppsim"));
    CHECK(contains(run.err, c.expected));
  }
  CHECK_FALSE(fs::exists(dir / "p.json"));
}

TEST_CASE("a FIFO among a torch.profiler run's files is an error, not a missing rank", "[reliability][inputs]") {
  const auto dir = case_dir("inputs-torch-fifo");
  write_prediction(dir);
  write_torch_run(dir);
  fs::remove(dir / "run" / "rank1.pt.trace.json");
  make_fifo(dir / "run" / "rank1.pt.trace.json");
  const CliRun run = run_cli(PPSIM_PATH, dir, "compare pred.json run", 10);
  INFO(run.err);
  CHECK_FALSE(run.timed_out);
  CHECK(run.status == 2);
  CHECK(run.one_error_line("ppsim"));
  CHECK(contains(run.err, "rank1.pt.trace.json is a FIFO (named pipe), expected a torch.profiler trace file"));
}

TEST_CASE("200,000 nested arrays or objects in a trace are refused, not a crash", "[reliability][inputs]") {
  const auto dir = case_dir("inputs-deep-trace");
  for (const bool objects : {false, true}) {
    const std::string deep = deep_json(200000, objects);
    write_text(dir / "args.json",
               pipescope_trace(2, "measured",
                               {"{\"name\": \"B\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 30, \"dur\": 5, "
                                "\"args\": {\"x\": " +
                                deep + "}}"}));
    std::string other = pipescope_trace(2, "measured");
    other.replace(other.find("\"otherData\": {"), 14, "\"otherData\": {\"deep\": " + deep + ", ");
    write_text(dir / "other.json", other);
    write_text(dir / "pred.json", pipescope_trace(2, "predicted"));
    for (const char* file : {"args.json", "other.json"}) {
      INFO(file << (objects ? " (objects)" : " (arrays)"));
      const CliRun run = run_cli(PPSIM_PATH, dir, std::string("compare pred.json ") + file, 20);
      INFO(run.err);
      CHECK(run.status == 2);
      CHECK(run.one_error_line("ppsim"));
      CHECK(contains(run.err, "nested deeper than 1000 levels"));
      if (std::string(file) == "args.json") CHECK(contains(run.err, "args.json: traceEvents[2] (\"B\")"));
#ifdef PPVIEW_PATH
      const CliRun view = run_cli(PPVIEW_PATH, dir, std::string("pred.json ") + file + " --screenshot s.png", 30,
                                  "QT_QPA_PLATFORM=offscreen");
      INFO(view.err);
      CHECK(view.status == 2);
      CHECK(view.one_error_line("ppview"));
      CHECK(contains(view.err, "nested deeper than 1000 levels"));
      CHECK_FALSE(fs::exists(dir / "s.png"));
#endif
    }
  }
}

TEST_CASE("deep nesting in a torch trace, a schedule, a model file or a profile is refused", "[reliability][inputs]") {
  const auto dir = case_dir("inputs-deep-others");
  write_prediction(dir);
  const std::string deep = deep_json(200000, false);
  write_torch_run(
      dir,
      {"{\"ph\": \"i\", \"name\": \"mark\", \"pid\": 100, \"tid\": 1, \"ts\": 1500, \"args\": {\"x\": " + deep + "}}"});
  REQUIRE(run_cli(PPSIM_PATH, dir, "schedule 1f1b --stages 2 --micro-batches 2 --format json -o s.json", 20).status ==
          0);
  std::string schedule = read_text(dir / "s.json");
  schedule.insert(schedule.find('{') + 1, "\"deep\": " + deep + ",");
  write_text(dir / "s.json", schedule);
  write_text(dir / "m.json",
             "{\"layers\": 4, \"hidden\": 64, \"heads\": 4, \"seq\": 16, \"vocab\": 256, \"x\": " + deep + "}");
  // A profile that reads (the example's), with one more field: kept, so copied and written back.
  std::string profile = read_text(fs::path(PIPESCOPE_SOURCE_DIR) / "traces" / "examples" / "profile.json");
  profile.insert(profile.find('{') + 1, "\"deep\": " + deep + ",");
  write_text(dir / "p.json", profile);
  struct Case {
    std::string args, file;
  };
  const std::vector<Case> cases = {
      {"compare pred.json run", "rank1.pt.trace.json"},
      {"validate s.json", "s.json"},
      {"simulate --model m.json --gpu h100 --stages 2 --micro-batches 2", "m.json"},
      {"simulate --profile p.json --stages 2 --micro-batches 2", "p.json"},
  };
  for (const auto& c : cases) {
    INFO(c.args);
    const CliRun run = run_cli(PPSIM_PATH, dir, c.args, 20);
    INFO(run.err);
    CHECK(run.status == 2);
    CHECK(run.one_error_line("ppsim"));
    CHECK(contains(run.err, c.file));
    CHECK(contains(run.err, "nested deeper than 1000 levels"));
  }
}

TEST_CASE("a torch CSV or a model file that starts with a byte order mark reads as without it",
          "[reliability][inputs]") {
  const auto dir = case_dir("inputs-bom");
  REQUIRE(run_cli(PPSIM_PATH, dir, "schedule 1f1b --stages 2 --micro-batches 2 --format torch-csv -o plain.csv", 20)
              .status == 0);
  write_text(dir / "bom.csv", "\xEF\xBB\xBF" + read_text(dir / "plain.csv"));
  const CliRun plain = run_cli(PPSIM_PATH, dir, "simulate --schedule file:plain.csv --json", 20);
  const CliRun bom = run_cli(PPSIM_PATH, dir, "simulate --schedule file:bom.csv --json", 20);
  INFO(bom.err);
  REQUIRE(plain.status == 0);
  CHECK(bom.status == 0);
  CHECK(bom.err.empty());
  std::string expected = plain.out;
  expected.replace(expected.find("plain.csv"), 9, "bom.csv");
  CHECK(bom.out == expected);

  write_text(dir / "m.json", "\xEF\xBB\xBF{\"layers\": 4, \"hidden\": 64, \"heads\": 4, \"seq\": 16, \"vocab\": 256}");
  const CliRun model =
      run_cli(PPSIM_PATH, dir, "simulate --model m.json --gpu h100 --stages 2 --micro-batches 2 --json", 20);
  INFO(model.err);
  CHECK(model.status == 0);
}

TEST_CASE("an empty folder given as a measured run is named as such", "[reliability][inputs]") {
  const auto dir = case_dir("inputs-empty-folder");
  write_prediction(dir);
  fs::create_directories(dir / "empty");
  for (const char* args : {"compare pred.json empty", "calibrate empty -o p.json"}) {
    INFO(args);
    const CliRun run = run_cli(PPSIM_PATH, dir, args, 10);
    INFO(run.err);
    CHECK(run.status == 2);
    CHECK(run.one_error_line("ppsim"));
    CHECK(contains(run.err,
                   "empty is a directory, expected a trace file or the folder of a torch.profiler run: it holds no "
                   ".json or .json.gz file"));
  }
}

TEST_CASE("calibrate's --run-spread below 0 or not a number is refused before any trace is read",
          "[reliability][inputs]") {
  const auto dir = case_dir("inputs-run-spread");
  for (const char* value : {"-1", "nan", "inf"}) {
    INFO(value);
    const CliRun run = run_cli(PPSIM_PATH, dir, std::string("calibrate m.json -o p.json --run-spread ") + value, 10);
    INFO(run.err);
    CHECK(run.status == 2);
    CHECK(run.one_error_line("ppsim"));
    CHECK(contains(run.err, "--run-spread: must be a finite number >= 0"));
    CHECK_FALSE(fs::exists(dir / "p.json"));
  }
}
