// Issue 34, traces that lie: torch.profiler runs and pipescope traces with values no run makes,
// and names that are terminal escapes. Scenario and expected (ppsim compare, ppview --screenshot):
// - a PP: span with a negative duration: refused naming the file, the event and 'dur' (before:
//   averaged into the comparison);
// - an action torch never writes (PP:0QQ9): a note naming it, the span kept as an operator (before:
//   taken in as stage 0, action QQ, micro-batch 9, without a word);
// - PP: spans of stage 99 in a 2-stage run with every rank's file: refused naming the gap; a
//   forward of micro-batch 99 in a step of micro-batches 0 and 1: refused likewise;
// - a garbage rank1.pt.trace.json.gz in the run's folder: refused naming it (before: skipped, and
//   rank 1 called missing);
// - two files without distributedInfo: refused, saying the rank is unknown (before: "both hold
//   rank 0"); rank files whose last steps differ: every rank read at the first rank's last step,
//   refused when a rank lacks it (before: each rank's own last step, mixed into one iteration);
// - pipescope traces with dur 1e300, ts 1e18, a memory counter of 1e30 bytes, or events 1e15 us
//   apart: refused naming the event, the field and the bound (before: drawn and compared);
// - event names holding ESC sequences, NUL and a right-to-left override: compare prints them
//   escaped (\x1b, \x00, \u202e), never raw.
#include <catch2/catch.hpp>

#include "hostile_files.hpp"
#include "reliability_support.hpp"

using namespace reliability;

namespace {

CliRun compare_with_torch_run(const fs::path& dir) {
  REQUIRE(run_cli(PPSIM_PATH, dir, "simulate --schedule 1f1b --stages 2 --micro-batches 2 --trace pred.json", 20).status == 0);
  return run_cli(PPSIM_PATH, dir, "compare pred.json run", 20);
}

void check_trace_refused(const CliRun& run, const std::vector<std::string>& parts) { check_refused(run, "ppsim", parts); }

}  // namespace

TEST_CASE("a torch.profiler span with a negative duration is refused", "[reliability][traces]") {
  const auto dir = case_dir("traces-torch-negative");
  write_torch_run(dir, {torch_span("PP:1F1", 1300, -25)});
  check_trace_refused(compare_with_torch_run(dir), {"rank1.pt.trace.json: traceEvents[", "(\"PP:1F1\"): field 'dur' is negative (-25)"});
}

TEST_CASE("an action torch never writes is named in a note, not taken in", "[reliability][traces]") {
  const auto dir = case_dir("traces-torch-unknown-action");
  write_torch_run(dir, {torch_span("PP:0QQ9", 1300, 10)});
  const CliRun run = compare_with_torch_run(dir);
  INFO(run.err);
  CHECK(run.status == 0);
  CHECK(contains(run.err, "note: run/rank1.pt.trace.json: 'PP:0QQ9' is not an action torch writes; kept as an operator"));
  CHECK_FALSE(contains(run.out, "QQ"));
}

TEST_CASE("a stage or micro-batch outside the run is refused", "[reliability][traces]") {
  const auto dir = case_dir("traces-torch-outside");
  write_torch_run(dir, {torch_span("PP:99F0", 1300, 10)});
  check_trace_refused(compare_with_torch_run(dir), {"rank1.pt.trace.json: PP: spans of stage 99, but no file has stage 2 to 98"});
  const auto dir2 = case_dir("traces-torch-outside-micro-batch");
  write_torch_run(dir2, {torch_span("PP:1F99", 1300, 10)});
  check_trace_refused(compare_with_torch_run(dir2), {"stage 1 forwards micro-batch 99, but not micro-batch 2 to 98"});
}

TEST_CASE("an unreadable rank file in a run's folder is an error, not an absent rank", "[reliability][traces]") {
  const auto dir = case_dir("traces-torch-garbage");
  write_torch_run(dir);
  fs::remove(dir / "run" / "rank1.pt.trace.json");
  write_text(dir / "run" / "rank1.pt.trace.json.gz", std::string("\x1f\x8b") + "this is not gzip data at all");
  check_trace_refused(compare_with_torch_run(dir), {"rank1.pt.trace.json.gz: not a trace file: its gzip data does not decompress"});
  write_text(dir / "run" / "rank1.pt.trace.json.gz", "plain garbage");
  check_trace_refused(run_cli(PPSIM_PATH, dir, "compare pred.json run", 20), {"rank1.pt.trace.json.gz: not a trace file: it is not JSON"});
}

TEST_CASE("torch.profiler files without distributedInfo are refused as of unknown ranks", "[reliability][traces]") {
  const auto dir = case_dir("traces-torch-no-rank");
  fs::create_directories(dir / "run");
  write_text(dir / "run" / "a.json", torch_rank_file(0, 0, torch_rank_spans(0)));
  write_text(dir / "run" / "b.json", torch_rank_file(1, 0, torch_rank_spans(1)));
  check_trace_refused(compare_with_torch_run(dir), {"a.json has no distributedInfo", "its rank is unknown"});
}

TEST_CASE("ranks whose last profiled steps differ are read at one step, or refused, not mixed", "[reliability][traces]") {
  const auto dir = case_dir("traces-torch-steps");
  // Rank 1 recorded one step more: its last step is 2, rank 0's is 1. Both are read at step 1.
  write_torch_run(dir, {torch_span("ProfilerStep#2", 2000, 1000)});
  const CliRun both_at_one = compare_with_torch_run(dir);
  INFO(both_at_one.err);
  CHECK(both_at_one.status == 0);
  // Rank 0 recorded one step more: rank 1 has no step 2, the last step of rank 0.
  write_text(dir / "run" / "rank0.pt.trace.json",
             torch_rank_file(0, 2, torch_rank_spans(0, {torch_span("ProfilerStep#2", 2000, 1000)})));
  write_text(dir / "run" / "rank1.pt.trace.json", torch_rank_file(1, 2, torch_rank_spans(1)));
  check_trace_refused(run_cli(PPSIM_PATH, dir, "compare pred.json run", 20),
                      {"rank1.pt.trace.json: no ProfilerStep#2, the last step of", "not one profiled window"});
}

TEST_CASE("absurd times and sizes in a pipescope trace are refused", "[reliability][traces]") {
  const auto dir = case_dir("traces-absurd");
  write_text(dir / "pred.json", pipescope_trace(2, "predicted"));
  struct Case {
    std::string event, expected;
  };
  const std::vector<Case> cases = {
      {R"({"name": "B", "ph": "X", "pid": 0, "tid": 0, "ts": 30, "dur": 1e300})",
       "traceEvents[2] (\"B\"): field 'dur' is 1e+300 us, beyond the readers' limit of 1e+12 us"},
      {R"({"name": "B", "ph": "X", "pid": 0, "tid": 0, "ts": 1e18, "dur": 1})",
       "traceEvents[2] (\"B\"): field 'ts' is 1e+18 us, beyond the readers' limit of 1e+17 us"},
      {R"({"name": "memory", "ph": "C", "pid": 0, "ts": 30, "args": {"bytes": 1e30}})",
       "traceEvents[2] (\"memory\"): field 'bytes' is 1e+30 bytes, beyond the readers' limit of 2^60 bytes"},
      {R"({"name": "B", "ph": "X", "pid": 1, "tid": 0, "ts": 1e15, "dur": 1})", "its times span 1e+15 us"},
  };
  for (const auto& c : cases) {
    INFO(c.event);
    write_text(dir / "m.json", pipescope_trace(2, "measured", {c.event}));
    check_trace_refused(run_cli(PPSIM_PATH, dir, "compare pred.json m.json", 20), {"m.json", c.expected});
#ifdef PPVIEW_PATH
    const CliRun view = run_cli(PPVIEW_PATH, dir, "pred.json m.json --screenshot s.png", 30, "QT_QPA_PLATFORM=offscreen");
    INFO(view.err);
    CHECK(view.status == 2);
    CHECK(view.one_error_line("ppview"));
    CHECK(contains(view.err, c.expected));
    CHECK_FALSE(fs::exists(dir / "s.png"));
#endif
  }
}

TEST_CASE("names that are terminal escapes are printed escaped", "[reliability][traces]") {
  const auto dir = case_dir("traces-escapes");
  // ESC [2J (clear the screen), ESC ]0;title BEL (retitle the window), NUL, and U+202E.
  const std::string name = R"(F\u001b[2J\u001b]0;owned\u0007\u0000\u202eevil)";
  const std::string event = R"({"name": ")" + name + R"(", "ph": "X", "pid": 1, "tid": 0, "ts": 30, "dur": 5, "args": {"stage": 1, "micro_batch": 1}})";
  write_text(dir / "pred.json", pipescope_trace(2, "predicted", {event}));
  write_text(dir / "m.json", pipescope_trace(2, "measured", {event}));
  const CliRun run = run_cli(PPSIM_PATH, dir, "compare pred.json m.json", 20);
  INFO(run.err);
  REQUIRE(run.status == 0);
  CHECK(contains(run.out, R"(F\x1b[2J\x1b]0;owned\x07\x00\u202eevil)"));
  CHECK(run.out.find('\x1b') == std::string::npos);
  CHECK(run.out.find('\0') == std::string::npos);
  CHECK(run.out.find("\xE2\x80\xAE") == std::string::npos);
}
