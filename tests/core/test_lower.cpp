// `lower` builds the schedule in one walk; it must give exactly what the passes give run one
// after the other (from_compute_order, add_data_loads, add_send_recv, group_steps,
// assign_buffers, add_optimizer_step), instruction for instruction, buffer ids and idle steps
// included:
// - every compute-order generator at several sizes (1 rank, p = m, m > p, 3 and 4 chunks);
// - hand orders the generators never make: a forward repeated (the second gets its transfers
//   but no second load), buffer ids given on one rank only (kept there, numbered on the other),
//   inference (no optimizer step), a rank with no computes;
// - the same errors: a non-compute op names rank 0, step 1; a deadlock names rank 0 and 0B0.
// - lower_streamed hands over lower's programs one rank at a time (step numbers, idle steps and
//   all); moved from, it releases each rank's order; a consumer that takes no buffer ids gets
//   the order's. make_compute_order gives the order of the built-in schedules made from one,
//   nothing for DeepSpeed's and files, and make_schedule's errors.
#include "test_generators_support.hpp"

#include "pipescope/core/registry.hpp"

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

namespace {

// Rebuilds each rank's program from what lower_streamed hands over, and checks the order is
// released (or kept) as it goes.
class Collector final : public FlatProgramConsumer {
 public:
  Collector(const ComputeOrder* watched, bool buffers) : watched_(watched), buffers_(buffers) {}
  void begin(const Schedule& shell, std::size_t total) override {
    schedule = shell;
    total_instructions = total;
  }
  void program(const FlatProgram& flat) override {
    REQUIRE(flat.rank == next_rank_++);
    REQUIRE(flat.instructions.size() == flat.step_of.size());
    if (watched_ && flat.rank > 0) REQUIRE(watched_->per_rank[flat.rank - 1].capacity() == 0);
    Program& program = schedule.programs[flat.rank];
    program.resize(static_cast<std::size_t>(flat.num_steps));
    for (std::size_t i = 0; i < flat.instructions.size(); ++i) {
      if (i > 0) REQUIRE(flat.step_of[i] >= flat.step_of[i - 1]);
      program.at(static_cast<std::size_t>(flat.step_of[i])).push_back(flat.instructions[i]);
      ++handed_over;
    }
  }
  bool wants_buffers() const override { return buffers_; }

  Schedule schedule;
  std::size_t total_instructions = 0;
  std::size_t handed_over = 0;

 private:
  const ComputeOrder* watched_;
  bool buffers_;
  int next_rank_ = 0;
};

}  // namespace

TEST_CASE("lower_streamed hands over lower's programs one rank at a time") {
  for (const ComputeOrder& order : {interleaved_1f1b_order(params(4, 8, 2, true)), zbv_order(params(4, 8)),
                                    hand_order({{"0F0", "0B0"}, {}}, 1, {0})}) {
    INFO(order.name);
    const Schedule expected = lower(order);
    Collector kept(nullptr, true);
    lower_streamed(order, kept);
    REQUIRE(kept.schedule == expected);
    REQUIRE(kept.total_instructions == expected.instruction_count());
    REQUIRE(kept.handed_over == expected.instruction_count());

    ComputeOrder moved = order;
    Collector released(&moved, false);
    lower_streamed(std::move(moved), released);
    for (const auto& computes : moved.per_rank) REQUIRE(computes.capacity() == 0);
    // Without buffer ids the programs are the same but for them.
    Schedule unnumbered = expected;
    for (Program& program : unnumbered.programs)
      for (Step& step : program)
        for (Instruction& instr : step) instr.buffer = kNone;
    REQUIRE(released.schedule == unnumbered);
  }
}

TEST_CASE("make_compute_order gives the order a built-in schedule is lowered from") {
  const ComputeOrder order = *make_compute_order("interleaved-1f1b", params(4, 8, 2, true));
  REQUIRE(lower(order) == make_schedule("interleaved-1f1b", params(4, 8, 2, true)));
  REQUIRE_FALSE(make_compute_order("deepspeed-train", params(4, 8)));
  REQUIRE_FALSE(make_compute_order("file:does-not-matter.json", params(4, 8)));
  for (const char* name : {"1f1b", "no-such-schedule"}) {
    ScheduleParams bad = params(0, 8);
    const std::string expected = error_of([&] { make_schedule(name, bad); });
    REQUIRE(expected != "(no error)");
    REQUIRE(error_of([&] { make_compute_order(name, bad); }) == expected);
  }
}
