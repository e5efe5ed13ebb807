// The pipeline instruction set (SPEC.md section 3) as a small value type.
// Every tool speaks in these: generators emit them, the validator and simulator read them,
// the executor interprets them. The text form is torch.distributed.pipelining's `_Action`.
//
// Two communication semantics share these ops (Schedule::communication says which one a
// schedule has; docs/TORCH.md puts them side by side):
//  - pipescope's own (SPEC section 3): a receive waits where it stands until its send is posted;
//    a send is posted and does not wait. WaitSend*/WaitReduceGrads never appear.
//  - torch's (schedules read from torch.distributed.pipelining CSVs): a receive only posts the
//    receive; the first compute that needs its data waits for it. A send is waited at its
//    WaitSendActivation/WaitSendGrad, or at the end of the step. ReduceGrads is per stage and may
//    stand anywhere in a program after all of that stage's weight gradients; WaitReduceGrads
//    waits for it. Unshard/Reshard are FSDP's parameter (un)sharding: no work when parameters
//    are not sharded (pipescope never shards them). torch's `(aFi;bBj)OVERLAP_F_B` cell is read
//    as its two actions in order: torch 2.15's runtime runs them one after the other unless a
//    custom overlap callback is registered.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipescope {

enum class Op : std::uint8_t {
  LoadMicroBatch,
  ForwardPass,
  BackwardPass,    // full backward: input and weight gradients
  BackwardInput,   // gradient for the stage input only (zero-bubble "B")
  BackwardWeight,  // gradient for the stage weights only (zero-bubble "W")
  SendActivation,
  RecvActivation,
  SendGrad,
  RecvGrad,
  ReduceTiedGrads,
  ReduceGrads,
  OptimizerStep,
  // torch's wait points and sharding ops (torch semantics only; see the top of this file).
  WaitSendActivation,  // "WAIT_SEND_F": waits until the SendActivation of (stage, mb) completed
  WaitSendGrad,        // "WAIT_SEND_B": waits until the SendGrad of (stage, mb) completed
  WaitReduceGrads,     // "WAIT_REDUCE_GRAD": waits until the stage's ReduceGrads completed
  Unshard,             // "UNSHARD": gathers sharded parameters; no work when unsharded
  Reshard,             // "RESHARD": frees gathered parameters; no work when unsharded
};
inline constexpr int kNumOps = 17;

// Sentinel for "not set" in the integer fields below.
inline constexpr int kNone = -1;

struct Instruction {
  Op op = Op::ForwardPass;
  int stage = 0;            // the (virtual) stage the instruction works for
  int micro_batch = kNone;  // required on per-micro-batch ops
  int buffer = kNone;       // DeepSpeed buffer id, optional
  int peer_stage = kNone;   // other end of a send/receive; kNone means the default neighbour
  // On a ForwardPass: it and the next backward compute of its rank form one overlapped step
  // (DualPipe's "F&B", torch's OVERLAP_F_B), in which one micro-batch's communication (the
  // experts' all-to-all) runs while the other's compute does. Set by the generators that design
  // such steps (dualpipev) and by the torch CSV reader on an OVERLAP_F_B cell's forward; the
  // simulator and pprun's runtime read it. No other file format holds it, and it is not part of
  // what the instruction does: equality ignores it, so a schedule written and read back equals
  // the generated one.
  bool overlaps_next_backward = false;

  friend bool operator==(const Instruction& a, const Instruction& b) {
    return a.op == b.op && a.stage == b.stage && a.micro_batch == b.micro_batch && a.buffer == b.buffer &&
           a.peer_stage == b.peer_stage;
  }
};

// The op's name as SPEC.md writes it ("ForwardPass") and back.
std::string_view op_name(Op op);
std::optional<Op> op_from_name(std::string_view name);

// The torch action type ("F", "I", "W", "B", "SEND_F", ...). Ops torch does not model get
// pipescope's own names: "LOAD", "REDUCE_TIED", "OPTIMIZER" (also the trace event names).
std::string_view op_action_type(Op op);
std::optional<Op> op_from_action_type(std::string_view type);

// Inline: the passes, the validator and the simulator ask these of every instruction of a
// schedule, millions for the large ones, and a call each showed in profiles.
// ForwardPass, BackwardPass, BackwardInput, BackwardWeight.
constexpr bool is_compute(Op op) {
  return op == Op::ForwardPass || op == Op::BackwardPass || op == Op::BackwardInput || op == Op::BackwardWeight;
}
constexpr bool is_send(Op op) { return op == Op::SendActivation || op == Op::SendGrad; }
constexpr bool is_recv(Op op) { return op == Op::RecvActivation || op == Op::RecvGrad; }
constexpr bool is_p2p(Op op) { return is_send(op) || is_recv(op); }  // any of the four send/receive ops
constexpr bool is_backward(Op op) { return op == Op::BackwardPass || op == Op::BackwardInput; }
constexpr bool is_wait_send(Op op) { return op == Op::WaitSendActivation || op == Op::WaitSendGrad; }
constexpr bool is_wait(Op op) {
  return is_wait_send(op) || op == Op::WaitReduceGrads;
}  // the two above and WaitReduceGrads
constexpr bool is_sharding(Op op) { return op == Op::Unshard || op == Op::Reshard; }
// All but the end-of-batch collectives, WaitReduceGrads and (Un|Re)shard.
constexpr bool needs_micro_batch(Op op) {
  return op != Op::ReduceTiedGrads && op != Op::ReduceGrads && op != Op::OptimizerStep && op != Op::WaitReduceGrads &&
         !is_sharding(op);
}
// For a WaitSend*: the send it waits for (WaitSendActivation -> SendActivation, ...).
Op waited_send(Op wait_op);

// For a send/receive: the peer stage, resolving kNone to the default neighbour (the next
// stage for activations, the previous one for gradients).
int resolved_peer_stage(const Instruction& instr);

// Round-trip text form as torch writes it: "0F1", "2I3", "1SEND_F4", "0REDUCE_GRAD".
// Buffer and a non-default peer are not part of torch's form and are not written.
std::string to_string(const Instruction& instr);
// Parses the text form of one action; throws ScheduleError naming the text when it is malformed.
Instruction parse_action(std::string_view text);
// Parses one torch cell: an action, or "(0F3;3B1)OVERLAP_F_B", which gives its two actions in
// order (torch 2.15's runtime runs them one after the other).
std::vector<Instruction> parse_cell(std::string_view text);

}  // namespace pipescope
