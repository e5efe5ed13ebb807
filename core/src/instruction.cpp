#include "pipescope/core/instruction.hpp"

#include <array>
#include <cctype>
#include <charconv>

#include "pipescope/core/errors.hpp"

namespace pipescope {
namespace {

struct OpNames {
  Op op;
  std::string_view name;
  std::string_view action;
};

constexpr std::array<OpNames, kNumOps> kOps{{
    {Op::LoadMicroBatch, "LoadMicroBatch", "LOAD"},
    {Op::ForwardPass, "ForwardPass", "F"},
    {Op::BackwardPass, "BackwardPass", "B"},
    {Op::BackwardInput, "BackwardInput", "I"},
    {Op::BackwardWeight, "BackwardWeight", "W"},
    {Op::SendActivation, "SendActivation", "SEND_F"},
    {Op::RecvActivation, "RecvActivation", "RECV_F"},
    {Op::SendGrad, "SendGrad", "SEND_B"},
    {Op::RecvGrad, "RecvGrad", "RECV_B"},
    {Op::ReduceTiedGrads, "ReduceTiedGrads", "REDUCE_TIED"},
    {Op::ReduceGrads, "ReduceGrads", "REDUCE_GRAD"},
    {Op::OptimizerStep, "OptimizerStep", "OPTIMIZER"},
    {Op::WaitSendActivation, "WaitSendActivation", "WAIT_SEND_F"},
    {Op::WaitSendGrad, "WaitSendGrad", "WAIT_SEND_B"},
    {Op::WaitReduceGrads, "WaitReduceGrads", "WAIT_REDUCE_GRAD"},
    {Op::Unshard, "Unshard", "UNSHARD"},
    {Op::Reshard, "Reshard", "RESHARD"},
}};

const OpNames& names_of(Op op) { return kOps[static_cast<std::size_t>(op)]; }

}  // namespace

std::string_view op_name(Op op) { return names_of(op).name; }

std::optional<Op> op_from_name(std::string_view name) {
  for (const auto& entry : kOps)
    if (entry.name == name) return entry.op;
  return std::nullopt;
}

std::string_view op_action_type(Op op) { return names_of(op).action; }

std::optional<Op> op_from_action_type(std::string_view type) {
  for (const auto& entry : kOps)
    if (entry.action == type) return entry.op;
  return std::nullopt;
}

bool is_compute(Op op) {
  return op == Op::ForwardPass || op == Op::BackwardPass || op == Op::BackwardInput ||
         op == Op::BackwardWeight;
}
bool is_send(Op op) { return op == Op::SendActivation || op == Op::SendGrad; }
bool is_recv(Op op) { return op == Op::RecvActivation || op == Op::RecvGrad; }
bool is_p2p(Op op) { return is_send(op) || is_recv(op); }
bool is_backward(Op op) { return op == Op::BackwardPass || op == Op::BackwardInput; }
bool needs_micro_batch(Op op) {
  return op != Op::ReduceTiedGrads && op != Op::ReduceGrads && op != Op::OptimizerStep &&
         op != Op::WaitReduceGrads && !is_sharding(op);
}
bool is_wait_send(Op op) { return op == Op::WaitSendActivation || op == Op::WaitSendGrad; }
bool is_wait(Op op) { return is_wait_send(op) || op == Op::WaitReduceGrads; }
bool is_sharding(Op op) { return op == Op::Unshard || op == Op::Reshard; }
Op waited_send(Op wait_op) { return wait_op == Op::WaitSendActivation ? Op::SendActivation : Op::SendGrad; }

int resolved_peer_stage(const Instruction& instr) {
  if (instr.peer_stage != kNone) return instr.peer_stage;
  switch (instr.op) {
    case Op::SendActivation: return instr.stage + 1;
    case Op::RecvActivation: return instr.stage - 1;
    case Op::SendGrad: return instr.stage - 1;
    case Op::RecvGrad: return instr.stage + 1;
    default: return kNone;
  }
}

std::string to_string(const Instruction& instr) {
  std::string text = std::to_string(instr.stage);
  text += op_action_type(instr.op);
  if (instr.micro_batch != kNone) text += std::to_string(instr.micro_batch);
  return text;
}

Instruction parse_action(std::string_view text) {
  auto fail = [&](std::string_view why) -> Instruction {
    throw ScheduleError("bad action '" + std::string(text) + "': " + std::string(why));
  };
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0) return fail("expected a stage number first");
  std::size_t j = i;
  while (j < text.size() && (std::isupper(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
  if (j == i) return fail("expected an action type after the stage");
  const std::string_view type = text.substr(i, j - i);
  const auto op = op_from_action_type(type);
  if (!op) return fail("unknown action type '" + std::string(type) + "'");
  Instruction instr;
  instr.op = *op;
  auto parse_int = [&](std::string_view digits, int& out) {
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
    if (ec != std::errc() || ptr != digits.data() + digits.size()) fail("number out of range");
  };
  parse_int(text.substr(0, i), instr.stage);
  const std::string_view rest = text.substr(j);
  if (rest.empty()) {
    if (needs_micro_batch(instr.op)) return fail("missing micro-batch number");
    return instr;
  }
  for (char c : rest)
    if (!std::isdigit(static_cast<unsigned char>(c))) return fail("trailing characters after the action type");
  // torch's per-stage actions never carry one (pipescope's older ones are read leniently).
  if (instr.op == Op::WaitReduceGrads || is_sharding(instr.op))
    return fail("a " + std::string(type) + " action takes no micro-batch number");
  parse_int(rest, instr.micro_batch);
  return instr;
}

std::vector<Instruction> parse_cell(std::string_view text) {
  constexpr std::string_view kOverlap = "OVERLAP_F_B";
  if (text.empty() || text.front() != '(') return {parse_action(text)};
  const std::size_t close = text.find(')');
  const std::size_t separator = text.find(';');
  if (close == std::string_view::npos || separator == std::string_view::npos || separator > close ||
      text.substr(close + 1) != kOverlap)
    throw ScheduleError("bad action '" + std::string(text) + "': expected (<forward>;<backward>)OVERLAP_F_B");
  // The runtime only overlaps a forward with a backward; anything else inside is not torch's.
  const Instruction forward = parse_action(text.substr(1, separator - 1));
  const Instruction backward = parse_action(text.substr(separator + 1, close - separator - 1));
  if (forward.op != Op::ForwardPass || !is_backward(backward.op))
    throw ScheduleError("bad action '" + std::string(text) + "': OVERLAP_F_B holds a forward, then a backward (F then B or I)");
  return {forward, backward};
}

}  // namespace pipescope
