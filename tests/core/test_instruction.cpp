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
