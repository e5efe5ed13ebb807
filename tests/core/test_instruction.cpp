// Instructions round-trip through torch's action text form: "0F1", "2I3", "1SEND_F4",
// "0REDUCE_GRAD"; malformed text is refused with the text named.
#include <catch2/catch.hpp>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/instruction.hpp"

using namespace pipescope;

TEST_CASE("action text round-trips for every op") {
  for (int i = 0; i < kNumOps; ++i) {
    Instruction instr;
    instr.op = static_cast<Op>(i);
    instr.stage = 3;
    instr.micro_batch = needs_micro_batch(instr.op) ? 17 : kNone;
    const std::string text = to_string(instr);
    CHECK(parse_action(text) == instr);
    CHECK(op_from_name(op_name(instr.op)) == instr.op);
  }
}

TEST_CASE("torch spellings") {
  CHECK(to_string({Op::ForwardPass, 0, 1}) == "0F1");
  CHECK(to_string({Op::BackwardInput, 2, 3}) == "2I3");
  CHECK(to_string({Op::SendActivation, 1, 4}) == "1SEND_F4");
  CHECK(to_string({Op::RecvGrad, 12, 105}) == "12RECV_B105");
  CHECK(to_string({Op::ReduceGrads, 0}) == "0REDUCE_GRAD");
  CHECK(parse_action("3W7") == Instruction{Op::BackwardWeight, 3, 7});
}

TEST_CASE("malformed actions are refused with the text named") {
  for (const char* bad : {"", "F1", "0", "0X1", "0F", "0F1x", "0f1", "-1F2", "0F99999999999"}) {
    INFO(bad);
    try {
      parse_action(bad);
      FAIL("accepted");
    } catch (const ScheduleError& e) {
      CHECK(std::string(e.what()).find(std::string("'") + bad + "'") != std::string::npos);
    }
  }
}

TEST_CASE("default peers") {
  CHECK(resolved_peer_stage({Op::SendActivation, 2, 0}) == 3);
  CHECK(resolved_peer_stage({Op::RecvActivation, 2, 0}) == 1);
  CHECK(resolved_peer_stage({Op::SendGrad, 2, 0}) == 1);
  CHECK(resolved_peer_stage({Op::RecvGrad, 2, 0}) == 3);
  CHECK(resolved_peer_stage({Op::SendActivation, 2, 0, kNone, 5}) == 5);
}

TEST_CASE("torch's wait points, sharding ops and OVERLAP_F_B cells") {
  CHECK(parse_action("1WAIT_SEND_F4") == Instruction{Op::WaitSendActivation, 1, 4});
  CHECK(parse_action("0WAIT_SEND_B2") == Instruction{Op::WaitSendGrad, 0, 2});
  CHECK(parse_action("3WAIT_REDUCE_GRAD") == Instruction{Op::WaitReduceGrads, 3, kNone});
  CHECK(parse_action("2UNSHARD") == Instruction{Op::Unshard, 2, kNone});
  CHECK(parse_action("2RESHARD") == Instruction{Op::Reshard, 2, kNone});
  CHECK(waited_send(Op::WaitSendGrad) == Op::SendGrad);
  CHECK(parse_cell("(0F3;3B1)OVERLAP_F_B") ==
        std::vector<Instruction>{{Op::ForwardPass, 0, 3}, {Op::BackwardPass, 3, 1}});
  CHECK(parse_cell("3I1") == std::vector<Instruction>{{Op::BackwardInput, 3, 1}});
  for (const char* bad : {"(0F3;3B1)", "(0F3)OVERLAP_F_B", "(3B1;0F3)OVERLAP_F_B", "(0F3;3B1)OVERLAP_F_Bx", "(0F3;3X1)OVERLAP_F_B"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_cell(bad), ScheduleError);
  }
}
