// The point-to-point transfers of the stages on this rank: SendActivation / SendGrad post
// their messages and return (the send watcher closes their events), RecvActivation / RecvGrad
// block until the tensors are in. A transfer between two stages of this rank is a no-op: the
// compute hands its tensors over in memory.
#pragma once

#include <vector>

#include "runtime/rank_context.hpp"
#include "runtime/send_watcher.hpp"
#include "runtime/shape_headers.hpp"
#include "runtime/step_recorder.hpp"

namespace pipescope::exec::runtime {

class PointToPoint {
 public:
  PointToPoint(RankContext& ctx, StepRecorder& recorder)
      : ctx_(ctx), recorder_(recorder), headers_(ctx), send_watcher_(ctx.options.timeout) {}

  void begin_step() { headers_.clear(); }
  void send(const Instruction& instr);
  void recv(const Instruction& instr);
  // Waits for every send of the step; throws TransportError naming the first that failed.
  void drain_sends() { send_watcher_.drain(); }

 private:
  // Message tags: one per (sender, receiver, direction), so that a channel's transfers are
  // matched in order and never with another channel's.
  int tag(int from_stage, int to_stage, bool activation) const;
  // The skip tensors that travel on the transfers from `from_stage` to `to_stage` (not in memory).
  std::vector<const SkipRoute*> transported_skips(int from_stage, int to_stage) const;
  // The messages of the stage's own tensors (outputs or input gradients) to the adjacent stage.
  std::int64_t append_main_messages(TensorList& messages, const Instruction& instr, MicroBatchState& state, int peer_stage,
                                    bool activation);
  std::int64_t append_skip_messages(TensorList& messages, const Instruction& instr, MicroBatchState& state, int peer_stage,
                                    bool activation, const std::vector<const SkipRoute*>& skips);
  // The stage's inputs from the previous stage; returns the bytes received.
  std::int64_t receive_activation(StageState& st, MicroBatchState& state, int peer_stage, const Receive& receive, int peer);
  // Gradients for `tensors` (the floating-point ones, in order) as one byte message; an empty
  // list when none is floating-point (nothing is sent then). `bytes` adds what was received.
  TensorList receive_grads_for(const TensorList& tensors, const Receive& receive, std::int64_t& bytes);
  // Receives the skip tensors (forward) or their gradients (backward); returns the messages.
  std::size_t receive_skips(const Instruction& instr, MicroBatchState& state, int peer_stage, bool activation,
                            const std::vector<const SkipRoute*>& skips, const Receive& receive, int peer, std::int64_t& bytes);

  RankContext& ctx_;
  StepRecorder& recorder_;
  ShapeHeaders headers_;
  SendWatcher send_watcher_;  // last: its thread stops before the state it writes into goes
};

}  // namespace pipescope::exec::runtime
