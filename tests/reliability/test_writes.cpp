// Fault cases of the one write path (issue 19 item 1), each run through the real binaries:
// - `ppsim schedule -o PIPE` where PIPE is a FIFO read by `cat`: the FIFO stays a FIFO and the
//   reader gets the schedule (it used to be replaced by a regular file, the reader left waiting);
// - `-o /dev/fd/1 >> log` appends to log, `-o /proc/self/fd/1 | cat` reaches the pipe (both
//   used to fail: the temporary file cannot be made in /proc/self/fd);
// - `-o LINK` to a symlink: the link stays a link, its target gets the schedule (the link itself
//   used to be replaced); a dangling link gets its target created;
// - an 0600 output stays 0600 (it came back 0644), a new one under umask 002 is 0664 (0644);
// - a result on stdout that cannot be written (`> /dev/full`): exit 1 and the one line
//   `ppsim: error: cannot write to standard output: No space left on device` (it exited 0);
//   the same for ppview's and pprun's --version;
// - a directory given as the output: one line "DIR is a directory", the directory untouched;
// - a write cut short (a file size limit, `ulimit -f`, standing in for a full disk): exit 1, one
//   line, the old file byte for byte as it was and nothing beside it, for `ppsim schedule -o`,
//   `ppsim simulate --trace` and `ppview --screenshot` (the screenshot used to be truncated);
// - `pprun --trace/--metrics` to symlinks: links kept, targets written;
// - issue 34: `ppview --screenshot x.jpg` writes a JPEG (it wrote PNG bytes), an unknown image
//   extension is refused; `ppsim schedule -o s.json` writes JSON (it wrote the text grid), a
//   --format that contradicts the name is refused, another extension (s.yaml) needs --format.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "reliability_support.hpp"

using namespace reliability;

namespace {

const std::string kSchedule = "schedule 1f1b --stages 2 --micro-batches 4 --format json";
// Large enough (about 100 KB) that a 4-block file size limit stops it part-way.
const std::string kBigSchedule = "schedule 1f1b --stages 8 --micro-batches 256 --format json";
const std::string kBigSimulate =
    "simulate --schedule 1f1b --stages 8 --micro-batches 256 --f-cost 1 --b-cost 1 --w-cost 1";
// A file size limit of 4 blocks, with SIGXFSZ ignored so that write() fails with EFBIG.
const std::string kSmallFileLimit = "trap '' XFSZ; ulimit -f 4;";

std::string quoted_ppsim() { return quoted(PPSIM_PATH); }

// Runs a whole shell script in `dir` under a hard time limit; the script's own stdout and stderr
// are the run's.
CliRun run_script(const fs::path& dir, const std::string& script, int limit_s = 30) {
  return run_cli("sh", dir, "-c " + quoted(script), limit_s);
}

mode_t mode_of(const fs::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

std::size_t entries(const fs::path& dir) { return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), {})); }

std::string expected_schedule(const fs::path& dir) {
  const CliRun run = run_cli(PPSIM_PATH, dir, kSchedule);
  REQUIRE(run.status == 0);
  REQUIRE(run.out.size() > 100);
  return run.out;
}

}  // namespace

TEST_CASE("an output that is a FIFO is written through, not replaced", "[reliability][writes]") {
  const fs::path dir = case_dir("writes-fifo");
  const std::string expected = expected_schedule(dir);
  // The reader gives up after 5 s: a FIFO replaced by a file would never be opened for writing.
  const CliRun run = run_script(dir, "mkfifo pipe && { timeout 5 cat pipe > got & } && " + quoted_ppsim() + " " + kSchedule +
                                         " -o pipe; status=$?; wait; exit $status");
  REQUIRE(run.status == 0);
  REQUIRE(run.err.empty());
  REQUIRE(fs::is_fifo(dir / "pipe"));
  REQUIRE(read_text(dir / "got") == expected);
}

TEST_CASE("an output named /dev/fd/1 goes to stdout as the shell left it", "[reliability][writes]") {
  const fs::path dir = case_dir("writes-descriptor");
  const std::string expected = expected_schedule(dir);
  write_text(dir / "log", "first\n");
  const CliRun appended = run_script(dir, quoted_ppsim() + " " + kSchedule + " -o /dev/fd/1 >> log");
  REQUIRE(appended.status == 0);
  REQUIRE(read_text(dir / "log") == "first\n" + expected);
  const CliRun piped = run_script(dir, quoted_ppsim() + " " + kSchedule + " -o /proc/self/fd/1 | cat");
  REQUIRE(piped.status == 0);
  REQUIRE(piped.out == expected);
}

TEST_CASE("an output that is a symlink keeps the link and changes its target", "[reliability][writes]") {
  const fs::path dir = case_dir("writes-symlink");
  const std::string expected = expected_schedule(dir);
  fs::create_directories(dir / "real");
  write_text(dir / "real" / "s.json", "old");
  fs::create_symlink("real/s.json", dir / "link.json");
  fs::create_symlink("real/new.json", dir / "dangling.json");

  REQUIRE(run_cli(PPSIM_PATH, dir, kSchedule + " -o link.json").status == 0);
  REQUIRE(fs::is_symlink(dir / "link.json"));
  REQUIRE(read_text(dir / "real" / "s.json") == expected);

  REQUIRE(run_cli(PPSIM_PATH, dir, kSchedule + " -o dangling.json").status == 0);
  REQUIRE(fs::is_symlink(dir / "dangling.json"));
  REQUIRE(read_text(dir / "real" / "new.json") == expected);
  REQUIRE(entries(dir / "real") == 2);
}

TEST_CASE("an output keeps its permissions; a new one follows the umask", "[reliability][writes]") {
  const fs::path dir = case_dir("writes-mode");
  write_text(dir / "private.json", "old");
  fs::permissions(dir / "private.json", fs::perms::owner_read | fs::perms::owner_write);
  REQUIRE(run_cli(PPSIM_PATH, dir, kSchedule + " -o private.json", 30, "umask 022;").status == 0);
  REQUIRE(mode_of(dir / "private.json") == 0600);
  REQUIRE(run_cli(PPSIM_PATH, dir, "simulate --schedule 1f1b --stages 2 --micro-batches 4 --trace new-trace.json", 30, "umask 002;").status == 0);
  REQUIRE(mode_of(dir / "new-trace.json") == 0664);
}

TEST_CASE("a result that cannot be written to stdout is an error", "[reliability][writes]") {
  const fs::path dir = case_dir("writes-stdout");
  const std::string no_space = "cannot write to standard output: No space left on device\n";
  for (const std::string& args : {kSchedule, kBigSchedule, std::string("--version"),
                                  std::string("simulate --schedule 1f1b --stages 2 --micro-batches 4")}) {
    INFO(args);
    const CliRun run = run_script(dir, quoted_ppsim() + " " + args + " > /dev/full");
    REQUIRE(run.status == 1);
    REQUIRE(run.err == "ppsim: error: " + no_space);
  }
#ifdef PPVIEW_PATH
  const CliRun viewer = run_script(dir, quoted(PPVIEW_PATH) + " --version > /dev/full");
  REQUIRE(viewer.status == 1);
  REQUIRE(viewer.err == "ppview: error: " + no_space);
#endif
#ifdef PPRUN_PATH
  const CliRun runner = run_script(dir, quoted(PPRUN_PATH) + " --version > /dev/full");
  REQUIRE(runner.status == 1);
  REQUIRE(runner.err == "pprun: error: " + no_space);
#endif
}

TEST_CASE("a directory given as an output is refused as such", "[reliability][writes]") {
  const fs::path dir = case_dir("writes-directory");
  fs::create_directories(dir / "out");
  for (const std::string& args : {kSchedule + " -o out", std::string("simulate --schedule 1f1b --stages 2 --micro-batches 4 --trace out")}) {
    INFO(args);
    const CliRun run = run_cli(PPSIM_PATH, dir, args);
    REQUIRE(run.status != 0);
    REQUIRE(run.one_error_line("ppsim"));
    REQUIRE(contains(run.err, "out is a directory"));
    REQUIRE(fs::is_empty(dir / "out"));
    REQUIRE(entries(dir) == 1);
  }
}

TEST_CASE("a write cut short leaves the old output as it was", "[reliability][writes]") {
  const fs::path dir = case_dir("writes-cut-short");
  const std::string old = "the previous output, which must survive\n";
  for (const std::string& args : {kBigSchedule + " -o old.json", kBigSimulate + " --trace old.json"}) {
    INFO(args);
    write_text(dir / "old.json", old);
    const CliRun run = run_cli(PPSIM_PATH, dir, args, 30, kSmallFileLimit);
    REQUIRE(run.status == 1);
    REQUIRE(run.one_error_line("ppsim"));
    REQUIRE(contains(run.err, "cannot write old.json: File too large"));
    REQUIRE(read_text(dir / "old.json") == old);
    REQUIRE(entries(dir) == 1);
  }
}

#ifdef PPVIEW_PATH
TEST_CASE("a screenshot cut short leaves the old one as it was", "[reliability][writes]") {
  const fs::path dir = case_dir("writes-screenshot");
  const std::string old = "the previous screenshot";
  write_text(dir / "old.png", old);
  const CliRun run = run_cli(PPVIEW_PATH, dir, "--demo --size 800x600 --screenshot old.png", 30,
                             kSmallFileLimit + " QT_QPA_PLATFORM=offscreen");
  REQUIRE(run.status == 1);
  REQUIRE(run.one_error_line("ppview"));
  REQUIRE(contains(run.err, "cannot write old.png: File too large"));
  REQUIRE(read_text(dir / "old.png") == old);
  REQUIRE(entries(dir) == 1);

  // Without the limit the same command replaces it with a PNG.
  REQUIRE(run_cli(PPVIEW_PATH, dir, "--demo --size 800x600 --screenshot old.png", 30, "QT_QPA_PLATFORM=offscreen").status == 0);
  REQUIRE(read_text(dir / "old.png").substr(1, 3) == "PNG");
}

TEST_CASE("a screenshot's format is its name's, or it is refused", "[reliability][writes]") {
  const fs::path dir = case_dir("writes-screenshot-format");
  REQUIRE(run_cli(PPVIEW_PATH, dir, "--demo --size 800x600 --screenshot shot.jpg", 30, "QT_QPA_PLATFORM=offscreen").status == 0);
  CHECK(read_text(dir / "shot.jpg").substr(0, 3) == "\xFF\xD8\xFF");  // JPEG's start of image
  const CliRun unknown = run_cli(PPVIEW_PATH, dir, "--demo --size 800x600 --screenshot shot.xyz", 30, "QT_QPA_PLATFORM=offscreen");
  INFO(unknown.err);
  CHECK(unknown.status == 2);
  CHECK(unknown.one_error_line("ppview"));
  CHECK(contains(unknown.err, "--screenshot shot.xyz: the file name must end in an image format this ppview writes"));
  CHECK_FALSE(fs::exists(dir / "shot.xyz"));
}
#endif

TEST_CASE("a schedule's output format is its name's; a --format that contradicts it is refused", "[reliability][writes]") {
  const fs::path dir = case_dir("writes-schedule-format");
  REQUIRE(run_cli(PPSIM_PATH, dir, "schedule 1f1b --stages 2 --micro-batches 4 -o s.json").status == 0);
  CHECK(contains(read_text(dir / "s.json"), "\"format\": \"pipescope.schedule/1\""));
  REQUIRE(run_cli(PPSIM_PATH, dir, "schedule 1f1b --stages 2 --micro-batches 4 -o s.csv").status == 0);
  CHECK(read_text(dir / "s.csv").substr(0, 3) == "0F0");
  const CliRun contradicting = run_cli(PPSIM_PATH, dir, "schedule 1f1b --stages 2 --micro-batches 4 --format text -o t.json");
  INFO(contradicting.err);
  CHECK(contradicting.status == 2);
  CHECK(contradicting.one_error_line("ppsim"));
  CHECK(contains(contradicting.err, "--format text contradicts the output name t.json, which has the extension of a JSON schedule"));
  CHECK_FALSE(fs::exists(dir / "t.json"));
  // Another extension needs --format, which then decides.
  const CliRun unknown = run_cli(PPSIM_PATH, dir, "schedule 1f1b --stages 2 --micro-batches 4 -o s.yaml");
  INFO(unknown.err);
  CHECK(unknown.status == 2);
  CHECK(unknown.one_error_line("ppsim"));
  CHECK(contains(unknown.err, "-o s.yaml: a schedule is written as .json, .csv (torch) or .txt; give --format"));
  CHECK_FALSE(fs::exists(dir / "s.yaml"));
  REQUIRE(run_cli(PPSIM_PATH, dir, "schedule 1f1b --stages 2 --micro-batches 4 --format json -o s.schedule").status == 0);
  CHECK(contains(read_text(dir / "s.schedule"), "\"format\": \"pipescope.schedule/1\""));
}

#ifdef PPRUN_PATH
TEST_CASE("pprun's trace and metrics through symlinks keep the links", "[reliability][writes]") {
  const fs::path dir = case_dir("writes-pprun-symlink");
  fs::create_directories(dir / "real");
  write_text(dir / "real" / "metrics.jsonl", "old\n");
  fs::permissions(dir / "real" / "metrics.jsonl", fs::perms::owner_read | fs::perms::owner_write);
  fs::create_symlink("real/metrics.jsonl", dir / "metrics.jsonl");
  fs::create_symlink("real/trace.json", dir / "trace.json");
  const CliRun run = run_cli(PPRUN_PATH, dir,
                             "--nproc-per-node 2 --schedule 1f1b --micro-batches 4 --steps 2 --data synthetic --model tiny-gpt --layers 2 "
                             "--hidden 32 --seq-len 8 --vocab 64 --micro-batch-size 2 --quiet --timeout 20 "
                             "--trace trace.json --metrics metrics.jsonl");
  REQUIRE(run.status == 0);
  REQUIRE(fs::is_symlink(dir / "metrics.jsonl"));
  REQUIRE(fs::is_symlink(dir / "trace.json"));
  REQUIRE(contains(read_text(dir / "real" / "metrics.jsonl"), "\"step\": 1"));
  REQUIRE(mode_of(dir / "real" / "metrics.jsonl") == 0600);
  REQUIRE(contains(read_text(dir / "real" / "trace.json"), "traceEvents"));
}
#endif
