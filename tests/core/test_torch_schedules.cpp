// What torch.distributed.pipelining 2.15 writes (tests/golden/torch/schedules), read and
// validated under torch's communication semantics: every schedule class's compute-only and
// lowered CSVs are accepted, except Schedule1F1B's order, whose last rank forwards a
// micro-batch that does not exist (refused in one line). Hand-written cases pin the rules: a
// posted receive does not block (a schedule that deadlocks under pipescope's rule runs under
// torch's), a real deadlock is still found, wait points come after what they wait for,
// REDUCE_GRAD comes after all of its stage's weight gradients, OVERLAP_F_B is its two actions
// (whose sends, when the reader adds them, follow both); between two ranks receives are posted
// in the order of the sends, as torch's runtime matches them, and the writer orders them so.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "count_ops.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "pipescope/core/validator.hpp"

using namespace pipescope;

namespace {

const std::filesystem::path kFixtures = std::filesystem::path(PIPESCOPE_SOURCE_DIR) / "tests/golden/torch/schedules";

std::vector<std::filesystem::path> fixture_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(kFixtures))
    if (entry.path().extension() == ".csv") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

bool is_lowered(const std::filesystem::path& file) { return file.filename().string().find(".lowered.") != std::string::npos; }

using pipescope::testing::count_op;

// The first problem of a torch CSV text, read or validated; "" when it is fine.
std::string problem_of(const std::string& csv) {
  try {
    const Schedule schedule = parse_torch_csv(csv, "x.csv");
    if (auto problem = find_problem(schedule)) return problem->message;
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every schedule torch 2.15 writes is read and validates, but Schedule1F1B's wrong order") {
  const auto files = fixture_files();
  REQUIRE(files.size() >= 60u);
  int lowered = 0;
  for (const auto& file : files) {
    INFO(file.filename().string());
    const bool broken_1f1b = file.filename().string().rfind("Schedule1F1B-", 0) == 0;
    std::string problem;
    Schedule schedule;
    try {
      schedule = read_schedule_file(file.string());
      if (auto found = find_problem(schedule)) problem = found->message;
    } catch (const ScheduleError& e) {
      problem = e.what();
    }
    if (broken_1f1b) {
      // One line, naming the micro-batch that is missing (torch forwards M instead of 0).
      CHECK(problem.find('\n') == std::string::npos);
      CHECK_THAT(problem, Catch::Contains("micro-batch"));
      continue;
    }
    CHECK(problem == "");
    CHECK(schedule.communication == Communication::Torch);
    if (!is_lowered(file)) continue;
    ++lowered;
    // The lowered form keeps torch's own cells: its sends, their waits, (un)sharding.
    CHECK(count_op(schedule, Op::WaitSendActivation) == count_op(schedule, Op::SendActivation));
    CHECK(count_op(schedule, Op::WaitSendGrad) == count_op(schedule, Op::SendGrad));
    CHECK(count_op(schedule, Op::Unshard) == schedule.num_stages);
    CHECK(count_op(schedule, Op::Reshard) == schedule.num_stages);
    CHECK(count_op(schedule, Op::WaitReduceGrads) == schedule.num_stages);
  }
  CHECK(lowered == 25);
}

TEST_CASE("OVERLAP_F_B is read as its two actions, in order, in one step") {
  const Schedule schedule = parse_torch_csv("0F0,1F0,1B0,(0F1;0B0)OVERLAP_F_B,1F1,1B1,0B1\n", "x.csv");
  std::vector<std::string> computes;  // the step also holds the load the completion adds
  for (const Instruction& instr : schedule.programs[0][3])
    if (is_compute(instr.op)) computes.push_back(to_string(instr));
  CHECK(computes == std::vector<std::string>{"0F1", "0B0"});
  CHECK(problem_of("0F0,1F0,1B0,(0F1;0B0)OVERLAP_F_B,1F1,1B1,0B1\n") == "");
  // Completing a compute-only order, the pair's sends follow both actions, as torch lowers it.
  const Schedule two_ranks = parse_torch_csv("0F0,(0F1;0B0)OVERLAP_F_B,0B1\n1F0,1B0,1F1,1B1\n", "x.csv");
  std::vector<std::string> step;
  for (const Instruction& instr : two_ranks.programs[0][1])
    if (instr.op != Op::LoadMicroBatch) step.push_back(to_string(instr));
  CHECK(step == std::vector<std::string>{"0F1", "0RECV_B0", "0B0", "0SEND_F1"});
}

TEST_CASE("a posted receive does not block: torch's order runs where pipescope's rule deadlocks") {
  // Rank 0 posts the gradient receive before it forwards: under torch's semantics only the
  // backward waits for it; under pipescope's the receive itself would wait for rank 1's
  // backward, which waits for rank 0's forward.
  const std::string csv = "0RECV_B0,0F0,0SEND_F0,0B0,0WAIT_SEND_F0\n"
                          "1RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0\n";
  Schedule schedule = parse_torch_csv(csv, "x.csv");
  CHECK(problem_of(csv) == "");
  schedule.communication = Communication::Pipescope;
  const auto problem = find_problem(schedule);
  REQUIRE(problem.has_value());
  CHECK_THAT(problem->message, Catch::Contains("deadlock"));
}

TEST_CASE("a real deadlock under torch's semantics names the compute that waits for data") {
  // Rank 0 runs its backward before sending the forward that rank 1's backward needs first.
  const std::string problem = problem_of("0F0,0RECV_B0,0B0,0SEND_F0\n"
                                         "1RECV_F0,1F0,1B0,1SEND_B0\n");
  CHECK_THAT(problem, Catch::Contains("deadlock"));
  CHECK_THAT(problem, Catch::Contains("waits for the data of its posted receive, sent by"));
}

TEST_CASE("wait points come after what they wait for") {
  CHECK_THAT(problem_of("0F0,0WAIT_SEND_F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
             Catch::Contains("rank 0, step 1") && Catch::Contains("waits for the SendActivation of stage 0 micro-batch 0, "
                                                                  "which has not been posted before it"));
  CHECK_THAT(problem_of("0F0,0SEND_F0,0WAIT_SEND_F0,0WAIT_SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
             Catch::Contains("second wait for the SendActivation of stage 0 micro-batch 0"));
  CHECK_THAT(problem_of("0F0,0SEND_F0,0RECV_B0,0B0,0WAIT_REDUCE_GRAD,0REDUCE_GRAD\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
             Catch::Contains("waits for the ReduceGrads of stage 0, which does not come before it"));
}

TEST_CASE("a per-stage REDUCE_GRAD stands anywhere after all of its stage's weight gradients") {
  // Stage 2's reduction in the middle of rank 0's program, where torch puts it, is fine ...
  CHECK(problem_of("0F0,2F0,0F1,2F1,2B0,2B1,2REDUCE_GRAD,2WAIT_REDUCE_GRAD,0B0,0B1,0REDUCE_GRAD\n"
                   "1F0,1F1,3F0,3F1,3B0,3B1,1B0,1B1\n") == "");
  // ... but not before one of its weight gradients (W of micro-batch 1).
  CHECK_THAT(problem_of("0F0,0F1,0I0,0W0,0I1,0REDUCE_GRAD,0W1\n1F0,1F1,1B0,1B1\n"),
             Catch::Contains("ReduceGrads of stage 0 before all its backward work is done (1 of 2 micro-batches)"));
}

TEST_CASE("torch's per-stage actions take no micro-batch; unknown cells name row and column") {
  CHECK(problem_of("0F0,0WAIT_REDUCE_GRAD1\n") ==
        "x.csv: row 1 (rank 0), column 2: bad action '0WAIT_REDUCE_GRAD1': a WAIT_REDUCE_GRAD action takes no micro-batch number");
  CHECK(problem_of("0F0\n1F0,1WAIT_RECV_F0\n") ==
        "x.csv: row 2 (rank 1), column 2: bad action '1WAIT_RECV_F0': unknown action type 'WAIT_RECV_F'");
  CHECK(problem_of("0F0,0WAIT_SEND_F\n") ==
        "x.csv: row 1 (rank 0), column 2: bad action '0WAIT_SEND_F': missing micro-batch number");
}

TEST_CASE("between two ranks, receives are posted in the order of the sends; the writer sees to it") {
  // Rank 1 posts stage 3's receive of micro-batch 0 before stage 1's of micro-batch 1, but rank
  // 0 sends stage 0's micro-batch 1 first: torch's runtime would hand it to stage 3.
  const std::string crossed = "0F0,0SEND_F0,0F1,0SEND_F1,2RECV_F0,2F0,2SEND_F0,2RECV_F1,2F1,2SEND_F1\n"
                              "1RECV_F0,1F0,1SEND_F0,3RECV_F0,1RECV_F1,1F1,1SEND_F1,3F0,3RECV_F1,3F1\n";
  CHECK(problem_of(crossed) ==
        "rank 1, step 3, position 0, instruction 3RECV_F0: is the 2nd receive rank 1 posts from rank 0, but its send, "
        "rank 0 step 6 2SEND_F0, is the 3rd message rank 0 posts to rank 1; torch's runtime matches the messages between two ranks in "
        "the order they are posted");
  // Written as torch's CSV, stage 1's receive moves up (receives only move earlier).
  Schedule schedule = parse_torch_csv(crossed, "x.csv");
  const std::string written = to_torch_csv(schedule);
  CHECK(written.find("1RECV_F0,1F0,1SEND_F0,1RECV_F1,3RECV_F0,1F1,1SEND_F1,3F0,3RECV_F1,3F1") != std::string::npos);
  CHECK(problem_of(written) == "");
  // pipescope's own rule matches per pair of stages: there the order is fine.
  schedule.communication = Communication::Pipescope;
  CHECK_FALSE(find_problem(schedule).has_value());
}
