// Issue 34, what pprun reads and where it writes its checkpoints: real runs of a 2-layer mlp of
// hidden 8 on 2 ranks (1F1B, 2 micro-batches of 2 samples). Scenario and expected:
// - --data a FIFO, and --schedule file:FIFO: exit 2 at once, one line naming the FIFO (before:
//   blocked forever);
// - --schedule file:S.json holding 4 micro-batches with --micro-batches 8, or --chunks 2 on a
//   one-stage-per-rank file: exit 2, one line naming the option and the file's value (before: the
//   file's 4 ran), the same rule and words as ppsim's;
// - RANK=0 WORLD_SIZE=1 in the environment with --nproc-per-node 2: exit 2 naming both (before:
//   one worker ran, the option ignored);
// - two runs started together on one --checkpoint-dir: the second exits 2 at once saying another
//   run holds the folder; the first finishes and its checkpoints resume (before: both exit 0, the
//   first's checkpoints replaced by the second's, its resume refused);
// - a manifest whose step is 3567587328 (beyond 32 bits): refused naming 'step' (before:
//   "step--727379968");
// - the newest checkpoint's rank file replaced by a FIFO: the resume passes it over with one
//   warning, writes the new checkpoint in its place and ends well (before: the new checkpoint's
//   write blocked on the FIFO until the run timed out);
// - a worker in env mode whose store never answers: one line, pprun's own (before: c10d's log
//   lines and an 18-frame C++ stack first);
// - a launcher killed with SIGKILL leaves its /tmp/pprun-PID-* folder: the next launch removes it
//   (before: left for good);
// - sizes whose model cannot be held: --hidden 1000000 (tiny-gpt, 4.8e13 parameters), --layers
//   100000, tiny-moe with --experts 60000: exit 2 at once, one line naming the sizes given and the
//   bytes against the machine's memory (before: LibTorch's allocator failure from a worker, exit 1,
//   or, for 100000 layers, minutes building them); --hidden 2000000 and --experts 100000, whose
//   parameter counts could pass 64 bits: refused naming the limit.
#include <catch2/catch.hpp>

#include <set>

#include "hostile_files.hpp"
#include "reliability_support.hpp"

#ifdef PPRUN_PATH  // a build without LibTorch has no pprun

using namespace reliability;

namespace {

const std::string kSmallPipeline =
    "--nproc-per-node 2 --schedule 1f1b --model mlp --layers 2 --hidden 8 --vocab 4 --micro-batch-size 2 "
    "--micro-batches 2 --quiet --timeout 20";

CliRun run_pprun(const fs::path& dir, const std::string& args, int limit_s = 60, const std::string& env = "") {
  return run_cli(PPRUN_PATH, dir, args, limit_s, env);
}

void check_pprun_refused(const CliRun& run, const std::vector<std::string>& parts) {
  check_refused(run, "pprun", parts);
}

}  // namespace

TEST_CASE("pprun refuses a FIFO as --data or as a schedule file at once", "[reliability][pprun-inputs]") {
  const auto dir = case_dir("pprun-fifo");
  make_fifo(dir / "f");
  check_pprun_refused(run_pprun(dir, "--nproc-per-node 1 --model tiny-gpt --data f --quiet", 20),
                      {"option --data: file f: is a FIFO (named pipe), not a regular file"});
  check_pprun_refused(run_pprun(dir, "--nproc-per-node 1 --model mlp --schedule file:f --quiet", 20),
                      {"f is a FIFO (named pipe), expected a schedule file"});
}

TEST_CASE("pprun refuses sizes that contradict its schedule file, as ppsim does", "[reliability][pprun-inputs]") {
  const auto dir = case_dir("pprun-file-sizes");
  REQUIRE(run_cli(PPSIM_PATH, dir, "schedule 1f1b --stages 2 --micro-batches 4 --format json -o s.json", 20).status ==
          0);
  const std::string base =
      "--nproc-per-node 2 --model mlp --layers 2 --hidden 8 --vocab 4 --quiet --schedule file:s.json ";
  const std::string expected =
      "--micro-batches 8 contradicts the schedule file s.json, which has 4 micro-batches (leave --micro-batches out)";
  check_pprun_refused(run_pprun(dir, base + "--micro-batches 8", 30), {expected});
  const CliRun ppsim = run_cli(PPSIM_PATH, dir, "simulate --schedule file:s.json --micro-batches 8", 20);
  CHECK(contains(ppsim.err, expected));
  check_pprun_refused(run_pprun(dir, base + "--chunks 2", 30),
                      {"--chunks 2 contradicts the schedule file s.json, which has 2 stages on 2 ranks"});
  const CliRun agreeing = run_pprun(dir, base + "--micro-batches 4 --steps 1", 60);
  INFO(agreeing.err);
  CHECK(agreeing.status == 0);
}

TEST_CASE("--nproc-per-node that contradicts RANK and WORLD_SIZE is refused", "[reliability][pprun-inputs]") {
  const auto dir = case_dir("pprun-env-contradiction");
  check_pprun_refused(
      run_pprun(dir, "--nproc-per-node 2 --model mlp --quiet --steps 1", 30, "RANK=0 WORLD_SIZE=1"),
      {"--nproc-per-node 2 contradicts the environment, which has WORLD_SIZE=1", "(leave --nproc-per-node out)"});
}

TEST_CASE("a second run on a checkpoint folder in use is refused; the first's checkpoints stay",
          "[reliability][pprun-inputs]") {
  const auto dir = case_dir("pprun-checkpoint-lock");
  // The first run holds the folder from its start; the second starts once the folder exists.
  const std::string first =
      quoted(std::string(PPRUN_PATH)) + " " + kSmallPipeline + " --steps 6 --checkpoint-every 1 --checkpoint-dir ckpt";
  const std::string script = "cd " + quoted(dir.string()) + " || exit 1; { " + first +
                             " > first.out 2> first.err; echo $? > first.status; } & " +
                             "for i in $(seq 200); do [ -d " + quoted((dir / "ckpt").string()) +
                             " ] && break; sleep 0.05; done; " + quoted(std::string(PPRUN_PATH)) + " " +
                             kSmallPipeline + " --steps 2 --checkpoint-dir ckpt > second.out 2> second.err; " +
                             "echo $? > second.status; wait";
  REQUIRE(std::system(("timeout -s KILL 120 bash -c " + quoted(script)).c_str()) == 0);
  INFO(read_text(dir / "first.err"));
  INFO(read_text(dir / "second.err"));
  CHECK(read_text(dir / "second.status") == "2\n");
  CHECK(contains(read_text(dir / "second.err"),
                 "option --checkpoint-dir ckpt: another pprun run is writing its checkpoints there"));
  CHECK(read_text(dir / "first.status") == "0\n");
  CHECK(contains(read_text(dir / "ckpt" / "manifest.json"), "\"step\": 6"));
  const CliRun resumed = run_pprun(dir, kSmallPipeline + " --steps 7 --checkpoint-dir ckpt --resume");
  INFO(resumed.err);
  CHECK(resumed.status == 0);
}

TEST_CASE("a manifest step beyond 32 bits is refused, not wrapped", "[reliability][pprun-inputs]") {
  const auto dir = case_dir("pprun-manifest-step");
  REQUIRE(run_pprun(dir, kSmallPipeline + " --steps 1 --checkpoint-dir ckpt").status == 0);
  std::string manifest = read_text(dir / "ckpt" / "manifest.json");
  for (std::size_t at; (at = manifest.find("\"step\": 1")) != std::string::npos;)
    manifest.replace(at, 9, "\"step\": 3567587328");
  write_text(dir / "ckpt" / "manifest.json", manifest);
  check_pprun_refused(
      run_pprun(dir, kSmallPipeline + " --steps 2 --checkpoint-dir ckpt --resume"),
      {"unreadable checkpoint manifest", "'step' must be an integer from 0 to 2147483647, not 3567587328"});
}

TEST_CASE("a FIFO in place of the newest checkpoint's rank file is passed over and replaced",
          "[reliability][pprun-inputs]") {
  const auto dir = case_dir("pprun-fifo-rank-file");
  REQUIRE(run_pprun(dir, kSmallPipeline + " --steps 2 --checkpoint-every 1 --checkpoint-dir ckpt").status == 0);
  const fs::path file = dir / "ckpt" / "step-00000002" / "rank-00001.pt";
  fs::remove(file);
  make_fifo(file);
  const CliRun resumed =
      run_pprun(dir, kSmallPipeline + " --steps 3 --checkpoint-every 1 --checkpoint-dir ckpt --resume", 60);
  INFO(resumed.err);
  CHECK_FALSE(resumed.timed_out);
  CHECK(resumed.status == 0);
  CHECK(contains(resumed.err, "rank-00001.pt is not a regular file); resuming from step-00000001"));
  CHECK(fs::is_regular_file(file));
}

TEST_CASE("an env-mode worker whose store never answers says so in pprun's one line", "[reliability][pprun-inputs]") {
  const auto dir = case_dir("pprun-env-quiet");
  // Port 1 on loopback: nothing listens there, so the store's connection is refused until it times out.
  const CliRun run = run_pprun(dir, "--model mlp --quiet --steps 1 --timeout 2", 40,
                               "RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1");
  INFO(run.err);
  CHECK_FALSE(run.timed_out);
  CHECK(run.status != 0);
  CHECK(run.one_error_line("pprun"));
  CHECK_FALSE(contains(run.err, "frame #"));
  CHECK_FALSE(contains(run.err, "[c10d]"));
}

TEST_CASE("the rendezvous folder of a launcher killed with SIGKILL goes at the next launch",
          "[reliability][pprun-inputs]") {
  const auto dir = case_dir("pprun-killed-launcher");
  // A launcher that cannot clean up after itself: SIGKILL once its folder exists (its name holds its pid).
  const std::string script =
      "cd " + quoted(dir.string()) + " && { " + quoted(PPRUN_PATH) + " " + kSmallPipeline +
      " --steps 1000 > /dev/null 2>&1 & } ; launcher=$!; " +
      "for i in $(seq 400); do ls -d /tmp/pprun-$launcher-* > /dev/null 2>&1 && break; sleep 0.05; done; " +
      "ls -d /tmp/pprun-$launcher-* > folder; kill -KILL $launcher; wait $launcher; sleep 1; cat folder";
  const CliRun killed = run_cli("bash", dir, "-c " + quoted(script), 60);
  const std::string folder = killed.out.substr(0, killed.out.find('\n'));
  INFO(killed.err);
  REQUIRE(folder.rfind("/tmp/pprun-", 0) == 0);
  // The folder existed (ls found it) and its launcher could not remove it; whether it is still
  // there now is not asserted: a pprun of a test running beside this one may have swept it already.
  const CliRun next = run_pprun(dir, kSmallPipeline + " --steps 1");
  INFO(next.err);
  CHECK(next.status == 0);
  CHECK_FALSE(fs::exists(folder));
}

TEST_CASE("pprun refuses a model this machine cannot hold, before building it", "[reliability][pprun-inputs]") {
  const auto dir = case_dir("pprun-model-too-large");
  const std::string run = "--nproc-per-node 2 --data synthetic --steps 1 --quiet --timeout 20 --metrics m.jsonl ";
  const std::string beyond = "its weights, gradients and AdamW state need ";
  check_pprun_refused(run_pprun(dir, run + "--hidden 1000000", 20),
                      {"--model tiny-gpt with --hidden 1000000: " + beyond, "bytes of memory"});
  check_pprun_refused(run_pprun(dir, run + "--layers 100000", 20),
                      {"--model tiny-gpt with --layers 100000: " + beyond});
  check_pprun_refused(run_pprun(dir, run + "--model tiny-moe --experts 60000", 20),
                      {"--model tiny-moe with --experts 60000: " + beyond});
  check_pprun_refused(run_pprun(dir, run + "--hidden 2000000", 20),
                      {"option --hidden: 2000000 is above the limit 1048576 (2^20)"});
  check_pprun_refused(run_pprun(dir, run + "--model tiny-moe --experts 100000", 20),
                      {"option --experts: 100000 is above the limit 65536 (2^16)"});
  CHECK_FALSE(fs::exists(dir / "m.jsonl"));  // refused before any output
}

#endif  // PPRUN_PATH
