// The kind of a trace event, typed: what work it was (a forward, a send of activations, the
// optimizer, ...). It is parsed from the event's name once, where a trace is read or an event
// is made (event_kind_from_name, event_kind_of), as torch's `_Action.from_str` parses an action;
// everything after switches on the kind and never matches names. A new kind of work is one
// enumerator here and one row of the table in event_kind.cpp (its name, lane and category).
#pragma once

#include <cstdint>
#include <string_view>

#include "pipescope/core/instruction.hpp"

namespace pipescope::traces {

// Lanes of a rank (the Chrome trace `tid`). The all-to-all of MoE layers has a lane of its own,
// so one micro-batch's dispatch and combine show beside another's compute and apart from the
// gradient reductions.
enum class Lane : int { Compute = 0, Send = 1, Recv = 2, Collective = 3, AllToAll = 4 };
// The lanes pipescope's own events take; lanes from kNumLanes on are a profiler's (operators,
// GPU streams).
inline constexpr int kNumLanes = 5;
// The lanes every rank's trace names, used or not (compute to collectives), so Perfetto shows the
// same rows for every rank; the all-to-all lane is named only where a rank has such events.
inline constexpr int kEveryRankLanes = 4;

enum class EventKind : std::uint8_t {
  Other,  // any other name: plain Chrome and profiler traces, whose names are anything
  Load,
  Forward,
  Backward,
  BackwardInput,
  BackwardWeight,
  SendActivation,
  RecvActivation,
  SendGrad,
  RecvGrad,
  ReduceGrad,
  ReduceTied,
  Optimizer,
  TensorParallelForward,  // a pass's tensor-parallel collectives (simulated)
  TensorParallelBackward,
  // torch's wait points and sharding actions (torch.profiler runs).
  WaitSendActivation,
  WaitSendGrad,
  WaitReduceGrad,
  Unshard,
  Reshard,
  OverlapForwardBackward,  // DualPipeV's forward and backward in one span
  // The all-to-all of a mixture-of-experts layer: tokens dispatched to their experts and
  // combined back, in the forward and in the backward (ppsim's and pprun's MoE traces).
  AllToAllDispatchForward,
  AllToAllCombineForward,
  AllToAllDispatchBackward,
  AllToAllCombineBackward,
};

// The kind a name stands for ("F", "SEND_B", "ALL_TO_ALL_DISPATCH_F", ...); Other for any other.
EventKind event_kind_from_name(std::string_view name);
// The kind of the event an instruction makes.
EventKind event_kind_of(Op op);

// The name a trace writes for the kind ("F", "RECV_B", ...); "" for Other.
std::string_view event_kind_name(EventKind kind);
// The lane its events take: the compute, send, receive, collectives or all-to-all lane.
Lane event_kind_lane(EventKind kind);
// The category written for its events when they have none: compute, p2p, collective, wait,
// sharding or other.
std::string_view event_kind_category(EventKind kind);

constexpr bool is_send(EventKind kind) { return kind == EventKind::SendActivation || kind == EventKind::SendGrad; }
constexpr bool is_receive(EventKind kind) { return kind == EventKind::RecvActivation || kind == EventKind::RecvGrad; }
constexpr bool is_transfer(EventKind kind) { return is_send(kind) || is_receive(kind); }
// A transfer of activations (forward, to the next stage) rather than of gradients.
constexpr bool carries_activation(EventKind kind) {
  return kind == EventKind::SendActivation || kind == EventKind::RecvActivation;
}
constexpr bool is_all_to_all(EventKind kind) {
  return kind == EventKind::AllToAllDispatchForward || kind == EventKind::AllToAllCombineForward ||
         kind == EventKind::AllToAllDispatchBackward || kind == EventKind::AllToAllCombineBackward;
}

}  // namespace pipescope::traces
