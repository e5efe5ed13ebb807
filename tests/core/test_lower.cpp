// `lower` builds the schedule in one walk; it must give exactly what the passes give run one
// after the other (from_compute_order, add_data_loads, add_send_recv, group_steps,
// assign_buffers, add_optimizer_step), instruction for instruction, buffer ids and idle steps
// included:
// - every compute-order generator at several sizes (1 rank, p = m, m > p, 3 and 4 chunks);
// - hand orders the generators never make: a forward repeated (the second gets its transfers
//   but no second load), buffer ids given on one rank only (kept there, numbered on the other),
//   inference (no optimizer step), a rank with no computes;
// - the same errors: a non-compute op names rank 0, step 1; a deadlock names rank 0 and 0B0.
#include "test_generators_support.hpp"

using namespace pipescope;
using namespace test_support;

namespace {

Schedule lowered_pass_by_pass(const ComputeOrder& order) {
  Schedule schedule = from_compute_order(order);
  add_data_loads(schedule);
  add_send_recv(schedule);
  group_steps(schedule);
  assign_buffers(schedule);
  add_optimizer_step(schedule);
  return schedule;
}

void require_same_lowering(const ComputeOrder& order) {
  INFO(order.name << " p=" << order.num_ranks << " stages=" << order.num_stages << " m=" << order.num_micro_batches);
  const Schedule expected = lowered_pass_by_pass(order);
  const Schedule got = lower(order);
  REQUIRE(got.programs.size() == expected.programs.size());
  for (std::size_t r = 0; r < got.programs.size(); ++r) {
    INFO("rank " << r);
    REQUIRE(program_text(got.programs[r]) == program_text(expected.programs[r]));
    REQUIRE(got.programs[r] == expected.programs[r]);  // buffer ids too
  }
  REQUIRE(got == expected);
}

ComputeOrder hand_order(std::vector<std::vector<std::string>> ranks, int m, std::vector<int> placement) {
  ComputeOrder order;
  order.name = "hand";
  order.num_ranks = static_cast<int>(ranks.size());
  order.num_stages = static_cast<int>(placement.size());
  order.num_micro_batches = m;
  order.stage_to_rank = std::move(placement);
  for (const auto& rank : ranks) {
    order.per_rank.emplace_back();
    for (const auto& text : rank) order.per_rank.back().push_back(parse_action(text));
  }
  return order;
}

std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("lower gives what the passes give one after the other, for every compute-order generator") {
  using MakeOrder = ComputeOrder (*)(const ScheduleParams&);
  const std::pair<MakeOrder, std::vector<ScheduleParams>> cases[] = {
      {gpipe_order, {params(1, 3), params(4, 4), params(3, 7)}},
      {one_f_one_b_order, {params(1, 2), params(4, 4), params(4, 9)}},
      {interleaved_1f1b_order, {params(2, 2, 2, true), params(4, 8), params(4, 12, 3, true), params(8, 16, 4, true)}},
      {looped_bfs_order, {params(1, 3, 2, true), params(4, 8), params(3, 5, 3, true)}},
      {zb_h1_order, {params(1, 2), params(4, 4), params(4, 10)}},
      {zb_h2_order, {params(4, 4), params(4, 10)}},
      {zbv_order, {params(1, 2), params(4, 8), params(6, 12)}},
      {dualpipev_order, {params(2, 4), params(4, 10), params(8, 32)}},
  };
  for (const auto& [make_order, sizes] : cases)
    for (const ScheduleParams& size : sizes) require_same_lowering(make_order(size));
}

TEST_CASE("lower matches the passes on orders the generators never make") {
  SECTION("a forward repeated: transfers again, its load once") {
    require_same_lowering(hand_order({{"0F0", "0F0", "0B0"}, {"1F0", "1B0"}}, 1, {0, 1}));
  }
  SECTION("buffer ids given on one rank are kept, the other rank's are numbered") {
    ComputeOrder order = hand_order({{"0F0", "0F1", "0B0", "0B1"}, {"1F0", "1B0", "1F1", "1B1"}}, 2, {0, 1});
    for (Instruction& instr : order.per_rank[0]) instr.buffer = 7;
    require_same_lowering(order);
    REQUIRE(lower(order).programs[0][0][1].buffer == 7);
  }
  SECTION("inference gets no optimizer step; a rank without computes gets idle steps") {
    require_same_lowering(hand_order({{"0F0", "0F1"}, {"1F0", "1F1"}}, 2, {0, 1}));
    require_same_lowering(hand_order({{"0F0", "0B0"}, {}}, 1, {0}));
  }
}

TEST_CASE("lower refuses what the passes refuse, with the same message") {
  const ComputeOrder not_compute = hand_order({{"0F0", "0SEND_F0"}, {"1F0"}}, 1, {0, 1});
  const std::string message = error_of([&] { lower(not_compute); });
  REQUIRE(message == error_of([&] { lowered_pass_by_pass(not_compute); }));
  REQUIRE(message.find("rank 0, step 1") != std::string::npos);

  const ComputeOrder deadlock = hand_order({{"0B0", "0F0"}, {"1F0", "1B0"}}, 1, {0, 1});
  const std::string deadlock_message = error_of([&] { lower(deadlock); });
  REQUIRE(deadlock_message == error_of([&] { lowered_pass_by_pass(deadlock); }));
  REQUIRE(deadlock_message.find("rank 0, instruction 0B0") != std::string::npos);
}
