// The schedule index that the validator and the simulator's compile step share, on a
// hand-written 2-rank 1F1B with one micro-batch, an idle step and an empty rank-1 first step:
//   rank 0: step 0 "0LOAD0 0F0 0SEND_F0", step 1 "" (idle), step 2 "0RECV_B0 0B0"
//   rank 1: step 0 "", step 1 "1RECV_F0 1F0 1B0 1SEND_B0"
// Expected: 9 vertices, rank 0 holds 0..4 and rank 1 holds 5..8 (rank_begin 0, 5, 9); vertex 4
// (0B0) is at rank 0, step 2, position 1; vertex 8 (1SEND_B0) at rank 1, step 1, position 3.
// Peers resolve to the default neighbour (0SEND_F0 -> 1, 1SEND_B0 -> 0), a receive at stage 0
// whose default peer would be stage -1 reads kOutOfRangePeer, an explicit peer stays as given.
// With IndexContents::NumberingOnly (the simulator's compile) the numbering is the same and
// the compact field copy is left out.
// shape_problem names the first header fault: no ranks, a missing program, a short
// stage_to_rank, a stage placed on a rank that does not exist.
#include <catch2/catch.hpp>

#include "pipescope/core/schedule_index.hpp"
#include "test_validator_support.hpp"

using namespace pipescope;
using pipescope::testing::make_schedule_from_text;

namespace {

Schedule small_1f1b() {
  return make_schedule_from_text(1, {0, 1},
                                 {{"0LOAD0 0F0 0SEND_F0", "", "0RECV_B0 0B0"}, {"", "1RECV_F0 1F0 1B0 1SEND_B0"}});
}

}  // namespace

TEST_CASE("the index numbers instructions rank after rank in program order", "[schedule_index]") {
  const Schedule schedule = small_1f1b();
  const ScheduleIndex index(schedule);
  REQUIRE(index.size() == 9);
  REQUIRE(index.num_ranks() == 2);
  REQUIRE(index.rank_begin == std::vector<Vertex>{0, 5, 9});
  REQUIRE(index.step_of == std::vector<int>{0, 0, 0, 2, 2, 1, 1, 1, 1});
  CHECK(index.rank_of(4) == 0);
  CHECK(index.rank_of(5) == 1);
  CHECK(index.index_in_step(4) == 1);
  CHECK(index.index_in_step(8) == 3);
  CHECK(index.instruction(4) == schedule.programs[0][2][1]);
  CHECK(index.node[4].op == Op::BackwardPass);
  CHECK(index.node[4].stage == 0);
  CHECK(index.node[4].micro_batch == 0);
  CHECK(index.is_first_of_rank(5));
  CHECK(index.text(8) == "1SEND_B0");
  CHECK(index.short_name(8) == "rank 1 step 1 1SEND_B0");
  CHECK(index.place(4) == "rank 0, step 2, position 1, instruction 0B0");
}

TEST_CASE("an index of the numbering only numbers alike and copies no fields", "[schedule_index]") {
  const Schedule schedule = small_1f1b();
  const ScheduleIndex full(schedule);
  const ScheduleIndex numbering(schedule, IndexContents::NumberingOnly);
  CHECK(numbering.size() == 9);
  CHECK(numbering.node.empty());
  CHECK(numbering.rank_begin == full.rank_begin);
  CHECK(numbering.step_of == full.step_of);
  CHECK(numbering.place(8) == full.place(8));
}

TEST_CASE("the index resolves the peers of sends and receives", "[schedule_index]") {
  const Schedule schedule = small_1f1b();
  const ScheduleIndex index(schedule);
  CHECK(index.node[2].peer == 1);  // 0SEND_F0
  CHECK(index.node[3].peer == 1);  // 0RECV_B0
  CHECK(index.node[5].peer == 0);  // 1RECV_F0
  CHECK(index.node[8].peer == 0);  // 1SEND_B0
  CHECK(index.node[1].peer == kNone);  // a compute keeps the field as given

  const Schedule odd = make_schedule_from_text(1, {0, 1}, {{"0RECV_F0 0SEND_F0@1"}, {"1RECV_F0"}});
  const ScheduleIndex odd_index(odd);
  CHECK(odd_index.node[0].peer == kOutOfRangePeer);
  CHECK(odd_index.node[1].peer == 1);
}

TEST_CASE("an empty rank shares its begin with the next one", "[schedule_index]") {
  const Schedule schedule = make_schedule_from_text(1, {0, 1, 2}, {{"0F0"}, {}, {"2F0"}});
  const ScheduleIndex index(schedule);
  REQUIRE(index.rank_begin == std::vector<Vertex>{0, 1, 1, 2});
  CHECK(index.rank_of(1) == 2);
}

TEST_CASE("shape_problem names the first header fault", "[schedule_index]") {
  Schedule schedule = small_1f1b();
  CHECK_FALSE(shape_problem(schedule));

  Schedule no_ranks = schedule;
  no_ranks.num_ranks = 0;
  CHECK(shape_problem(no_ranks) == "num_ranks is 0, must be at least 1");

  Schedule missing_program = schedule;
  missing_program.programs.pop_back();
  CHECK(shape_problem(missing_program) == "num_ranks is 2 but there are 1 programs");

  Schedule short_placement = schedule;
  short_placement.num_stages = 3;
  CHECK(shape_problem(short_placement) == "num_stages is 3 but stage_to_rank has 2 entries");

  Schedule far_rank = schedule;
  far_rank.stage_to_rank[1] = 5;
  CHECK(shape_problem(far_rank) == "stage_to_rank[1] is rank 5, out of range 0..1");
}
