// Checkpoints and resume under faults (issue 19 item 2), with real pprun runs: 2 ranks, 1F1B, a
// 2-layer mlp of hidden 8, 2 micro-batches of 2 samples, a checkpoint after every step.
// Scenario and expected, one case each:
// - --resume with no manifest: refused with one line, exit 2; the step-* folder there stays.
// - a step-* folder the manifest does not list survives later checkpoints; the listed old ones go.
// - the newest checkpoint with a truncated rank file, a missing rank file, a rank file altered in
//   place (same size, other bytes: only the CRC-32 tells), or a manifest entry naming a
//   checkpoint that is not there: the run resumes from the previous complete one and says so in
//   one line naming both; the redone step has the loss it had before.
// - a resumed run with the same --metrics keeps the rows before its checkpoint.
// - --steps at the checkpoint's step: refused with the reason.
// - a fresh run into a folder with another run's checkpoints: refused, the folder untouched.
// - output paths that cannot be written (a read-only folder, a missing parent folder, a folder
//   given as the metrics file, a file given as the checkpoint folder): refused in one line
//   before any training, nothing written.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "reliability_support.hpp"

// Built without the executor (no pprun), there is nothing to run.
#ifdef PPRUN_PATH

using namespace reliability;

namespace {

const std::string kRun =
    "--nproc-per-node 2 --schedule 1f1b --model mlp --layers 2 --hidden 8 --vocab 4 --micro-batch-size 2 "
    "--micro-batches 2 --checkpoint-every 1 --quiet --timeout 20";
constexpr int kLimitS = 60;

CliRun pprun(const fs::path& dir, const std::string& args) { return run_cli(PPRUN_PATH, dir, kRun + " " + args, kLimitS); }

struct MetricsRow {
  int step;
  double loss;
};

std::vector<MetricsRow> metrics_rows(const fs::path& file) {
  std::vector<MetricsRow> rows;
  const std::string text = read_text(file);
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const auto j = nlohmann::json::parse(text.substr(start, end - start));
    rows.push_back({j.at("step").get<int>(), j.at("loss").get<double>()});
    start = end + 1;
  }
  return rows;
}

std::vector<int> steps_of(const std::vector<MetricsRow>& rows) {
  std::vector<int> steps;
  for (const auto& r : rows) steps.push_back(r.step);
  return steps;
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// Two steps with checkpoints after each: the manifest lists step-00000001 and step-00000002.
std::vector<MetricsRow> two_checkpointed_steps(const fs::path& dir) {
  const CliRun first = pprun(dir, "--steps 2 --checkpoint-dir ckpt --metrics m.jsonl");
  INFO(first.err);
  REQUIRE(first.status == 0);
  REQUIRE(fs::exists(dir / "ckpt" / "step-00000001"));
  REQUIRE(fs::exists(dir / "ckpt" / "step-00000002"));
  return metrics_rows(dir / "m.jsonl");
}

// Resumes after the newest checkpoint was damaged: steps 1 and 2 from step-00000001.
void check_fallback(const fs::path& dir, const std::vector<MetricsRow>& before) {
  const CliRun resumed = pprun(dir, "--steps 3 --checkpoint-dir ckpt --metrics m.jsonl --resume");
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(std::count(resumed.err.begin(), resumed.err.end(), '\n') == 1);
  CHECK(contains(resumed.err, "pprun: warning: checkpoint step-00000002 in ckpt is damaged"));
  CHECK(contains(resumed.err, "resuming from step-00000001"));
  const auto rows = metrics_rows(dir / "m.jsonl");
  REQUIRE(steps_of(rows) == std::vector<int>{0, 1, 2});
  CHECK(rows[0].loss == before[0].loss);
  CHECK(rows[1].loss == before[1].loss);  // step 1 again, from the same weights and data
}

}  // namespace

TEST_CASE("--resume with no manifest refuses and leaves the folder as it is", "[reliability][resume]") {
  const fs::path dir = case_dir("resume-no-manifest");
  fs::create_directories(dir / "ckpt" / "step-00000003");
  write_text(dir / "ckpt" / "step-00000003" / "rank-00000.pt", "weights of an earlier run");
  const CliRun run = pprun(dir, "--steps 2 --checkpoint-dir ckpt --metrics m.jsonl --resume");
  INFO(run.err);
  CHECK(run.status == 2);
  CHECK(run.one_error_line("pprun"));
  CHECK(contains(run.err, "holds no checkpoint manifest"));
  CHECK(read_text(dir / "ckpt" / "step-00000003" / "rank-00000.pt") == "weights of an earlier run");
  CHECK_FALSE(fs::exists(dir / "m.jsonl"));
}

TEST_CASE("checkpoints the manifest does not list are never removed", "[reliability][resume]") {
  const fs::path dir = case_dir("resume-unlisted");
  two_checkpointed_steps(dir);
  fs::create_directories(dir / "ckpt" / "step-00000099");
  write_text(dir / "ckpt" / "step-00000099" / "notes.txt", "kept by hand");
  const CliRun resumed = pprun(dir, "--steps 4 --checkpoint-dir ckpt --resume");
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(read_text(dir / "ckpt" / "step-00000099" / "notes.txt") == "kept by hand");
  CHECK(names_in(dir / "ckpt") == std::set<std::string>{"manifest.json", "step-00000003", "step-00000004", "step-00000099"});
}

TEST_CASE("a truncated rank file of the newest checkpoint falls back to the previous one", "[reliability][resume]") {
  const fs::path dir = case_dir("resume-truncated");
  const auto before = two_checkpointed_steps(dir);
  const fs::path file = dir / "ckpt" / "step-00000002" / "rank-00001.pt";
  fs::resize_file(file, fs::file_size(file) / 2);
  check_fallback(dir, before);
}

TEST_CASE("a missing rank file of the newest checkpoint falls back to the previous one", "[reliability][resume]") {
  const fs::path dir = case_dir("resume-missing");
  const auto before = two_checkpointed_steps(dir);
  fs::remove(dir / "ckpt" / "step-00000002" / "rank-00000.pt");
  check_fallback(dir, before);
}

TEST_CASE("a rank file of the newest checkpoint altered in place falls back to the previous one", "[reliability][resume]") {
  const fs::path dir = case_dir("resume-altered");
  const auto before = two_checkpointed_steps(dir);
  // The same size, other bytes in the middle: only the checksum tells.
  const fs::path file = dir / "ckpt" / "step-00000002" / "rank-00000.pt";
  std::string bytes = read_text(file);
  for (std::size_t i = bytes.size() / 2; i < bytes.size() / 2 + 16; ++i) bytes[i] = static_cast<char>(~bytes[i]);
  write_text(file, bytes);
  check_fallback(dir, before);
}

TEST_CASE("a manifest entry naming a checkpoint that is not there falls back to the previous one", "[reliability][resume]") {
  const fs::path dir = case_dir("resume-bad-entry");
  const auto before = two_checkpointed_steps(dir);
  // The newest checkpoint's folder is gone and the manifest still names it (as format 1 does
  // at its top level); a step-00000002 folder is kept elsewhere so that nothing else changes.
  fs::rename(dir / "ckpt" / "step-00000002", dir / "step-00000002-aside");
  check_fallback(dir, before);
}

TEST_CASE("a resumed run appends to its metrics file", "[reliability][resume]") {
  const fs::path dir = case_dir("resume-metrics");
  const auto before = two_checkpointed_steps(dir);
  const CliRun resumed = pprun(dir, "--steps 3 --checkpoint-dir ckpt --metrics m.jsonl --resume");
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  const auto rows = metrics_rows(dir / "m.jsonl");
  REQUIRE(steps_of(rows) == std::vector<int>{0, 1, 2});
  CHECK(rows[0].loss == before[0].loss);
  CHECK(rows[1].loss == before[1].loss);
}

TEST_CASE("--steps at the checkpoint's step is refused with the reason", "[reliability][resume]") {
  const fs::path dir = case_dir("resume-nothing-to-do");
  two_checkpointed_steps(dir);
  const std::string manifest = read_text(dir / "ckpt" / "manifest.json");
  for (const char* steps : {"2", "1"}) {
    INFO(steps);
    const CliRun run = pprun(dir, std::string("--steps ") + steps + " --checkpoint-dir ckpt --resume");
    INFO(run.err);
    CHECK(run.status == 2);
    CHECK(run.one_error_line("pprun"));
    CHECK(contains(run.err, std::string("--steps ") + steps + ": the checkpoint in ckpt is at step 2; nothing to do"));
  }
  CHECK(read_text(dir / "ckpt" / "manifest.json") == manifest);
}

TEST_CASE("a fresh run into a folder holding checkpoints is refused", "[reliability][resume]") {
  const fs::path dir = case_dir("resume-fresh-over");
  two_checkpointed_steps(dir);
  const std::string manifest = read_text(dir / "ckpt" / "manifest.json");
  const CliRun run = pprun(dir, "--steps 1 --checkpoint-dir ckpt");
  INFO(run.err);
  CHECK(run.status == 2);
  CHECK(run.one_error_line("pprun"));
  CHECK(contains(run.err, "holds the checkpoints of a run (step 2)"));
  CHECK(read_text(dir / "ckpt" / "manifest.json") == manifest);
  CHECK(names_in(dir / "ckpt") == std::set<std::string>{"manifest.json", "step-00000001", "step-00000002"});
}

TEST_CASE("output paths that cannot be written are refused before the first step", "[reliability][resume]") {
  const fs::path dir = case_dir("resume-output-paths");
  fs::create_directories(dir / "read-only");
  fs::permissions(dir / "read-only", fs::perms::owner_read | fs::perms::owner_exec);
  // Root writes in any folder whatever its permissions; /sys takes no new file even from root.
  const std::string read_only = ::geteuid() == 0 ? "/sys/pprun-m.jsonl" : (dir / "read-only" / "m.jsonl").string();
  fs::create_directories(dir / "a-folder");
  write_text(dir / "a-file", "");
  struct Case {
    std::string args, expected;
  };
  const std::vector<Case> cases = {
      {"--checkpoint-dir ckpt --metrics " + quoted(read_only), "cannot write in folder"},
      {"--checkpoint-dir ckpt --trace missing/t.json", "does not exist"},
      {"--checkpoint-dir missing/ckpt", "does not exist"},
      {"--checkpoint-dir ckpt --metrics a-folder", "is a folder, not a file"},
      {"--checkpoint-dir a-file", "is a file, not a folder"},
  };
  const auto names_before = names_in(dir);
  for (const auto& c : cases) {
    INFO(c.args);
    const CliRun run = pprun(dir, "--steps 2 " + c.args);
    INFO(run.err);
    CHECK(run.status == 2);
    CHECK(run.one_error_line("pprun"));
    CHECK(contains(run.err, c.expected));
    CHECK(names_in(dir) == names_before);
    CHECK(names_in(dir / "a-folder").empty());
  }
  fs::permissions(dir / "read-only", fs::perms::owner_all);
}

#endif  // PPRUN_PATH
