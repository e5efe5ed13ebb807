// Validator on hand-written schedules. Valid: 1F1B on 2 ranks x 2 micro-batches with loads,
// buffers, idle steps and the optimizer step; loop placement (rank 0 holds stages 0 and 2);
// V placement (rank 0 holds 0 and 3, stages 1 -> 2 hand over in memory); a skip connection
// (stage 0 also sends to stage 2); split backward (I + W); inference. Invalid: one mutation of
// a valid schedule per rule of SPEC.md section 3, each expected to be reported at a given rank
// and step with a given reason; a deadlock is reported as its cycle of waits.
#include <catch2/catch.hpp>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/validator.hpp"
#include "test_validator_support.hpp"

using namespace pipescope;
using pipescope::testing::make_schedule_from_text;

namespace {

// 1F1B, 2 ranks, 2 micro-batches, DeepSpeed-style loads on the first and last stage.
Schedule one_f_one_b() {
  return make_schedule_from_text(
      2, {0, 1},
      {{"0LOAD0#0 0F0#0 0SEND_F0#0", "0LOAD1#1 0F1#1 0SEND_F1#1", "0RECV_B0#0 0B0#0", "0RECV_B1#1 0B1#1",
        "0REDUCE_TIED 0REDUCE_GRAD 0OPTIMIZER"},
       {"", "1RECV_F0#0 1LOAD0#0 1F0#0", "1B0#0 1SEND_B0#0", "1RECV_F1#1 1LOAD1#1 1F1#1",
        "1B1#1 1SEND_B1#1 1REDUCE_TIED 1REDUCE_GRAD 1OPTIMIZER"}});
}

// Rank 0 holds stages 0 and 2, rank 1 holds 1 and 3; one micro-batch.
Schedule loop_placement_schedule() {
  return make_schedule_from_text(
      1, {0, 1, 0, 1},
      {{"0F0 0SEND_F0", "", "2RECV_F0 2F0 2SEND_F0", "", "", "2RECV_B0 2B0 2SEND_B0", "", "0RECV_B0 0B0"},
       {"", "1RECV_F0 1F0 1SEND_F0", "", "3RECV_F0 3F0", "3B0 3SEND_B0", "", "1RECV_B0 1B0 1SEND_B0", ""}});
}

// V placement: rank 0 holds stages 0 and 3, rank 1 holds 1 and 2 (1 -> 2 stays in memory).
Schedule v_placement_schedule() {
  return make_schedule_from_text(
      1, {0, 1, 1, 0},
      {{"0F0 0SEND_F0", "", "", "3RECV_F0 3F0", "3B0 3SEND_B0", "", "", "0RECV_B0 0B0"},
       {"", "1RECV_F0 1F0", "2F0 2SEND_F0", "", "", "2RECV_B0 2B0", "1B0 1SEND_B0", ""}});
}

// Stage 0's output also goes straight to stage 2, whose gradient comes straight back.
Schedule skip_connection_schedule() {
  return make_schedule_from_text(
      1, {0, 1, 2},
      {{"0F0 0SEND_F0 0SEND_F0@2", "", "", "", "0RECV_B0 0RECV_B0@2 0B0"},
       {"", "1RECV_F0 1F0 1SEND_F0", "", "1RECV_B0 1B0 1SEND_B0", ""},
       {"", "", "2RECV_F0 2RECV_F0@0 2F0", "2B0 2SEND_B0 2SEND_B0@0", ""}});
}

// Zero-bubble style: BackwardInput, then BackwardWeight later.
Schedule split_backward_schedule() {
  return make_schedule_from_text(
      2, {0, 1},
      {{"0F0 0SEND_F0", "0F1 0SEND_F1", "0RECV_B0 0I0", "0RECV_B1 0I1", "0W0", "0W1"},
       {"1RECV_F0 1F0", "1I0 1SEND_B0", "1RECV_F1 1F1", "1I1 1SEND_B1", "1W0", "1W1"}});
}

Schedule inference_schedule() {
  return make_schedule_from_text(2, {0, 1}, {{"0F0 0SEND_F0", "0F1 0SEND_F1"}, {"", "1RECV_F0 1F0", "1RECV_F1 1F1"}});
}

void replace_step(Schedule& schedule, int rank, int step, const std::string& text) {
  schedule.programs[rank][step] = pipescope::testing::step(text);
}

// The problem must sit at (rank, step) and its one-line message must contain `fragment`.
void expect_problem(const Schedule& schedule, int rank, int step, const std::string& fragment,
                    ValidationOptions options = {}) {
  const auto problem = find_problem(schedule, options);
  REQUIRE(problem.has_value());
  INFO(problem->message);
  CHECK(problem->rank == rank);
  CHECK(problem->step == step);
  CHECK(problem->message.find(fragment) != std::string::npos);
  CHECK(problem->message.find('\n') == std::string::npos);
  if (step >= 0) {
    const std::string place = "rank " + std::to_string(rank) + ", step " + std::to_string(step) + ", position ";
    CHECK(problem->message.rfind(place, 0) == 0);
    CHECK(problem->message.find("instruction " + problem->instruction + ":") != std::string::npos);
  }
  CHECK_THROWS_AS(validate(schedule, options), ValidationError);
}

}  // namespace

TEST_CASE("valid hand-written schedules pass") {
  CHECK_FALSE(find_problem(one_f_one_b()));
  CHECK_FALSE(find_problem(loop_placement_schedule()));
  CHECK_FALSE(find_problem(v_placement_schedule()));
  CHECK_FALSE(find_problem(skip_connection_schedule()));
  CHECK_FALSE(find_problem(split_backward_schedule()));
  CHECK_FALSE(find_problem(inference_schedule()));
  CHECK_NOTHROW(validate(one_f_one_b()));
}

TEST_CASE("idle steps anywhere are kept and accepted") {
  Schedule schedule = one_f_one_b();
  for (auto& program : schedule.programs) {
    program.insert(program.begin(), Step{});
    program.insert(program.begin() + 3, 2, Step{});
    program.push_back(Step{});
  }
  CHECK_FALSE(find_problem(schedule));
  CHECK(find_problem(schedule, {true}).has_value());  // 1F1B with rendezvous sends deadlocks
}

TEST_CASE("header problems are global") {
  Schedule schedule = one_f_one_b();
  schedule.num_ranks = 3;
  expect_problem(schedule, -1, -1, "num_ranks is 3 but there are 2 programs");
  schedule = one_f_one_b();
  schedule.stage_to_rank = {0, 5};
  expect_problem(schedule, -1, -1, "stage_to_rank[1] is rank 5, out of range 0..1");
  schedule = one_f_one_b();
  schedule.stage_to_rank = {0, 0};
  expect_problem(schedule, 1, -1, "rank 1 holds no stage");
  schedule = one_f_one_b();
  schedule.num_stages = 3;
  expect_problem(schedule, -1, -1, "num_stages is 3 but stage_to_rank has 2 entries");
  schedule = one_f_one_b();
  schedule.num_micro_batches = 0;
  expect_problem(schedule, -1, -1, "num_micro_batches is 0");
}

TEST_CASE("instruction fields out of range or misplaced") {
  Schedule schedule = one_f_one_b();
  replace_step(schedule, 1, 1, "1RECV_F0#0 1LOAD0#0 1F7#0");
  expect_problem(schedule, 1, 1, "micro-batch 7 out of range 0..1");

  schedule = one_f_one_b();
  replace_step(schedule, 0, 0, "0LOAD0#0 1F0#0 0SEND_F0#0");
  expect_problem(schedule, 0, 0, "stage 1 is held by rank 1, not by this rank");

  schedule = one_f_one_b();
  replace_step(schedule, 0, 0, "0LOAD0#0 0F0@1#0 0SEND_F0#0");
  expect_problem(schedule, 0, 0, "peer_stage 1 on ForwardPass");

  schedule = one_f_one_b();
  replace_step(schedule, 0, 0, "0LOAD0#0 0F0#0 0SEND_F0#0 0RECV_F0");
  expect_problem(schedule, 0, 0, "the default peer (the previous stage) does not exist");

  schedule = one_f_one_b();
  replace_step(schedule, 1, 2, "1B0#0 1SEND_F0@0#0");
  expect_problem(schedule, 1, 2, "wrong direction: activations go to a later stage");

  schedule = v_placement_schedule();
  replace_step(schedule, 1, 2, "2F0 2SEND_F0 1SEND_F0");
  expect_problem(schedule, 1, 2, "stages 1 and 2 are both on rank 1");

  schedule = v_placement_schedule();
  replace_step(schedule, 1, 1, "1RECV_F0 1LOAD0 1F0");
  expect_problem(schedule, 1, 1, "neither the first nor the last stage");

  schedule = inference_schedule();
  replace_step(schedule, 1, 2, "1RECV_F1 1F1 1SEND_B1");
  expect_problem(schedule, 1, 2, "SendGrad in an inference schedule");

  schedule = one_f_one_b();
  schedule.programs[0][0][1].micro_batch = kNone;
  expect_problem(schedule, 0, 0, "ForwardPass needs a micro-batch");

  schedule = one_f_one_b();
  schedule.programs[1][2][1].op = static_cast<Op>(99);
  expect_problem(schedule, 1, 2, "unknown op code 99");
}

TEST_CASE("inputs must arrive before the compute that consumes them") {
  Schedule schedule = one_f_one_b();
  replace_step(schedule, 1, 1, "1LOAD0#0 1F0#0");
  expect_problem(schedule, 1, 1, "no RecvActivation of micro-batch 0 from stage 0 (rank 0) before it");

  schedule = one_f_one_b();
  replace_step(schedule, 1, 1, "1LOAD0#0 1F0#0 1RECV_F0#0");
  expect_problem(schedule, 1, 1, "no RecvActivation");  // the forward is reached first

  schedule = inference_schedule();
  replace_step(schedule, 1, 2, "1RECV_F1 1F1 1RECV_F1@0");
  expect_problem(schedule, 1, 2, "receives after the ForwardPass that consumes it (step 2)");

  schedule = one_f_one_b();
  replace_step(schedule, 0, 2, "0B0#0 0RECV_B0#0");
  expect_problem(schedule, 0, 2, "no RecvGrad of micro-batch 0 from stage 1 (rank 1) before it");

  schedule = one_f_one_b();
  replace_step(schedule, 0, 0, "0F0#0 0LOAD0#0 0SEND_F0#0");
  expect_problem(schedule, 0, 0, "no LoadMicroBatch of stage 0 micro-batch 0 before it");

  // Same rank, later stage first: V placement with stage 2 before stage 1.
  schedule = v_placement_schedule();
  replace_step(schedule, 1, 1, "1RECV_F0");
  replace_step(schedule, 1, 2, "2F0 1F0 2SEND_F0");
  expect_problem(schedule, 1, 2, "needs the ForwardPass of stage 1 micro-batch 0 first");
}

TEST_CASE("a sender must have computed what it sends") {
  Schedule schedule = one_f_one_b();
  replace_step(schedule, 0, 0, "0LOAD0#0 0SEND_F0#0 0F0#0");
  expect_problem(schedule, 0, 0, "sends the activation of stage 0 micro-batch 0 before its ForwardPass has computed it");

  schedule = one_f_one_b();
  replace_step(schedule, 1, 2, "1SEND_B0#0 1B0#0");
  expect_problem(schedule, 1, 2, "before its backward has computed it");
}

TEST_CASE("forward, backward and weight gradient run once each, in order") {
  Schedule schedule = one_f_one_b();
  replace_step(schedule, 1, 3, "1RECV_F1#1 1LOAD1#1 1F1#1 1F1#1");
  expect_problem(schedule, 1, 3, "second ForwardPass of stage 1 micro-batch 1 (first at step 3)");

  schedule = one_f_one_b();
  replace_step(schedule, 1, 2, "1B0#0 1I0#0 1SEND_B0#0");
  expect_problem(schedule, 1, 2, "already ran a BackwardPass (step 2); a micro-batch runs either");

  schedule = split_backward_schedule();
  replace_step(schedule, 1, 1, "1W0 1I0 1SEND_B0");
  replace_step(schedule, 1, 4, "");
  expect_problem(schedule, 1, 1, "BackwardWeight before the BackwardInput of stage 1 micro-batch 0");

  schedule = split_backward_schedule();
  replace_step(schedule, 0, 5, "");
  expect_problem(schedule, 0, 3, "BackwardInput of stage 0 micro-batch 1 has no BackwardWeight");

  schedule = split_backward_schedule();
  replace_step(schedule, 1, 4, "1W0 1B0");
  expect_problem(schedule, 1, 4, "already ran a BackwardInput");
}

TEST_CASE("every micro-batch runs on every stage") {
  Schedule schedule = inference_schedule();
  schedule.num_micro_batches = 3;
  expect_problem(schedule, 0, -1, "rank 0: stage 0 micro-batch 2 has no ForwardPass");

  schedule = split_backward_schedule();
  replace_step(schedule, 0, 3, "0RECV_B1");
  replace_step(schedule, 0, 5, "");
  expect_problem(schedule, 0, -1, "rank 0: stage 0 micro-batch 1 has no backward");

  // Far fewer instructions than stages x micro-batches: refused without tables that large.
  schedule = inference_schedule();
  schedule.num_micro_batches = 2000000000;
  expect_problem(schedule, 0, -1, "stage 0 micro-batch 2 has no ForwardPass");
}

TEST_CASE("sends and receives pair in order per channel") {
  Schedule schedule = one_f_one_b();
  replace_step(schedule, 1, 1, "1RECV_F1#1 1RECV_F0#0 1LOAD0#0 1F0#0");
  replace_step(schedule, 1, 3, "1LOAD1#1 1F1#1");
  expect_problem(schedule, 1, 1,
                 "receives micro-batch 1 as the 1st activation from stage 0, but the 1st one sent is micro-batch 0 "
                 "(rank 0 step 0 0SEND_F0); sends and receives between two stages are matched in order");

  schedule = skip_connection_schedule();
  replace_step(schedule, 2, 2, "2RECV_F0 2F0");
  expect_problem(schedule, 0, 0, "is never received: stage 2 (rank 2) receives 0 activations from stage 0, this is the 1st send");

  schedule = skip_connection_schedule();
  replace_step(schedule, 0, 0, "0F0 0SEND_F0");
  expect_problem(schedule, 2, 2, "has no matching send: stage 0 (rank 0) sends 0 activations to stage 2");

  schedule = one_f_one_b();
  replace_step(schedule, 0, 1, "0LOAD1#1 0F1#1 0SEND_F1#1 0SEND_F1#1");
  expect_problem(schedule, 0, 1, "sends the activation of micro-batch 1 to stage 1 a second time (first at rank 0 step 1 0SEND_F1)");
}

TEST_CASE("a buffer is not overwritten while it holds a live micro-batch") {
  // Micro-batch 1 takes buffer 0 at step 1; micro-batch 0 still needs it at step 2.
  Schedule schedule = one_f_one_b();
  replace_step(schedule, 0, 1, "0LOAD1#0 0F1#0 0SEND_F1#0");
  replace_step(schedule, 0, 3, "0RECV_B1#0 0B1#0");
  expect_problem(schedule, 0, 1,
                 "overwrites buffer 0 of stage 0 while it still holds micro-batch 0 (used again by rank 0 step 2 0RECV_B0)");
  // The same when micro-batch 1 moves to buffer 1 later (a micro-batch with two ids).
  schedule = one_f_one_b();
  replace_step(schedule, 0, 1, "0LOAD1#0 0F1#0 0SEND_F1#0");
  expect_problem(schedule, 0, 1,
                 "overwrites buffer 0 of stage 0 while it still holds micro-batch 0 (used again by rank 0 step 2 0RECV_B0)");
  // Reusing the id once micro-batch 0 is done is fine, even for a micro-batch that used
  // another id before.
  schedule = one_f_one_b();
  replace_step(schedule, 0, 3, "0RECV_B1#0 0B1#0");
  replace_step(schedule, 0, 1, "0LOAD1#1 0F1#1 0SEND_F1#1");
  CHECK_FALSE(find_problem(schedule));
}

TEST_CASE("end-of-batch collectives come after the backward work of their stage") {
  Schedule schedule = one_f_one_b();
  replace_step(schedule, 0, 2, "0RECV_B0#0 0B0#0 0REDUCE_GRAD");
  replace_step(schedule, 0, 4, "0REDUCE_TIED 0OPTIMIZER");
  expect_problem(schedule, 0, 2, "ReduceGrads of stage 0 before all its backward work is done (1 of 2 micro-batches)");

  schedule = one_f_one_b();
  replace_step(schedule, 0, 4, "0REDUCE_TIED 0OPTIMIZER 0REDUCE_GRAD");
  expect_problem(schedule, 0, 4, "reduces after the OptimizerStep of stage 0 (step 4)");

  schedule = one_f_one_b();
  replace_step(schedule, 0, 4, "0REDUCE_TIED 0REDUCE_GRAD 0OPTIMIZER 0OPTIMIZER");
  expect_problem(schedule, 0, 4, "second OptimizerStep of stage 0");
}

TEST_CASE("a deadlock is reported as its cycle") {
  // Rank 0 waits for the gradient before sending the activation rank 1 needs to produce it.
  const Schedule schedule = make_schedule_from_text(
      1, {0, 1}, {{"0F0", "0RECV_B0", "0SEND_F0", "0B0"}, {"1RECV_F0", "1F0", "1B0", "1SEND_B0"}});
  const auto problem = find_problem(schedule);
  REQUIRE(problem);
  CHECK(problem->message ==
        "rank 0, step 1, position 0, instruction 0RECV_B0: deadlock: rank 0 step 1 0RECV_B0 waits for its send "
        "rank 1 step 3 1SEND_B0, which comes after rank 1 step 0 1RECV_F0, which waits for its send rank 0 step 2 "
        "0SEND_F0, which comes after rank 0 step 1 0RECV_B0");
}

TEST_CASE("blocking sends: 1F1B with both ends sending first deadlocks, DeepSpeed order does not") {
  // Rank 0 sends F1 before receiving B0; rank 1 sends B0 before receiving F1: with
  // rendezvous sends each waits for the other's receive to be posted.
  const Schedule schedule = one_f_one_b();
  CHECK_FALSE(find_problem(schedule, {false}));
  const auto problem = find_problem(schedule, {true});
  REQUIRE(problem);
  CHECK(problem->message ==
        "rank 0, step 1, position 2, instruction 0SEND_F1: deadlock: rank 0 step 1 0SEND_F1 waits (blocking send) for its "
        "receive rank 1 step 3 1RECV_F1 to be posted, which comes after rank 1 step 2 1SEND_B0, which waits (blocking "
        "send) for its receive rank 0 step 2 0RECV_B0 to be posted, which comes after rank 0 step 1 0SEND_F1");

  // Receiving F1 before sending B0 on rank 1 (as DeepSpeed orders a step) is fine.
  Schedule reordered = one_f_one_b();
  replace_step(reordered, 1, 2, "1B0#0");
  replace_step(reordered, 1, 3, "1RECV_F1#1 1SEND_B0#0 1LOAD1#1 1F1#1");
  CHECK_FALSE(find_problem(reordered, {true}));
}
