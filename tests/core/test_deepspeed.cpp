// DeepSpeed's schedules, instruction for instruction (reference 002: TrainSchedule,
// InferenceSchedule, DataParallelSchedule).
// - Hand-checked listings: train p=2 m=3 (8 = 2(m+p-1) steps; stage 0 uses 3 buffers, stage
//   1 uses 2, so micro-batch 2 lands in buffer 0 on stage 1) and inference p=3 m=2 (4 steps,
//   two buffers alternating between receive and send), data-parallel m=3.
// - Golden listings in tests/golden/deepspeed/, written by DeepSpeed's own schedule.py
//   (README there): same steps, same instructions in the same order, same buffer ids, for
//   train p/m = 1/1, 1/3, 2/1, 2/3, 3/2, 4/4, 4/8, 5/3, 8/12 and inference 1/2 .. 5/7.
// - Invariants over p = 1..8, m = 1..12: step counts 2(m+p-1) and m+p-1; train buffers are
//   micro_batch % max(2, min(p-s+1, m)), inference buffers < 2; every micro-batch forwarded
//   (and backwarded) once per stage; every send has its receive on the neighbour in the
//   same step; the reductions and the optimizer step close the last step; the validator
//   accepts them with blocking sends.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "test_generators_support.hpp"

#include "pipescope/core/validator.hpp"

using namespace pipescope;
using namespace test_support;

namespace {

using Texts = std::vector<std::string>;

// "0RECV_B1#1": torch's text form plus the buffer id.
Texts buffered_text(const Program& program) {
  Texts steps;
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

int train_buffers(int p, int s, int m) { return std::max(2, std::min(p - s + 1, m)); }

}  // namespace

TEST_CASE("deepspeed-train p=2 m=3, hand-checked", "[deepspeed]") {
  const Schedule s = deepspeed_train_schedule(params(2, 3));
  CHECK(s.name == "deepspeed-train");
  CHECK(buffered_text(s.programs[0]) == Texts{
                                           "0LOAD0#0 0F0#0",
                                           "0SEND_F0#0",
                                           "0LOAD1#1 0F1#1",
                                           "0SEND_F1#1 0RECV_B0#0 0B0#0",
                                           "0LOAD2#2 0F2#2",
                                           "0SEND_F2#2 0RECV_B1#1 0B1#1",
                                           ".",
                                           "0RECV_B2#2 0B2#2 0REDUCE_TIED 0REDUCE_GRAD 0OPTIMIZER",
                                       });
  CHECK(buffered_text(s.programs[1]) == Texts{
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

TEST_CASE("deepspeed-inference p=3 m=2, hand-checked", "[deepspeed]") {
  const Schedule s = deepspeed_inference_schedule(params(3, 2));
  CHECK(buffered_text(s.programs[0]) == Texts{"0LOAD0#0 0F0#0", "0LOAD1#1 0SEND_F0#0 0F1#1", "0SEND_F1#1", "."});
  CHECK(buffered_text(s.programs[1]) == Texts{".", "1RECV_F0#0 1F0#0", "1RECV_F1#1 1SEND_F0#0 1F1#1", "1SEND_F1#1"});
  CHECK(buffered_text(s.programs[2]) == Texts{".", ".", "2LOAD0#0 2RECV_F0#0 2F0#0", "2LOAD1#1 2RECV_F1#1 2F1#1"});
}

TEST_CASE("data-parallel m=3 accumulates gradients on one stage", "[deepspeed]") {
  const Schedule s = data_parallel_schedule(params(1, 3));
  CHECK(buffered_text(s.programs[0]) ==
        Texts{"0LOAD0#0 0F0#0 0B0#0", "0LOAD1#0 0F1#0 0B1#0", "0LOAD2#0 0F2#0 0B2#0 0REDUCE_GRAD 0OPTIMIZER"});
  CHECK_NOTHROW(validate(s));
  CHECK_THAT(refusal([] { data_parallel_schedule(params(2, 3)); }),
             Catch::StartsWith("data-parallel: ") && Catch::Contains("--stages must be 1; got --stages 2"));
}

TEST_CASE("deepspeed schedules match DeepSpeed's own golden listings", "[deepspeed]") {
  const std::filesystem::path dir = std::filesystem::path(PIPESCOPE_SOURCE_DIR) / "tests/golden/deepspeed";
  const std::regex name_pattern(R"((deepspeed-(train|inference))_p(\d+)_m(\d+)\.txt)");
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string file = entry.path().filename().string();
    std::smatch match;
    if (!std::regex_match(file, match, name_pattern)) continue;
    INFO(file);
    ++files;
    const ScheduleParams request = params(std::stoi(match[3]), std::stoi(match[4]));
    const Schedule s = match[2] == "train" ? deepspeed_train_schedule(request) : deepspeed_inference_schedule(request);
    std::ifstream in(entry.path());
    std::vector<std::string> golden;
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line[0] != '#') golden.push_back(line);
    const std::vector<std::string> ours = deepspeed_lines(s);
    REQUIRE(ours.size() == golden.size());
    for (std::size_t i = 0; i < golden.size(); ++i) CHECK(ours[i] == golden[i]);
  }
  CHECK(files == 14);
}

TEST_CASE("deepspeed-train invariants over p = 1..8, m = 1..12", "[deepspeed]") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 12; ++m) {
      INFO("p=" << p << " m=" << m);
      const Schedule s = deepspeed_train_schedule(params(p, m));
      std::map<std::tuple<int, int, Op>, int> computes;
      std::map<std::tuple<int, int, int, int>, int> sends;  // (kind, from stage, micro-batch, step)
      for (int r = 0; r < p; ++r) {
        const int num_buffers = train_buffers(p, r, m);
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
      const Schedule s = deepspeed_inference_schedule(params(p, m));
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
