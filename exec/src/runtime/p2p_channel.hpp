// The point-to-point transfers of the stages on this rank: SendActivation / SendGrad post
// their messages and return (the send watcher closes their events), RecvActivation / RecvGrad
// block until the tensors are in. A transfer between two stages of this rank is a no-op: the
// compute hands its tensors over in memory.
// With torch's semantics (a schedule from torch's CSV, SPEC.md section 4) a receive is posted
// where it stands and finished by the compute that needs it (finish_receives), and a send may
// be waited for at its WAIT_SEND_F/B (wait_sends); both still end by the end of the step.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "runtime/posted_receives.hpp"
#include "runtime/rank_context.hpp"
#include "runtime/send_watcher.hpp"
#include "runtime/shape_headers.hpp"
#include "runtime/step_recorder.hpp"

namespace pipescope::exec::runtime {

class PointToPoint {
 public:
  PointToPoint(RankContext& ctx, StepRecorder& recorder)
      : ctx_(ctx), recorder_(recorder), headers_(ctx), send_watcher_(ctx.options.timeout) {}

  // `torch_semantics`: receives are posted, not waited where they stand (see above).
  void begin_step(bool torch_semantics);
  void send(const Instruction& instr);
  void recv(const Instruction& instr);
  // The posted receives of one stage's micro-batch in one direction (activations for its
  // forward, gradients for its backward): waits until they are in. Nothing was posted with
  // pipescope's semantics, so nothing happens then.
  void finish_receives(int stage, int micro_batch, bool activation) { posted_.finish({stage, micro_batch, activation}); }
  // The end of the program: the receives no compute needed.
  void finish_all_receives() { posted_.finish_all(); }
  // WAIT_SEND_F / WAIT_SEND_B: waits until the sends of the stage's micro-batch in that
  // direction completed (none posted to another rank: nothing to wait for).
  void wait_sends(int stage, int micro_batch, bool activation);
  // Waits for every send of the step; throws TransportError naming the first that failed.
  void drain_sends() { send_watcher_.drain(); }

 private:
  // A receive's one message when its size is known before it arrives (declared shapes), and
  // what its bytes become in the micro-batch's state once they are in.
  struct PlannedMessage {
    at::Tensor buffer;
    std::function<void()> unpack;
  };
  // The stage's inputs (declared shapes) or the gradients of its outputs from the next stage;
  // nullopt for gradients when no output is floating-point (nothing comes back).
  PlannedMessage plan_activation(StageState& st, MicroBatchState& state);
  std::optional<PlannedMessage> plan_grads(MicroBatchState& state);
  // The receive as pipescope's semantics run it: blocks until every message is in.
  void receive_now(const Instruction& instr);
  // torch's: posts what can be posted now and leaves the rest to finish_receives.
  void post_receive(const Instruction& instr, int peer_stage);
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
  bool torch_semantics_ = false;
  PostedReceives posted_;
  // The latest send ticket of each (stage, micro-batch, activation), for wait_sends.
  std::map<std::tuple<int, int, bool>, std::uint64_t> send_tickets_;
  SendWatcher send_watcher_;  // last: its thread stops before the state it writes into goes
};

}  // namespace pipescope::exec::runtime
