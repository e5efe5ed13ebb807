// The one place a torch.profiler name is parsed (traces/src/torch_profiler_actions.hpp), table
// by table: what a CPU span is from its name (a PP: action, a ProfilerStep#N, a single-stage
// class's "Forward i" / "Backward i", an autograd operator, a gloo/NCCL/c10d call, or any other
// operator) and the text after its prefix; a step's number and a single-stage pass's
// micro-batch (nothing, or -1, where the text is no number); a PP: action's kind, stage and
// micro-batch; a GPU kernel of NCCL's.
#include <catch2/catch.hpp>

#include <string_view>

#include "torch_profiler_actions.hpp"

using namespace pipescope::traces;
using namespace pipescope::traces::detail;

TEST_CASE("a torch span's name says its role once", "[torch_profiler_actions]") {
  struct Row {
    std::string_view name;
    SpanRole role;
    std::string_view argument;
  };
  const Row rows[] = {
      {"PP:0F1", SpanRole::Action, "0F1"},
      {"PP:(0F7;7B3)OVERLAP_F_B", SpanRole::Action, "(0F7;7B3)OVERLAP_F_B"},
      {"ProfilerStep#12", SpanRole::Step, "12"},
      {"Forward 3", SpanRole::SingleStageForward, "3"},
      {"Backward 0", SpanRole::SingleStageBackward, "0"},
      {"autograd::engine::evaluate_function: MmBackward0", SpanRole::AutogradOperator,
       "autograd::engine::evaluate_function: MmBackward0"},
      {"gloo:recv", SpanRole::TransportCall, "gloo:recv"},
      {"nccl:send", SpanRole::TransportCall, "nccl:send"},
      {"c10d::allreduce_", SpanRole::TransportCall, "c10d::allreduce_"},
      {"aten::mm", SpanRole::Operator, "aten::mm"},
      {"Forward", SpanRole::Operator, "Forward"},  // no space, no number: not a pass
      {"pp:0F1", SpanRole::Operator, "pp:0F1"},    // torch writes PP: in capitals
      {"", SpanRole::Operator, ""},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    CHECK(span_role(row.name) == row.role);
    CHECK(span_role_argument(row.name, row.role) == row.argument);
  }
}

TEST_CASE("a step's number and a single-stage pass's micro-batch come from the name", "[torch_profiler_actions]") {
  CHECK(step_number("ProfilerStep#7") == 7);
  CHECK_FALSE(step_number("ProfilerStep#x"));
  CHECK_FALSE(step_number("PP:0F7"));
  CHECK(single_stage_micro_batch("Forward 5") == 5);
  CHECK(single_stage_micro_batch("Backward 12") == 12);
  CHECK(single_stage_micro_batch("Backward i") == -1);
  CHECK(single_stage_micro_batch("aten::mm") == -1);
}

TEST_CASE("a PP: action parses into its kind, stage and micro-batch", "[torch_profiler_actions]") {
  const auto forward = parse_pp_action("2F3");
  REQUIRE(forward);
  CHECK(forward->kind == EventKind::Forward);
  CHECK(forward->stage == 2);
  CHECK(forward->micro_batch == 3);
  const auto receive = parse_pp_action("1RECV_B0");
  REQUIRE(receive);
  CHECK(receive->kind == EventKind::RecvGrad);
  const auto unshard = parse_pp_action("0UNSHARD");
  REQUIRE(unshard);
  CHECK(unshard->kind == EventKind::Unshard);
  CHECK(unshard->micro_batch == -1);
  const auto overlap = parse_pp_action("(0F7;7B3)OVERLAP_F_B");
  REQUIRE(overlap);
  CHECK(overlap->kind == EventKind::OverlapForwardBackward);
  CHECK(overlap->parts == "0F7;7B3");
  CHECK_FALSE(parse_pp_action("0TP_F1"));  // a simulated kind, not one torch writes
  CHECK_FALSE(parse_pp_action("xF1"));
}

TEST_CASE("an NCCL kernel is told by its name", "[torch_profiler_actions]") {
  CHECK(is_communication_kernel("ncclDevKernel_SendRecv"));
  CHECK(is_communication_kernel("ncclKernel_AllReduce_RING_LL_Sum_float"));
  CHECK_FALSE(is_communication_kernel("sm90_gemm"));
}
