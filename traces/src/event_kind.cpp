#include "pipescope/traces/event_kind.hpp"

#include <array>

namespace pipescope::traces {

namespace {

struct EventKindRow {
  EventKind kind;
  std::string_view name;  // as a trace writes it (SPEC.md section 5; torch's action types)
  Lane lane;
  std::string_view category;
};

// The one place a name becomes a kind. Row i holds the kind with value i.
constexpr std::array<EventKindRow, 25> kEventKinds = {{
    {EventKind::Other, "", Lane::Compute, "other"},
    {EventKind::Load, "LOAD", Lane::Compute, "compute"},
    {EventKind::Forward, "F", Lane::Compute, "compute"},
    {EventKind::Backward, "B", Lane::Compute, "compute"},
    {EventKind::BackwardInput, "I", Lane::Compute, "compute"},
    {EventKind::BackwardWeight, "W", Lane::Compute, "compute"},
    {EventKind::SendActivation, "SEND_F", Lane::Send, "p2p"},
    {EventKind::RecvActivation, "RECV_F", Lane::Recv, "p2p"},
    {EventKind::SendGrad, "SEND_B", Lane::Send, "p2p"},
    {EventKind::RecvGrad, "RECV_B", Lane::Recv, "p2p"},
    {EventKind::ReduceGrad, "REDUCE_GRAD", Lane::Collective, "collective"},
    {EventKind::ReduceTied, "REDUCE_TIED", Lane::Collective, "collective"},
    {EventKind::Optimizer, "OPTIMIZER", Lane::Collective, "collective"},
    {EventKind::TensorParallelForward, "TP_F", Lane::Collective, "collective"},
    {EventKind::TensorParallelBackward, "TP_B", Lane::Collective, "collective"},
    {EventKind::WaitSendActivation, "WAIT_SEND_F", Lane::Compute, "wait"},
    {EventKind::WaitSendGrad, "WAIT_SEND_B", Lane::Compute, "wait"},
    {EventKind::WaitReduceGrad, "WAIT_REDUCE_GRAD", Lane::Compute, "wait"},
    {EventKind::Unshard, "UNSHARD", Lane::Compute, "sharding"},
    {EventKind::Reshard, "RESHARD", Lane::Compute, "sharding"},
    {EventKind::OverlapForwardBackward, "OVERLAP_F_B", Lane::Compute, "other"},
    {EventKind::AllToAllDispatchForward, "ALL_TO_ALL_DISPATCH_F", Lane::AllToAll, "collective"},
    {EventKind::AllToAllCombineForward, "ALL_TO_ALL_COMBINE_F", Lane::AllToAll, "collective"},
    {EventKind::AllToAllDispatchBackward, "ALL_TO_ALL_DISPATCH_B", Lane::AllToAll, "collective"},
    {EventKind::AllToAllCombineBackward, "ALL_TO_ALL_COMBINE_B", Lane::AllToAll, "collective"},
}};

constexpr bool rows_in_enum_order() {
  for (std::size_t i = 0; i < kEventKinds.size(); ++i)
    if (static_cast<std::size_t>(kEventKinds[i].kind) != i) return false;
  return true;
}
static_assert(rows_in_enum_order(), "kEventKinds: row i must hold the kind with value i");
static_assert(kEventKinds.back().kind == EventKind::AllToAllCombineBackward, "kEventKinds: a kind has no row");

const EventKindRow& event_kind_row(EventKind kind) {
  const auto i = static_cast<std::size_t>(kind);
  return i < kEventKinds.size() ? kEventKinds[i] : kEventKinds[0];
}

}  // namespace

EventKind event_kind_from_name(std::string_view name) {
  if (name.empty()) return EventKind::Other;
  for (std::size_t i = 1; i < kEventKinds.size(); ++i)
    if (kEventKinds[i].name == name) return kEventKinds[i].kind;
  return EventKind::Other;
}

EventKind event_kind_of(Op op) {
  switch (op) {
    case Op::LoadMicroBatch: return EventKind::Load;
    case Op::ForwardPass: return EventKind::Forward;
    case Op::BackwardPass: return EventKind::Backward;
    case Op::BackwardInput: return EventKind::BackwardInput;
    case Op::BackwardWeight: return EventKind::BackwardWeight;
    case Op::SendActivation: return EventKind::SendActivation;
    case Op::RecvActivation: return EventKind::RecvActivation;
    case Op::SendGrad: return EventKind::SendGrad;
    case Op::RecvGrad: return EventKind::RecvGrad;
    case Op::ReduceTiedGrads: return EventKind::ReduceTied;
    case Op::ReduceGrads: return EventKind::ReduceGrad;
    case Op::OptimizerStep: return EventKind::Optimizer;
    case Op::WaitSendActivation: return EventKind::WaitSendActivation;
    case Op::WaitSendGrad: return EventKind::WaitSendGrad;
    case Op::WaitReduceGrads: return EventKind::WaitReduceGrad;
    case Op::Unshard: return EventKind::Unshard;
    case Op::Reshard: return EventKind::Reshard;
  }
  return EventKind::Other;
}

std::string_view event_kind_name(EventKind kind) { return event_kind_row(kind).name; }
Lane event_kind_lane(EventKind kind) { return event_kind_row(kind).lane; }
std::string_view event_kind_category(EventKind kind) { return event_kind_row(kind).category; }

}  // namespace pipescope::traces
