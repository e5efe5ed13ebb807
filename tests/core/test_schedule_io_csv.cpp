// torch pipelining CSV (SPEC.md section 4). The shape comes from the cells: 2 rows -> 2 ranks,
// highest stage 1 -> 2 stages, highest micro-batch 1 -> 2 micro-batches; interleaved 1F1B on
// 4 ranks x 2 chunks reads back with loop placement. A compute-only CSV is completed with
// communication and validates; a full CSV written from a built-in schedule reads back to the
// same CSV text. The writer writes torch's lowered form (no idle slots, every send and
// REDUCE_GRAD waited), leaves out LOAD / REDUCE_TIED / OPTIMIZER and refuses skip peers;
// unknown actions and malformed OVERLAP_F_B cells are refused naming row and column.
#include <catch2/catch.hpp>

#include "count_ops.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "pipescope/core/validator.hpp"
#include "test_validator_support.hpp"

using namespace pipescope;

namespace {

std::string csv_error_of(const std::string& text) {
  try {
    parse_torch_csv(text, "x.csv");
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

using pipescope::testing::count_op;

}  // namespace

TEST_CASE("a compute-only CSV gets its shape from the cells and is completed") {
  const Schedule schedule = parse_torch_csv("0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n", "x.csv");
  CHECK(schedule.num_ranks == 2);
  CHECK(schedule.num_stages == 2);
  CHECK(schedule.num_micro_batches == 2);
  CHECK(schedule.stage_to_rank == std::vector<int>{0, 1});
  CHECK(schedule.is_training());
  // Two activations and two gradients cross between the ranks, each sent and received.
  CHECK(count_op(schedule, Op::SendActivation) == 2);
  CHECK(count_op(schedule, Op::RecvActivation) == 2);
  CHECK(count_op(schedule, Op::SendGrad) == 2);
  CHECK(count_op(schedule, Op::RecvGrad) == 2);
  const auto problem = find_problem(schedule);
  CHECK_FALSE(problem.has_value());
  if (problem) FAIL(problem->message);
}

TEST_CASE("placement is read from which row holds which stage") {
  ScheduleParams params;
  params.num_ranks = 4;
  params.num_micro_batches = 8;
  params.chunks = 2;
  params.chunks_given = true;
  const Schedule interleaved = make_schedule("interleaved-1f1b", params);
  const Schedule back = parse_torch_csv(to_torch_csv(interleaved), "x.csv");
  CHECK(back.stage_to_rank == loop_placement(4, 2));
  CHECK(back.num_micro_batches == 8);
  const auto problem = find_problem(back);
  CHECK_FALSE(problem.has_value());
  if (problem) FAIL(problem->message);
}

TEST_CASE("built-in schedules round-trip through CSV text") {
  int round_trips = 0;
  for (const std::string& name : ScheduleRegistry::instance().names()) {
    ScheduleParams params;
    params.num_ranks = 4;
    params.num_micro_batches = 8;
    if (name == "data-parallel") params.num_ranks = 1;
    Schedule schedule;
    try {
      schedule = make_schedule(name, params);
    } catch (const ScheduleError&) {
      continue;
    }
    INFO(name);
    const std::string csv = to_torch_csv(schedule);
    const Schedule back = parse_torch_csv(csv, "x.csv");
    CHECK(to_torch_csv(back) == csv);
    CHECK(back.stage_to_rank == schedule.stage_to_rank);
    const auto problem = find_problem(back);
    CHECK_FALSE(problem.has_value());
    if (problem) FAIL_CHECK(problem->message);
    ++round_trips;
  }
  CHECK(round_trips >= 8);
}

TEST_CASE("the writer writes torch's lowered form, leaving out what torch does not model") {
  const Schedule schedule = testing::make_schedule_from_text(
      2, {0, 1},
      {{"0LOAD0 0F0 0SEND_F0", "0LOAD1 0F1 0SEND_F1", "0RECV_B0 0B0", "0RECV_B1 0B1", "0REDUCE_TIED 0REDUCE_GRAD 0OPTIMIZER"},
       {"", "1RECV_F0 1LOAD0 1F0", "1B0 1SEND_B0", "1RECV_F1 1LOAD1 1F1", "1B1 1SEND_B1 1REDUCE_TIED 1REDUCE_GRAD 1OPTIMIZER"}});
  CHECK(to_torch_csv(schedule) ==
        "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0WAIT_SEND_F0,0WAIT_SEND_F1\n"
        "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1WAIT_REDUCE_GRAD,1WAIT_SEND_B0,1WAIT_SEND_B1\n");
}

TEST_CASE("the writer refuses skip connections") {
  const Schedule schedule = testing::make_schedule_from_text(
      1, {0, 1, 2}, {{"0F0 0SEND_F0@2"}, {"1F0"}, {"2RECV_F0@0 2F0"}});
  try {
    to_torch_csv(schedule);
    FAIL("wrote a skip connection");
  } catch (const ScheduleError& e) {
    CHECK(std::string(e.what()) ==
          "rank 0, step 0, instruction 0SEND_F0: its peer is stage 2, which torch's CSV cannot express "
          "(actions always go to the neighbouring stage)");
  }
}

TEST_CASE("CSV errors name the row and column") {
  CHECK(csv_error_of("0F0,0UNSHARD0\n") ==
        "x.csv: row 1 (rank 0), column 2: bad action '0UNSHARD0': a UNSHARD action takes no micro-batch number");
  CHECK(csv_error_of("0F0,(0F1;0W1)OVERLAP_F_B\n") ==
        "x.csv: row 1 (rank 0), column 2: bad action '(0F1;0W1)OVERLAP_F_B': OVERLAP_F_B holds a forward, then a backward "
        "(F then B or I)");
  CHECK(csv_error_of("0F0,(0F1;0B0)OVERLAP\n") ==
        "x.csv: row 1 (rank 0), column 2: bad action '(0F1;0B0)OVERLAP': expected (<forward>;<backward>)OVERLAP_F_B");
  CHECK(csv_error_of("0F0,0Q1\n") == "x.csv: row 1 (rank 0), column 2: bad action '0Q1': unknown action type 'Q'");
  CHECK(csv_error_of("0F0,0F\n") == "x.csv: row 1 (rank 0), column 2: bad action '0F': missing micro-batch number");
  CHECK(csv_error_of("0F0\n1F0,0B0\n") ==
        "x.csv: row 2 (rank 1), column 2: stage 0 is already on row 1 (rank 0, column 1); a stage belongs to one rank");
  CHECK(csv_error_of("") == "x.csv: empty file: a torch schedule CSV has one row per rank");
  CHECK(csv_error_of("0REDUCE_GRAD\n") == "x.csv: no per-micro-batch action (F, B, I, W, SEND_*, RECV_*) in the file");
  CHECK(csv_error_of("0F0\n5F0\n") == "x.csv: stage 1 appears on no row (stages go up to 5)");
  CHECK(csv_error_of("0F0\n99999999F0\n") == "x.csv: stage 1 appears on no row (stages go up to 99999999)");
}

TEST_CASE("CSV tolerates CRLF, spaces around cells and a missing final newline") {
  const Schedule a = parse_torch_csv("0F0 , 0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1", "x.csv");
  const Schedule b = parse_torch_csv("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n\n", "x.csv");
  CHECK(a.programs == b.programs);
  CHECK(a.num_ranks == 2);
}
