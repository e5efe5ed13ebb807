// `ppsim compare --explain`, run against run, and ranks on different clocks, through the real
// ppsim binary (sim/cli/cmd_compare.cpp):
// - a synthetic 1F1B run of 4 ranks with rank 2 three times slower: the line names rank 2 (its
//   computes 3.0x the other ranks'; ranks 0,1,3 waited on it), the table marks it, --json
//   gives the same as fields;
// - the same run written as torch-style per-host clocks (rank 1 40 ms ahead, rank 3 25 ms
//   behind): a note says the clocks were aligned and rank 2 is still named; --raw-clocks
//   keeps the times as written (no note, "aligned": false);
// - run against run: the equal run as A and the slowed one as B: "run B took ... longer than
//   run A", F and B slower, rank 2 busier; labels say run A / run B, not predicted / measured;
// - end to end (when pprun is built): pprun over loopback, 2 ranks bound to two cores, with
//   eight spinning processes pinned to rank 0's core (rank 0 gets a ninth of it): --explain
//   names rank 0, rank 1 waited on its SEND_F, and against an undisturbed run the summary says
//   what got slower. Its operations (4 layers of 1024 over 256 rows, tens of milliseconds) are
//   longer than the scheduler's slices, so the hogs slow them themselves; shorter ones ran at
//   their usual speed and only started late, and a busy machine's noise on rank 1 could then
//   outweigh them. When rank 1's own computes ran over 1.5x slower than undisturbed, or rank 0's
//   not 1.5x rank 1's, the run shows no slowed rank 0 and gives no verdict (a warning).
#include <catch2/catch.hpp>

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipescope/traces/synthetic.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "ppsim_run.hpp"

using namespace ppsim_test;
using namespace pipescope::traces;

namespace compare_explain_test {

fs::path explain_dir() {
  const fs::path dir = fs::path(PIPESCOPE_BINARY_DIR) / "tests" / "explain-work";
  fs::create_directories(dir);
  return dir;
}

// A measured 1F1B run of 4 ranks and 8 micro-batches, `slow_rank` `factor` times slower.
std::string write_pipeline(const std::string& name, int slow_rank, double factor, std::vector<double> skew_us = {}) {
  SyntheticPipeline p;
  p.num_ranks = 4;
  p.num_micro_batches = 8;
  p.forward_us = 1000;
  p.backward_us = 2000;
  p.transfer_us = 50;
  p.slow_rank = slow_rank;
  p.slow_factor = factor;
  p.jitter = 1e-9;
  p.source = "measured";
  Trace t = make_1f1b_trace(p);
  t.flows.clear();  // a profiler's trace has no flows; the pairs come from the events
  for (auto& e : t.events)
    if (static_cast<std::size_t>(e.rank) < skew_us.size()) e.ts_us += skew_us[static_cast<std::size_t>(e.rank)];
  for (auto& m : t.memory)
    if (static_cast<std::size_t>(m.rank) < skew_us.size()) m.ts_us += skew_us[static_cast<std::size_t>(m.rank)];
  const fs::path path = explain_dir() / name;
  write_trace(t, path.string());
  return path.string();
}

bool output_has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace compare_explain_test
using namespace compare_explain_test;

TEST_CASE("compare --explain names the slow rank", "[compare_explain]") {
  const std::string slowed = write_pipeline("slowed.json", 2, 3);
  const PpsimRun run = run_ppsim("compare --explain " + quoted(slowed));
  INFO(run.out << run.err);
  REQUIRE(run.status == 0);
  CHECK(run.out.rfind("step 0: rank 2 held the step back by ", 0) == 0);
  CHECK(output_has(run.out, "computes were 3.0x the other ranks'; ranks 0,1,3 waited on its "));
  CHECK(output_has(run.out, "\n2 *"));
  CHECK(run.err.empty());

  const PpsimRun json = run_ppsim("compare --explain --json " + quoted(slowed));
  REQUIRE(json.status == 0);
  const auto j = nlohmann::json::parse(json.out);
  CHECK(j["culprit"]["rank"] == 2);
  CHECK(j["culprit"]["waiters"] == nlohmann::json::array({0, 1, 3}));
  CHECK(j["ranks"][3]["waited_most_on"] == 2);
  CHECK(j["clocks"]["aligned"] == false);
}

TEST_CASE("compare --explain aligns ranks on different clocks first", "[compare_explain]") {
  const std::string skewed = write_pipeline("skewed.json", 2, 3, {0, 40000, 0, -25000});
  const PpsimRun run = run_ppsim("compare --explain --json " + quoted(skewed));
  INFO(run.out << run.err);
  REQUIRE(run.status == 0);
  CHECK(output_has(run.err, "clocks: ranks' offsets "));
  const auto j = nlohmann::json::parse(run.out);
  CHECK(j["clocks"]["aligned"] == true);
  CHECK(j["culprit"]["rank"] == 2);
  const double rank1 = j["clocks"]["offset_us"][1].get<double>() - j["clocks"]["offset_us"][0].get<double>();
  const double rank3 = j["clocks"]["offset_us"][3].get<double>() - j["clocks"]["offset_us"][0].get<double>();
  CHECK(rank1 == Approx(-40000).margin(200));
  CHECK(rank3 == Approx(25000).margin(200));

  const PpsimRun raw = run_ppsim("compare --explain --json --raw-clocks " + quoted(skewed));
  REQUIRE(raw.status == 0);
  CHECK(raw.err.empty());
  CHECK(nlohmann::json::parse(raw.out)["clocks"]["aligned"] == false);
}

TEST_CASE("compare of two measured runs says what got slower", "[compare_explain]") {
  const std::string a = write_pipeline("run-a.json", -1, 1);
  const std::string b = write_pipeline("run-b.json", 2, 3);
  const PpsimRun run = run_ppsim("compare " + quoted(a) + " " + quoted(b));
  INFO(run.out << run.err);
  REQUIRE(run.status == 0);
  CHECK(run.out.rfind("run B took ", 0) == 0);
  CHECK(output_has(run.out, " longer than run A (+"));
  CHECK(output_has(run.out, "slower: B +"));
  CHECK(output_has(run.out, "busier: rank 2 +"));
  CHECK(output_has(run.out, "operations that got slower most:"));
  CHECK(output_has(run.out, "run A"));
  CHECK_FALSE(output_has(run.out, "predicted"));

  const PpsimRun json = run_ppsim("compare --json " + quoted(a) + " " + quoted(b));
  REQUIRE(json.status == 0);
  const auto j = nlohmann::json::parse(json.out);
  CHECK(j["run_difference"]["by_rank"][0]["what"] == "rank 2");
  CHECK(j["run_difference"]["b_step_us"].get<double>() > j["run_difference"]["a_step_us"].get<double>());
}

TEST_CASE("compare --explain refuses three traces", "[compare_explain]") {
  const std::string a = write_pipeline("three.json", -1, 1);
  const PpsimRun run = run_ppsim("compare --explain " + quoted(a) + " " + quoted(a) + " " + quoted(a));
  CHECK(run.status == 2);
  CHECK(run.one_error_line());
}

#ifdef PPRUN_PATH
namespace compare_explain_test {

// Processes that spin on one core until destroyed: a rank bound to that core gets 1/(n+1) of it.
class CoreHogs {
 public:
  CoreHogs(int core, int count) {
    for (int i = 0; i < count; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(core, &set);
        ::sched_setaffinity(0, sizeof set, &set);
        volatile unsigned long spins = 0;
        for (;;) spins = spins + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~CoreHogs() {
    for (const pid_t pid : pids_) ::kill(pid, SIGKILL);
    for (const pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
  }
  CoreHogs(const CoreHogs&) = delete;
  CoreHogs& operator=(const CoreHogs&) = delete;

 private:
  std::vector<pid_t> pids_;
};

std::vector<int> own_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cores;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

// The mean duration of `rank`'s forwards and backwards in a trace file.
double compute_mean_us(const fs::path& trace_path, int rank) {
  const Trace t = read_trace(trace_path.string());
  double total = 0;
  int count = 0;
  for (const auto& e : t.events)
    if (e.rank == rank && (e.kind == EventKind::Forward || e.kind == EventKind::Backward)) {
      total += e.dur_us;
      ++count;
    }
  return count ? total / count : 0;
}

// Runs pprun on two cores (rank 0 bound to the first, rank 1 to the second), its trace at `trace`.
int run_pprun_on(const std::vector<int>& two_cores, const fs::path& trace) {
  cpu_set_t before, only;
  CPU_ZERO(&before);
  ::sched_getaffinity(0, sizeof before, &before);
  CPU_ZERO(&only);
  for (const int c : two_cores) CPU_SET(c, &only);
  ::sched_setaffinity(0, sizeof only, &only);  // pprun's launcher shares out the cores it may use
  const std::string command =
      quoted(PPRUN_PATH) +
      " --nproc-per-node 2 --bind-cores --threads-per-rank 1 --schedule 1f1b --micro-batches 4"
      " --steps 3 --model mlp --layers 4 --hidden 1024 --micro-batch-size 256 --quiet --timeout 120"
      " --trace " +
      quoted(trace.string()) + " 2>" + quoted(trace.string() + ".err");
  const int raw = std::system(command.c_str());
  ::sched_setaffinity(0, sizeof before, &before);
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
}

}  // namespace compare_explain_test
using namespace compare_explain_test;

TEST_CASE("compare --explain names a pprun rank slowed by a CPU hog", "[compare_explain][pprun]") {
  const std::vector<int> cores = own_cores();
  if (cores.size() < 2) {
    WARN("one core only: the slowed-rank run needs two");
    return;
  }
  const std::vector<int> two{cores[0], cores[1]};
  const fs::path baseline = explain_dir() / "pprun-baseline.json", slowed = explain_dir() / "pprun-slowed.json";
  REQUIRE(run_pprun_on(two, baseline) == 0);
  {
    const CoreHogs hogs(two[0], 8);
    REQUIRE(run_pprun_on(two, slowed) == 0);
  }
  // The verdict needs rank 1's core quiet: on a machine busy with other work, rank 1 is slowed
  // too (and rightly named); then the run says nothing about this test's hog.
  const double rank1_before = compute_mean_us(baseline, 1), rank1_after = compute_mean_us(slowed, 1);
  if (rank1_after > 1.5 * rank1_before) {
    WARN("rank 1's computes took " << rank1_after / rank1_before
                                   << "x their undisturbed time: its core was busy, no verdict");
    return;
  }
  // Nor when the hog did not reach rank 0 (the scheduler may still run a starved rank's
  // computes at speed and only start them late): the trace must show the slowdown it is asked
  // to explain.
  const double rank0_after = compute_mean_us(slowed, 0);
  if (rank0_after < 1.5 * rank1_after) {
    WARN("rank 0's computes took " << rank0_after / rank1_after
                                   << "x rank 1's under the hog: the run shows no slowed rank 0, no verdict");
    return;
  }
  const PpsimRun run = run_ppsim("compare --explain " + quoted(slowed.string()));
  INFO(run.out << run.err << read_text(slowed.string() + ".err"));
  REQUIRE(run.status == 0);
  CHECK(output_has(run.out.substr(0, run.out.find('\n')), ": rank 0 held the step back by "));
  CHECK(output_has(run.out, "rank 1 waited on its SEND_F"));

  const PpsimRun against = run_ppsim("compare " + quoted(baseline.string()) + " " + quoted(slowed.string()));
  INFO(against.out << against.err);
  REQUIRE(against.status == 0);
  CHECK(against.out.rfind("run B took ", 0) == 0);
  CHECK(output_has(against.out, " longer than run A (+"));
  CHECK(output_has(against.out, "; slower: "));
}
#endif
