// DeepSpeed's schedules, instruction for instruction (TrainSchedule, InferenceSchedule,
// DataParallelSchedule), as each release range wrote them (tests/golden/deepspeed/README.md:
// TrainSchedule changed in 0.8.3; InferenceSchedule never did).
// - Hand-checked listings: train p=2 m=3 as 0.5 wrote it (8 = 2(m+p-1) steps; stage 0 uses
//   3 buffers, stage 1 uses 2, so micro-batch 2 lands in buffer 0 on stage 1) and as 0.8.3
//   does (receive before send on the backward side, send before receive on the forward
//   side, 2 buffers on both stages); inference p=3 m=2 (4 steps, two buffers alternating
//   between receive and send), data-parallel m=3.
// - Golden listings in tests/golden/deepspeed/<release>/, written by each release's own
//   schedule.py (0.5.0, 0.5.10, 0.8.2, 0.8.3, 0.19.8), every case p = 1..8, m = 1..12:
//   `deepspeed-train@<release>` and `deepspeed-inference@<release>` produce exactly those
//   lines and the release's num_pipe_buffers, and the plain names the newest release's.
// - Versioned names: any release 0.5.0 .. 0.19.8 maps to the newest behaviour first released
//   at or before it; older, newer and malformed versions are refused with one line.
// - Invariants over p = 1..8, m = 1..12, both releases: step counts 2(m+p-1) and m+p-1;
//   train buffers are micro_batch % num_pipe_buffers, inference buffers < 2; every
//   micro-batch forwarded (and backwarded) once per stage; every send has its receive on
//   the neighbour in the same step; the reductions and the optimizer step close the last
//   step; the validator accepts them with blocking sends.
// - Under blocking sends the order inside a step matters: a stage in 0.5's order next to one
//   in 0.8.3's deadlocks (both send first), which the validator reports.
// - The order and the buffer count changed together: 0.5's order with 0.8.3's fewer buffers
//   receives into a buffer whose gradient is still to be sent (the validator says so).
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "test_generators_support.hpp"

#include "pipescope/core/registry.hpp"
#include "pipescope/core/validator.hpp"

using namespace pipescope;
using namespace test_support;

namespace {

using DeepSpeedTexts = std::vector<std::string>;

// "0RECV_B1#1": torch's text form plus the buffer id.
DeepSpeedTexts buffered_text(const Program& program) {
  DeepSpeedTexts steps;
  for (const Step& step : program) {
    std::string text;
    for (const Instruction& instr : step) {
      text += (text.empty() ? "" : " ") + to_string(instr);
      if (instr.buffer != kNone) text += "#" + std::to_string(instr.buffer);
    }
    steps.push_back(text.empty() ? "." : text);
  }
  return steps;
}

// The golden files' form: "s<stage> t<step>: Op(buffer) ...".
std::vector<std::string> deepspeed_lines(const Schedule& s) {
  std::vector<std::string> lines;
  for (int r = 0; r < s.num_ranks; ++r)
    for (int t = 0; t < static_cast<int>(s.programs[r].size()); ++t) {
      std::string line = "s" + std::to_string(r) + " t" + std::to_string(t) + ":";
      for (const Instruction& instr : s.programs[r][t]) {
        line += " " + std::string(op_name(instr.op));
        if (instr.buffer != kNone) line += "(" + std::to_string(instr.buffer) + ")";
      }
      lines.push_back(line);
    }
  return lines;
}

const DeepSpeedRelease kReleases[] = {DeepSpeedRelease::v0_5, DeepSpeedRelease::v0_8_3};

const char* release_name(DeepSpeedRelease release) { return release == DeepSpeedRelease::v0_5 ? "0.5" : "0.8.3"; }

// The behaviour a train schedule was built with, from the name it resolved to.
DeepSpeedRelease release_of(const Schedule& s) {
  return s.name == "deepspeed-train@0.5" ? DeepSpeedRelease::v0_5 : DeepSpeedRelease::v0_8_3;
}

Schedule train(DeepSpeedRelease release, int p, int m) {
  return deepspeed_train_schedule(params(p, m), release, std::string("deepspeed-train@") + release_name(release));
}

// One case of a golden listing: its num_pipe_buffers per stage and its step lines.
struct GoldenCase {
  std::vector<int> buffers;
  std::vector<std::string> lines;
};

// "## p=P m=M buffers=B0,B1,..." opens a case; other '#' lines are comments.
std::map<std::pair<int, int>, GoldenCase> read_golden(const std::filesystem::path& file) {
  const std::regex header(R"(## p=(\d+) m=(\d+) buffers=([\d,]+))");
  std::map<std::pair<int, int>, GoldenCase> cases;
  GoldenCase* current = nullptr;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    std::smatch match;
    if (std::regex_match(line, match, header)) {
      current = &cases[{std::stoi(match[1]), std::stoi(match[2])}];
      std::istringstream buffers(match[3]);
      for (std::string b; std::getline(buffers, b, ',');) current->buffers.push_back(std::stoi(b));
    } else if (!line.empty() && line[0] != '#') {
      REQUIRE(current != nullptr);
      current->lines.push_back(line);
    }
  }
  return cases;
}

std::string refusal_of(const std::string& name) {
  try {
    make_schedule(name, params(2, 4));
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("deepspeed-train@0.5 p=2 m=3, hand-checked", "[deepspeed]") {
  const Schedule s = make_schedule("deepspeed-train@0.5", params(2, 3));
  CHECK(s.name == "deepspeed-train@0.5");
  CHECK(buffered_text(s.programs[0]) == DeepSpeedTexts{
                                           "0LOAD0#0 0F0#0",
                                           "0SEND_F0#0",
                                           "0LOAD1#1 0F1#1",
                                           "0SEND_F1#1 0RECV_B0#0 0B0#0",
                                           "0LOAD2#2 0F2#2",
                                           "0SEND_F2#2 0RECV_B1#1 0B1#1",
                                           ".",
                                           "0RECV_B2#2 0B2#2 0REDUCE_TIED 0REDUCE_GRAD 0OPTIMIZER",
                                       });
  CHECK(buffered_text(s.programs[1]) == DeepSpeedTexts{
                                           ".",
                                           "1RECV_F0#0 1LOAD0#0 1F0#0",
                                           "1B0#0",
                                           "1RECV_F1#1 1SEND_B0#0 1LOAD1#1 1F1#1",
                                           "1B1#1",
                                           "1RECV_F2#0 1SEND_B1#1 1LOAD2#0 1F2#0",
                                           "1B2#0",
                                           "1SEND_B2#0 1REDUCE_TIED 1REDUCE_GRAD 1OPTIMIZER",
                                       });
}

TEST_CASE("deepspeed-train@0.8.3 p=2 m=3, hand-checked: the transfers swapped, one buffer fewer", "[deepspeed]") {
  const Schedule s = make_schedule("deepspeed-train@0.8.3", params(2, 3));
  CHECK(s.name == "deepspeed-train@0.8.3");
  CHECK(buffered_text(s.programs[0]) == DeepSpeedTexts{
                                           "0LOAD0#0 0F0#0",
                                           "0SEND_F0#0",
                                           "0LOAD1#1 0F1#1",
                                           "0RECV_B0#0 0SEND_F1#1 0B0#0",
                                           "0LOAD2#0 0F2#0",
                                           "0RECV_B1#1 0SEND_F2#0 0B1#1",
                                           ".",
                                           "0RECV_B2#0 0B2#0 0REDUCE_TIED 0REDUCE_GRAD 0OPTIMIZER",
                                       });
  CHECK(buffered_text(s.programs[1]) == DeepSpeedTexts{
                                           ".",
                                           "1RECV_F0#0 1LOAD0#0 1F0#0",
                                           "1B0#0",
                                           "1SEND_B0#0 1RECV_F1#1 1LOAD1#1 1F1#1",
                                           "1B1#1",
                                           "1SEND_B1#1 1RECV_F2#0 1LOAD2#0 1F2#0",
                                           "1B2#0",
                                           "1SEND_B2#0 1REDUCE_TIED 1REDUCE_GRAD 1OPTIMIZER",
                                       });
  // The plain name is the current release's behaviour.
  CHECK(buffered_text(make_schedule("deepspeed-train", params(2, 3)).programs[0]) == buffered_text(s.programs[0]));
}

TEST_CASE("deepspeed-inference p=3 m=2, hand-checked", "[deepspeed]") {
  const Schedule s = deepspeed_inference_schedule(params(3, 2));
  CHECK(buffered_text(s.programs[0]) == DeepSpeedTexts{"0LOAD0#0 0F0#0", "0LOAD1#1 0SEND_F0#0 0F1#1", "0SEND_F1#1", "."});
  CHECK(buffered_text(s.programs[1]) == DeepSpeedTexts{".", "1RECV_F0#0 1F0#0", "1RECV_F1#1 1SEND_F0#0 1F1#1", "1SEND_F1#1"});
  CHECK(buffered_text(s.programs[2]) == DeepSpeedTexts{".", ".", "2LOAD0#0 2RECV_F0#0 2F0#0", "2LOAD1#1 2RECV_F1#1 2F1#1"});
}

TEST_CASE("data-parallel m=3 accumulates gradients on one stage", "[deepspeed]") {
  const Schedule s = data_parallel_schedule(params(1, 3));
  CHECK(buffered_text(s.programs[0]) ==
        DeepSpeedTexts{"0LOAD0#0 0F0#0 0B0#0", "0LOAD1#0 0F1#0 0B1#0", "0LOAD2#0 0F2#0 0B2#0 0REDUCE_GRAD 0OPTIMIZER"});
  CHECK_NOTHROW(validate(s));
  CHECK_THAT(refusal([] { data_parallel_schedule(params(2, 3)); }),
             Catch::StartsWith("data-parallel: ") && Catch::Contains("--stages must be 1; got --stages 2"));
}

TEST_CASE("deepspeed schedules match each release's own golden listings", "[deepspeed]") {
  const std::filesystem::path dir = std::filesystem::path(PIPESCOPE_SOURCE_DIR) / "tests/golden/deepspeed";
  const std::string newest = "0.19.8";
  std::set<std::string> releases;
  int cases = 0;
  for (const auto& folder : std::filesystem::directory_iterator(dir)) {
    if (!folder.is_directory()) continue;
    const std::string release = folder.path().filename().string();
    releases.insert(release);
    for (const std::string kind : {"deepspeed-train", "deepspeed-inference"}) {
      const auto golden = read_golden(folder.path() / (kind + ".txt"));
      CHECK(golden.size() == 96u);
      // The versioned name resolves to the release's behaviour; the plain name is the newest's.
      std::vector<std::string> names{kind + "@" + release};
      if (release == newest) names.push_back(kind);
      for (const auto& [size, expected] : golden)
        for (const std::string& name : names) {
          const auto [p, m] = size;
          INFO(name << " p=" << p << " m=" << m << " (" << folder.path().string() << ")");
          const Schedule s = make_schedule(name, params(p, m));
          std::vector<int> buffers;
          for (int stage = 0; stage < p; ++stage)
            buffers.push_back(kind == "deepspeed-inference" ? 2 : deepspeed_train_buffers(release_of(s), p, stage, m));
          CHECK(buffers == expected.buffers);
          const std::vector<std::string> ours = deepspeed_lines(s);
          REQUIRE(ours.size() == expected.lines.size());
          for (std::size_t i = 0; i < ours.size(); ++i) CHECK(ours[i] == expected.lines[i]);
          ++cases;
        }
    }
  }
  CHECK(releases == std::set<std::string>{"0.5.0", "0.5.10", "0.8.2", "0.8.3", newest});
  CHECK(cases == (5 + 1) * 2 * 96);
}

TEST_CASE("a versioned name maps a release to the behaviour it ran; others are refused", "[deepspeed]") {
  const auto resolved = [](const std::string& name) {
    const GeneratorInfo* info = ScheduleRegistry::instance().find(name);
    return info ? info->name : std::string("(none)");
  };
  for (const std::string v : {"0.5", "0.5.0", "0.5.10", "0.7", "0.8", "0.8.2"}) {
    CHECK(resolved("deepspeed-train@" + v) == "deepspeed-train@0.5");
    CHECK(resolved("deepspeed-inference@" + v) == "deepspeed-inference@0.5");
  }
  for (const std::string v : {"0.8.3", "0.9", "0.14.2", "0.19", "0.19.8"}) {
    CHECK(resolved("deepspeed-train@" + v) == "deepspeed-train@0.8.3");
    CHECK(resolved("deepspeed-inference@" + v) == "deepspeed-inference@0.5");
  }
  CHECK(make_schedule("deepspeed-train@0.14.2", params(2, 4)).name == "deepspeed-train@0.8.3");
  CHECK(make_schedule("deepspeed-inference@0.19", params(2, 4)).name == "deepspeed-inference@0.5");

  CHECK(refusal_of("deepspeed-train@0.4.5") ==
        "deepspeed-train@0.4.5: release 0.4.5 is older than the oldest one reproduced, deepspeed-train@0.5");
  CHECK(refusal_of("deepspeed-inference@0.3") ==
        "deepspeed-inference@0.3: release 0.3 is older than the oldest one reproduced, deepspeed-inference@0.5");
  CHECK(refusal_of("deepspeed-train@0.19.9") ==
        "deepspeed-train@0.19.9: release 0.19.9 is newer than the newest one checked, 0.19.8 (plain "
        "'deepspeed-train' means that one)");
  CHECK(refusal_of("deepspeed-train@1") ==
        "deepspeed-train@1: release 1 is newer than the newest one checked, 0.19.8 (plain 'deepspeed-train' means "
        "that one)");
  for (const std::string bad : {"", "latest", "0.14.2.1", "0.", ".5", "-1", "0.-1", "0.14x", "+0.5", "0..5"}) {
    INFO("'" << bad << "'");
    CHECK(ScheduleRegistry::instance().find("deepspeed-train@" + bad) == nullptr);
    CHECK(refusal_of("deepspeed-train@" + bad) ==
          "deepspeed-train@" + bad + ": '" + bad + "' is not a release version (write it as 0.14 or 0.14.2)");
  }
  // Only the DeepSpeed names have releases.
  CHECK_THAT(refusal_of("gpipe@1.0"), Catch::StartsWith("unknown schedule 'gpipe@1.0' (known: gpipe, 1f1b, "));
  CHECK(refusal_of("deepspeed-train@0.8.3") == "(accepted)");
}

TEST_CASE("deepspeed-train invariants over p = 1..8, m = 1..12", "[deepspeed]") {
  for (const DeepSpeedRelease release : kReleases)
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 12; ++m) {
        INFO(release_name(release) << " p=" << p << " m=" << m);
        const Schedule s = train(release, p, m);
        std::map<std::tuple<int, int, Op>, int> computes;
        std::map<std::tuple<int, int, int, int>, int> sends;  // (kind, from stage, micro-batch, step)
        for (int r = 0; r < p; ++r) {
          const int num_buffers = deepspeed_train_buffers(release, p, r, m);
          CHECK(num_buffers == std::max(2, std::min(p - r + (release == DeepSpeedRelease::v0_5 ? 1 : 0), m)));
          REQUIRE(s.programs[r].size() == static_cast<std::size_t>(2 * (m + p - 1)));
          for (int t = 0; t < static_cast<int>(s.programs[r].size()); ++t)
            for (const Instruction& instr : s.programs[r][t]) {
              CHECK(instr.stage == r);
              if (!needs_micro_batch(instr.op)) continue;
              CHECK(instr.buffer == instr.micro_batch % num_buffers);
              if (is_compute(instr.op)) ++computes[{r, instr.micro_batch, instr.op}];
              if (is_send(instr.op))
                ++sends[{instr.op == Op::SendActivation ? 0 : 1, instr.stage, instr.micro_batch, t}];
            }
          const Step& last = s.programs[r].back();
          REQUIRE(last.size() >= 3);
          CHECK(last[last.size() - 3].op == Op::ReduceTiedGrads);
          CHECK(last[last.size() - 2].op == Op::ReduceGrads);
          CHECK(last[last.size() - 1].op == Op::OptimizerStep);
        }
        for (int r = 0; r < p; ++r)
          for (int i = 0; i < m; ++i) {
            CHECK(computes[{r, i, Op::ForwardPass}] == 1);
            CHECK(computes[{r, i, Op::BackwardPass}] == 1);
          }
        // Lock-step: each receive meets its send in the same step on the neighbour.
        int received = 0;
        for (int r = 0; r < p; ++r)
          for (int t = 0; t < static_cast<int>(s.programs[r].size()); ++t)
            for (const Instruction& instr : s.programs[r][t]) {
              if (!is_recv(instr.op)) continue;
              const bool activation = instr.op == Op::RecvActivation;
              CHECK(sends.count({activation ? 0 : 1, activation ? r - 1 : r + 1, instr.micro_batch, t}) == 1);
              ++received;
            }
        CHECK(received == 2 * m * (p - 1));
        CHECK(static_cast<int>(sends.size()) == received);
        ValidationOptions blocking;
        blocking.blocking_sends = true;
        CHECK_NOTHROW(validate(s, blocking));
      }
}

TEST_CASE("deepspeed-inference invariants over p = 1..8, m = 1..12", "[deepspeed]") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 12; ++m) {
      INFO("p=" << p << " m=" << m);
      const Schedule s = make_schedule("deepspeed-inference", params(p, m));
      CHECK(!s.is_training());
      std::map<std::tuple<int, int, int>, int> sends;  // (from stage, micro-batch, step)
      std::map<std::pair<int, int>, int> forwards;
      for (int r = 0; r < p; ++r) {
        REQUIRE(s.programs[r].size() == static_cast<std::size_t>(m + p - 1));
        for (int t = 0; t < static_cast<int>(s.programs[r].size()); ++t)
          for (const Instruction& instr : s.programs[r][t]) {
            CHECK(instr.buffer >= 0);
            CHECK(instr.buffer < 2);
            CHECK(!is_backward(instr.op));
            if (instr.op == Op::ForwardPass) ++forwards[{r, instr.micro_batch}];
            if (is_send(instr.op)) ++sends[{r, instr.micro_batch, t}];
          }
      }
      for (int r = 0; r < p; ++r)
        for (int i = 0; i < m; ++i) CHECK(forwards[{r, i}] == 1);
      int received = 0;
      for (int r = 0; r < p; ++r)
        for (int t = 0; t < static_cast<int>(s.programs[r].size()); ++t)
          for (const Instruction& instr : s.programs[r][t])
            if (is_recv(instr.op)) {
              CHECK(sends.count({r - 1, instr.micro_batch, t}) == 1);
              ++received;
            }
      CHECK(received == m * (p - 1));
      ValidationOptions blocking;
      blocking.blocking_sends = true;
      CHECK_NOTHROW(validate(s, blocking));
    }
}

// A step's receive and send towards one neighbour: 0.5 receives first on the forward side
// and sends first on the backward side, 0.8.3 the other way round; each is consistent, so
// its transfers meet under blocking sends. A stage in one order next to a stage in the other
// sends first on both sides (or receives first on both): with blocking sends each waits for
// the other, which the validator reports as a deadlock.
TEST_CASE("blocking sends: each release's order meets, the two mixed deadlock", "[deepspeed]") {
  ValidationOptions blocking;
  blocking.blocking_sends = true;
  for (const DeepSpeedRelease release : kReleases) CHECK_FALSE(find_problem(train(release, 2, 3), blocking));
  // Stage 0 as 0.5 writes it (SendActivation, RecvGrad), stage 1 as 0.8.3 (SendGrad,
  // RecvActivation): both send first in steps 3 and 5.
  Schedule mixed = train(DeepSpeedRelease::v0_5, 2, 3);
  mixed.programs[1] = train(DeepSpeedRelease::v0_8_3, 2, 3).programs[1];  // 2 buffers in both
  CHECK_FALSE(find_problem(mixed));  // asynchronous sends never wait
  const auto problem = find_problem(mixed, blocking);
  REQUIRE(problem);
  CHECK_THAT(problem->message, Catch::Contains("deadlock") && Catch::Contains("waits (blocking send)"));
}

// 0.8.3 changed the order and the buffer count together, and needs both: sending the previous
// micro-batch's gradient before receiving the next activation is what lets a stage reuse that
// buffer one micro-batch sooner. 0.5's order with 0.8.3's buffer count receives into a buffer
// whose gradient is still to be sent, which the validator's buffer check reports.
TEST_CASE("0.5's order with 0.8.3's buffers overwrites a buffer still in use", "[deepspeed]") {
  for (const DeepSpeedRelease release : kReleases) CHECK_FALSE(find_problem(train(release, 4, 8)));
  Schedule mixed = train(DeepSpeedRelease::v0_5, 4, 8);
  for (int r = 0; r < 4; ++r)
    for (Step& step : mixed.programs[r])
      for (Instruction& instr : step)
        if (instr.micro_batch != kNone)
          instr.buffer = instr.micro_batch % deepspeed_train_buffers(DeepSpeedRelease::v0_8_3, 4, r, 8);
  const auto problem = find_problem(mixed);
  REQUIRE(problem);
  CHECK_THAT(problem->message, Catch::Contains("overwrites buffer") && Catch::Contains("while it still holds micro-batch"));
}
