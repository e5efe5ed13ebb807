// The lowering passes, one at a time, on small hand-worked schedules.
// - from_compute_order: one compute per step; refuses non-compute ops, stages on the wrong
//   rank and micro-batches out of range, naming rank, step and instruction.
// - add_data_loads: LOAD before each forward of the first and last stage only, once.
// - add_send_recv: 1F1B with p=2, m=1 gets 0SEND_F0 after 0F0, 1RECV_F0 before 1F0, 1SEND_B0
//   after 1B0 and 0RECV_B0 before 0B0; in V placement (p=2) the hand-over between stages 1
//   and 2 (both on rank 1) has no transfer.
// - group_steps: GPipe p=2, m=2 aligns to 6 = 2(m+p-1) steps with idle steps 2,3 on rank 0;
//   a deadlocking order is refused naming rank 0 and 0B0.
// - assign_buffers: 1F1B p=2, m=3 uses buffers 0,1,0 on rank 0 and 0,0,0 on rank 1.
// - add_optimizer_step, merge_backward, lower (full 1F1B p=2, m=2 listing) and
//   complete_schedule (compute-only file with idle steps keeps its 4 steps).
#include "test_generators_support.hpp"

using namespace pipescope;
using namespace test_support;

namespace {

ComputeOrder two_rank_order(std::vector<std::string> rank0, std::vector<std::string> rank1, int m,
                            std::vector<int> placement = {0, 1}) {
  ComputeOrder order;
  order.name = "hand";
  order.num_ranks = 2;
  order.num_stages = static_cast<int>(placement.size());
  order.num_micro_batches = m;
  order.stage_to_rank = placement;
  order.per_rank.resize(2);
  for (const auto& text : rank0) order.per_rank[0].push_back(parse_action(text));
  for (const auto& text : rank1) order.per_rank[1].push_back(parse_action(text));
  return order;
}

Program program_of(std::vector<std::vector<std::string>> steps) {
  Program program;
  for (const auto& step : steps) {
    Step parsed;
    for (const auto& text : step) parsed.push_back(parse_action(text));
    program.push_back(parsed);
  }
  return program;
}

using Texts = std::vector<std::string>;

}  // namespace

TEST_CASE("from_compute_order puts each compute in its own step", "[passes]") {
  const Schedule s = from_compute_order(two_rank_order({"0F0", "0B0"}, {"1F0", "1B0"}, 1));
  CHECK(s.name == "hand");
  CHECK(s.num_ranks == 2);
  CHECK(s.num_stages == 2);
  CHECK(s.stage_to_rank == std::vector<int>{0, 1});
  CHECK(program_text(s.programs[0]) == Texts{"0F0", "0B0"});
  CHECK(program_text(s.programs[1]) == Texts{"1F0", "1B0"});
}

TEST_CASE("from_compute_order refuses bad orders naming the place", "[passes]") {
  auto wrong_op = two_rank_order({"0F0", "0SEND_F0"}, {"1F0"}, 1);
  const std::string op_error = refusal([&] { from_compute_order(wrong_op); });
  CHECK_THAT(op_error, Catch::Contains("rank 0, step 1, instruction 0SEND_F0") &&
                           Catch::Contains("only F, B, I and W"));

  auto wrong_rank = two_rank_order({"0F0", "1F0"}, {}, 1);
  CHECK_THAT(refusal([&] { from_compute_order(wrong_rank); }),
             Catch::Contains("rank 0, step 1, instruction 1F0") && Catch::Contains("placed on rank 1"));

  auto bad_micro_batch = two_rank_order({"0F3"}, {}, 2);
  CHECK_THAT(refusal([&] { from_compute_order(bad_micro_batch); }),
             Catch::Contains("instruction 0F3") && Catch::Contains("micro-batch out of range 0..1"));

  auto missing_rank = two_rank_order({}, {}, 1);
  missing_rank.per_rank.pop_back();
  CHECK_THAT(refusal([&] { from_compute_order(missing_rank); }), Catch::Contains("1 rank orders for 2 ranks"));
}

TEST_CASE("add_data_loads loads inputs on the first stage and labels on the last", "[passes]") {
  ComputeOrder order;
  order.name = "gpipe3";
  order.num_ranks = order.num_stages = 3;
  order.num_micro_batches = 2;
  order.stage_to_rank = {0, 1, 2};
  order.per_rank = {{parse_action("0F0"), parse_action("0F1"), parse_action("0B0")},
                    {parse_action("1F0"), parse_action("1F1")},
                    {parse_action("2F0"), parse_action("2F1")}};
  Schedule s = from_compute_order(order);
  add_data_loads(s);
  CHECK(program_text(s.programs[0]) == Texts{"0LOAD0 0F0", "0LOAD1 0F1", "0B0"});
  CHECK(program_text(s.programs[1]) == Texts{"1F0", "1F1"});
  CHECK(program_text(s.programs[2]) == Texts{"2LOAD0 2F0", "2LOAD1 2F1"});

  const Schedule once = s;
  add_data_loads(s);
  CHECK(s == once);  // loads already present are not added twice

  ComputeOrder single = order;
  single.num_ranks = single.num_stages = 1;
  single.stage_to_rank = {0};
  single.per_rank = {{parse_action("0F0")}};
  Schedule one_stage = from_compute_order(single);
  add_data_loads(one_stage);
  CHECK(program_text(one_stage.programs[0]) == Texts{"0LOAD0 0F0"});
}

TEST_CASE("add_send_recv adds transfers only between stages on different ranks", "[passes]") {
  Schedule s = from_compute_order(two_rank_order({"0F0", "0B0"}, {"1F0", "1B0"}, 1));
  s.programs[0][0][0].buffer = 5;
  add_send_recv(s);
  CHECK(program_text(s.programs[0]) == Texts{"0F0 0SEND_F0", "0RECV_B0 0B0"});
  CHECK(program_text(s.programs[1]) == Texts{"1RECV_F0 1F0", "1B0 1SEND_B0"});
  CHECK(s.programs[0][0][1].peer_stage == kNone);  // the default neighbour
  CHECK(s.programs[0][0][1].buffer == 5);          // the buffer of the value it carries

  const Schedule once = s;
  add_send_recv(s);
  CHECK(s == once);

  // V placement, p = 2: rank 0 holds stages 0 and 3, rank 1 holds 1 and 2.
  Schedule v = from_compute_order(
      two_rank_order({"0F0", "3F0", "3B0", "0B0"}, {"1F0", "2F0", "2B0", "1B0"}, 1, v_placement(2)));
  add_send_recv(v);
  CHECK(program_text(v.programs[0]) == Texts{"0F0 0SEND_F0", "3RECV_F0 3F0", "3B0 3SEND_B0", "0RECV_B0 0B0"});
  CHECK(program_text(v.programs[1]) == Texts{"1RECV_F0 1F0", "2F0 2SEND_F0", "2RECV_B0 2B0", "1B0 1SEND_B0"});
}

TEST_CASE("add_send_recv splits transfers around split backward", "[passes]") {
  Schedule s = from_compute_order(two_rank_order({"0F0", "0I0", "0W0"}, {"1F0", "1I0", "1W0"}, 1));
  add_send_recv(s);
  CHECK(program_text(s.programs[0]) == Texts{"0F0 0SEND_F0", "0RECV_B0 0I0", "0W0"});
  CHECK(program_text(s.programs[1]) == Texts{"1RECV_F0 1F0", "1I0 1SEND_B0", "1W0"});
}

TEST_CASE("group_steps aligns ranks on the unit-time dry run", "[passes]") {
  Schedule s = from_compute_order(two_rank_order({"0F0", "0F1", "0B0", "0B1"}, {"1F0", "1F1", "1B0", "1B1"}, 2));
  add_send_recv(s);
  group_steps(s);
  CHECK(program_text(s.programs[0]) ==
        Texts{"0F0 0SEND_F0", "0F1 0SEND_F1", ".", ".", "0RECV_B0 0B0", "0RECV_B1 0B1"});
  CHECK(program_text(s.programs[1]) ==
        Texts{".", "1RECV_F0 1F0", "1RECV_F1 1F1", "1B0 1SEND_B0", "1B1 1SEND_B1", "."});
}

TEST_CASE("group_steps joins receives, compute and sends that sit in separate steps", "[passes]") {
  Schedule s = from_compute_order(two_rank_order({}, {}, 1));
  s.programs[0] = program_of({{"0F0"}, {"0SEND_F0"}, {}, {"0RECV_B0"}, {"0B0"}});
  s.programs[1] = program_of({{"1RECV_F0"}, {"1F0"}, {"1B0"}, {"1SEND_B0"}});
  group_steps(s);
  CHECK(program_text(s.programs[0]) == Texts{"0F0 0SEND_F0", ".", ".", "0RECV_B0 0B0"});
  CHECK(program_text(s.programs[1]) == Texts{".", "1RECV_F0 1F0", "1B0 1SEND_B0", "."});
}

TEST_CASE("group_steps refuses orders that deadlock, naming the stuck instruction", "[passes]") {
  // Rank 0 wants its backward before its forward; rank 1 waits for that forward.
  Schedule s = from_compute_order(two_rank_order({"0B0", "0F0"}, {"1F0", "1B0"}, 1));
  CHECK_THAT(refusal([&] { group_steps(s); }),
             Catch::Contains("rank 0, instruction 0B0") && Catch::Contains("deadlock"));
}

TEST_CASE("assign_buffers reuses the lowest free buffer per stage", "[passes]") {
  // 1F1B p=2 m=3: rank 0 runs F0 F1 B0 F2 B1 B2, so micro-batch 2 reuses buffer 0; rank 1
  // runs F B F B F B and needs one buffer.
  const Schedule s = lower(one_f_one_b_order(params(2, 3)));
  std::map<std::pair<int, int>, std::set<int>> buffers;  // (rank, micro-batch) -> ids used
  for (int r = 0; r < 2; ++r)
    for (const Step& step : s.programs[r])
      for (const Instruction& instr : step)
        if (needs_micro_batch(instr.op)) buffers[{r, instr.micro_batch}].insert(instr.buffer);
  CHECK(buffers[{0, 0}] == std::set<int>{0});
  CHECK(buffers[{0, 1}] == std::set<int>{1});
  CHECK(buffers[{0, 2}] == std::set<int>{0});
  for (int i = 0; i < 3; ++i) CHECK(buffers[{1, i}] == std::set<int>{0});

  // Ids already present (from a file) are kept as they are.
  Schedule given = from_compute_order(two_rank_order({"0F0", "0F1"}, {"1F0"}, 2));
  given.programs[0][1][0].buffer = 7;
  assign_buffers(given);
  CHECK(given.programs[0][0][0].buffer == kNone);
  CHECK(given.programs[0][1][0].buffer == 7);
  CHECK(given.programs[1][0][0].buffer == 0);
}

TEST_CASE("add_optimizer_step ends training schedules, once per stage", "[passes]") {
  // Loop placement p=2, v=2: rank 0 holds stages 0 and 2.
  Schedule s = from_compute_order(two_rank_order({"0F0", "2F0", "2B0", "0B0"}, {"1F0", "3F0", "3B0", "1B0"}, 1,
                                                 loop_placement(2, 2)));
  add_optimizer_step(s);
  CHECK(program_text(s.programs[0]).back() ==
        "0B0 0REDUCE_TIED 2REDUCE_TIED 0REDUCE_GRAD 2REDUCE_GRAD 0OPTIMIZER 2OPTIMIZER");
  CHECK(program_text(s.programs[1]).back() ==
        "1B0 1REDUCE_TIED 3REDUCE_TIED 1REDUCE_GRAD 3REDUCE_GRAD 1OPTIMIZER 3OPTIMIZER");
  const Schedule once = s;
  add_optimizer_step(s);
  CHECK(s == once);

  Schedule inference = from_compute_order(two_rank_order({"0F0"}, {"1F0"}, 1));
  add_optimizer_step(inference);
  CHECK(inference.instruction_count() == 2);
}

TEST_CASE("merge_backward joins an input pass with its own weight pass", "[passes]") {
  Schedule s = from_compute_order(two_rank_order({"0F0", "0I0", "0W0"}, {"1F0", "1I0", "1W0"}, 1));
  add_send_recv(s);
  s.programs[0].insert(s.programs[0].begin() + 1, Step{});  // an idle step survives
  merge_backward(s);
  CHECK(program_text(s.programs[0]) == Texts{"0F0 0SEND_F0", ".", "0RECV_B0 0B0"});
  CHECK(program_text(s.programs[1]) == Texts{"1RECV_F0 1F0", "1B0 1SEND_B0"});

  // Not adjacent, or not the same micro-batch: nothing merges.
  ComputeOrder apart;
  apart.name = "apart";
  apart.num_ranks = apart.num_stages = 1;
  apart.num_micro_batches = 2;
  apart.stage_to_rank = {0};
  apart.per_rank = {{parse_action("0F0"), parse_action("0F1"), parse_action("0I0"), parse_action("0I1"),
                     parse_action("0W0"), parse_action("0W1")}};
  Schedule kept = from_compute_order(apart);
  const Schedule before = kept;
  merge_backward(kept);
  CHECK(kept == before);
}

TEST_CASE("lower produces the full 1F1B listing for p=2, m=2", "[passes]") {
  const Schedule s = lower(one_f_one_b_order(params(2, 2)));
  CHECK(s.name == "1f1b");
  CHECK(program_text(s.programs[0]) == Texts{"0LOAD0 0F0 0SEND_F0", "0LOAD1 0F1 0SEND_F1", ".", "0RECV_B0 0B0", ".",
                                             "0RECV_B1 0B1 0REDUCE_TIED 0REDUCE_GRAD 0OPTIMIZER"});
  CHECK(program_text(s.programs[1]) == Texts{".", "1LOAD0 1RECV_F0 1F0", "1B0 1SEND_B0", "1LOAD1 1RECV_F1 1F1",
                                             "1B1 1SEND_B1", "1REDUCE_TIED 1REDUCE_GRAD 1OPTIMIZER"});
  CHECK(s.programs[0][1][1].buffer == 1);  // 0F1 while micro-batch 0 still holds buffer 0
  CHECK(s.programs[1][3][2].buffer == 0);
}

TEST_CASE("complete_schedule fills a compute-only file and keeps its steps", "[passes]") {
  Schedule s = from_compute_order(two_rank_order({}, {}, 1));
  s.name = "file:x.csv";
  s.programs[0] = program_of({{"0F0"}, {}, {}, {"0B0"}});
  s.programs[1] = program_of({{}, {"1F0"}, {"1B0"}, {}});
  complete_schedule(s);
  CHECK(program_text(s.programs[0]) ==
        Texts{"0LOAD0 0F0 0SEND_F0", ".", ".", "0RECV_B0 0B0 0REDUCE_TIED 0REDUCE_GRAD 0OPTIMIZER"});
  CHECK(program_text(s.programs[1]) ==
        Texts{".", "1LOAD0 1RECV_F0 1F0", "1B0 1SEND_B0", "1REDUCE_TIED 1REDUCE_GRAD 1OPTIMIZER"});

  // A partial file: the send it has is kept where it is and not doubled.
  Schedule partial = from_compute_order(two_rank_order({}, {}, 1));
  partial.programs[0] = program_of({{"0F0"}, {"0SEND_F0"}});
  partial.programs[1] = program_of({{"1F0"}});
  complete_schedule(partial);
  CHECK(program_text(partial.programs[0]) == Texts{"0LOAD0 0F0", "0SEND_F0"});
  CHECK(program_text(partial.programs[1]) == Texts{"1LOAD0 1RECV_F0 1F0"});

  Schedule bad = from_compute_order(two_rank_order({}, {}, 1));
  bad.programs[1] = program_of({{}, {"1F4"}});
  CHECK_THAT(refusal([&] { complete_schedule(bad); }),
             Catch::Contains("rank 1, step 1, instruction 1F4") && Catch::Contains("micro-batch out of range"));
}
