// Checks along each rank's program order. A stage lives on one rank, so everything about a
// (stage, micro-batch) happens on one rank and "earlier in program order" is exact; what
// crosses ranks (sends and receives) is left to the channel and deadlock checks.
// Messages are only put together once a problem is found: the walk itself allocates nothing.
#include <cstdint>
#include <string>
#include <vector>

#include "checks.hpp"

namespace pipescope::validation {
namespace {

// What has happened to one (stage, micro-batch) so far, as bits.
enum Seen : std::uint8_t {
  kLoaded = 1,
  kForward = 2,
  kBackwardFull = 4,   // BackwardPass
  kBackwardInput = 8,  // BackwardInput
  kWeight = 16,
  kActivationFromPrevious = 32,  // RecvActivation from stage s-1
  kGradFromNext = 64,            // RecvGrad from stage s+1
};
constexpr std::uint8_t kAnyBackward = kBackwardFull | kBackwardInput;

// The sends of one (stage, micro-batch) and torch's waits for them, as bits.
enum SendSeen : std::uint8_t { kActivationSent = 1, kGradSent = 2, kActivationWaited = 4, kGradWaited = 8 };

class ProgramOrderChecker {
 public:
  ProgramOrderChecker(const FlatSchedule& flat, bool training)
      : flat_(flat),
        schedule_(*flat.schedule),
        training_(training),
        m_(schedule_.num_micro_batches),
        pairs_(static_cast<std::size_t>(schedule_.num_stages) * schedule_.num_micro_batches),
        seen_(pairs_, 0),
        load_(pairs_, -1),
        forward_(pairs_, -1),
        backward_(pairs_, -1),
        weight_(pairs_, -1),
        backward_done_(static_cast<std::size_t>(schedule_.num_stages), 0),
        stage_has_loads_(static_cast<std::size_t>(schedule_.num_stages), 0),
        collective_(static_cast<std::size_t>(schedule_.num_stages) * 3, -1),
        sends_(pairs_, 0) {
    for (const Node& in : flat_.node)
      if (in.op == Op::LoadMicroBatch) stage_has_loads_[in.stage] = 1;
  }

  Problem walk() {
    const Vertex n = static_cast<Vertex>(flat_.size());
    for (Vertex v = 0; v < n; ++v)
      if (Problem problem = visit(v)) return problem;
    return check_collective_order();
  }

  // After the walk: every (stage, micro-batch) has its forward and, in training, its backward.
  Problem check_completeness() const {
    for (int s = 0; s < schedule_.num_stages; ++s) {
      const int rank = schedule_.stage_to_rank[s];
      for (int mb = 0; mb < m_; ++mb) {
        const std::size_t p = pair(s, mb);
        if (forward_[p] == -1) return global_problem("rank " + num(rank) + ": " + what(s, mb) + " has no ForwardPass", rank);
        if (!training_) continue;
        if (backward_[p] == -1)
          return global_problem("rank " + num(rank) + ": " + what(s, mb) + " has no backward (BackwardPass or BackwardInput)", rank);
        if ((seen_[p] & kBackwardInput) && weight_[p] == -1)
          return problem_at(flat_, backward_[p], "BackwardInput of " + what(s, mb) + " has no BackwardWeight");
      }
    }
    return std::nullopt;
  }

 private:
  std::size_t pair(int stage, int micro_batch) const { return static_cast<std::size_t>(stage) * m_ + micro_batch; }
  bool same_rank(int stage_a, int stage_b) const { return schedule_.stage_to_rank[stage_a] == schedule_.stage_to_rank[stage_b]; }
  std::string at_step(Vertex v) const { return "step " + num(flat_.step_of[v]); }
  static std::string what(int stage, int micro_batch) { return "stage " + num(stage) + " micro-batch " + num(micro_batch); }

  Problem visit(Vertex v) {
    const Node& in = flat_.node[v];
    if (in.op == Op::Unshard || in.op == Op::Reshard) return std::nullopt;  // no work unsharded
    if (in.op == Op::WaitReduceGrads) return visit_wait_reduce(v, in);
    if (!needs_micro_batch(in.op)) return visit_collective(v, in);
    const std::size_t p = pair(in.stage, in.micro_batch);
    std::uint8_t& seen = seen_[p];
    switch (in.op) {
      case Op::LoadMicroBatch:
        if (seen & kLoaded)
          return problem_at(flat_, v, "loads " + what(in.stage, in.micro_batch) + " a second time (first at " + at_step(load_[p]) + ")");
        if (seen & kForward) return problem_at(flat_, v, "loads after the ForwardPass that needs it (" + at_step(forward_[p]) + ")");
        seen |= kLoaded;
        load_[p] = v;
        return std::nullopt;
      case Op::ForwardPass: return visit_forward(v, in, p);
      case Op::BackwardPass:
      case Op::BackwardInput: return visit_backward(v, in, p);
      case Op::BackwardWeight:
        if (seen & kWeight)
          return problem_at(flat_, v, "second BackwardWeight of " + what(in.stage, in.micro_batch) + " (first at " + at_step(weight_[p]) + ")");
        if (seen & kBackwardFull)
          return problem_at(flat_, v, what(in.stage, in.micro_batch) + " already ran a full BackwardPass (" + at_step(backward_[p]) +
                                          "); a micro-batch runs either BackwardPass or BackwardInput + BackwardWeight");
        if (!(seen & kBackwardInput))
          return problem_at(flat_, v, "BackwardWeight before the BackwardInput of " + what(in.stage, in.micro_batch));
        seen |= kWeight;
        weight_[p] = v;
        ++backward_done_[in.stage];
        return std::nullopt;
      case Op::SendActivation:
        if (!(seen & kForward))
          return problem_at(flat_, v, "sends the activation of " + what(in.stage, in.micro_batch) + " before its ForwardPass has computed it");
        sends_[p] |= kActivationSent;
        return std::nullopt;
      case Op::WaitSendActivation:
      case Op::WaitSendGrad: return visit_wait_send(v, in, p);
      case Op::SendGrad:
        if (!(seen & kAnyBackward))
          return problem_at(flat_, v, "sends the input gradient of " + what(in.stage, in.micro_batch) + " before its backward has computed it");
        sends_[p] |= kGradSent;
        return std::nullopt;
      case Op::RecvActivation:
        if (seen & kForward)
          return problem_at(flat_, v, "receives after the ForwardPass that consumes it (" + at_step(forward_[p]) + ")");
        if (in.peer == in.stage - 1) seen |= kActivationFromPrevious;
        return std::nullopt;
      case Op::RecvGrad:
        if (seen & kAnyBackward)
          return problem_at(flat_, v, "receives after the backward that consumes it (" + at_step(backward_[p]) + ")");
        if (in.peer == in.stage + 1) seen |= kGradFromNext;
        return std::nullopt;
      default: return std::nullopt;
    }
  }

  Problem visit_forward(Vertex v, const Node& in, std::size_t p) {
    std::uint8_t& seen = seen_[p];
    if (seen & kForward)
      return problem_at(flat_, v, "second ForwardPass of " + what(in.stage, in.micro_batch) + " (first at " + at_step(forward_[p]) + ")");
    if (stage_has_loads_[in.stage] && (in.stage == 0 || in.stage == schedule_.num_stages - 1) && !(seen & kLoaded))
      return problem_at(flat_, v, "no LoadMicroBatch of " + what(in.stage, in.micro_batch) +
                                      " before it (the schedule loads other micro-batches of this stage)");
    if (in.stage > 0) {
      const int previous = in.stage - 1;
      if (same_rank(previous, in.stage)) {
        if (!(seen_[pair(previous, in.micro_batch)] & kForward))
          return problem_at(flat_, v, "needs the ForwardPass of " + what(previous, in.micro_batch) + " first (stage " + num(previous) +
                                          " is on this rank, and it has not run yet)");
      } else if (!(seen & kActivationFromPrevious)) {
        return problem_at(flat_, v, "no RecvActivation of micro-batch " + num(in.micro_batch) + " from stage " + num(previous) +
                                        " (rank " + num(schedule_.stage_to_rank[previous]) + ") before it");
      }
    }
    seen |= kForward;
    forward_[p] = v;
    return std::nullopt;
  }

  Problem visit_backward(Vertex v, const Node& in, std::size_t p) {
    std::uint8_t& seen = seen_[p];
    if (seen & kAnyBackward) {
      const bool same_kind = (in.op == Op::BackwardPass) == bool(seen & kBackwardFull);
      if (same_kind)
        return problem_at(flat_, v, "second " + std::string(op_name(in.op)) + " of " + what(in.stage, in.micro_batch) + " (first at " +
                                        at_step(backward_[p]) + ")");
      return problem_at(flat_, v, what(in.stage, in.micro_batch) + " already ran " +
                                      ((seen & kBackwardFull) ? "a BackwardPass" : "a BackwardInput") + " (" + at_step(backward_[p]) +
                                      "); a micro-batch runs either BackwardPass or BackwardInput + BackwardWeight");
    }
    if (!(seen & kForward)) return problem_at(flat_, v, "backward before the ForwardPass of " + what(in.stage, in.micro_batch));
    if (in.stage + 1 < schedule_.num_stages) {
      const int next = in.stage + 1;
      if (same_rank(next, in.stage)) {
        if (!(seen_[pair(next, in.micro_batch)] & kAnyBackward))
          return problem_at(flat_, v, "needs the gradient from the backward of " + what(next, in.micro_batch) + " first (stage " +
                                          num(next) + " is on this rank, and its backward has not run yet)");
      } else if (!(seen & kGradFromNext)) {
        return problem_at(flat_, v, "no RecvGrad of micro-batch " + num(in.micro_batch) + " from stage " + num(next) + " (rank " +
                                        num(schedule_.stage_to_rank[next]) + ") before it");
      }
    }
    seen |= in.op == Op::BackwardPass ? kBackwardFull : kBackwardInput;
    backward_[p] = v;
    if (in.op == Op::BackwardPass) ++backward_done_[in.stage];
    return std::nullopt;
  }

  // torch's WAIT_SEND_F/B: once per send, after the send it waits for.
  Problem visit_wait_send(Vertex v, const Node& in, std::size_t p) {
    const bool grad = in.op == Op::WaitSendGrad;
    const std::uint8_t sent = grad ? kGradSent : kActivationSent;
    const std::uint8_t waited = grad ? kGradWaited : kActivationWaited;
    const std::string send_name(op_name(waited_send(in.op)));
    if (!(sends_[p] & sent)) return problem_at(flat_, v, "waits for the " + send_name + " of " + what(in.stage, in.micro_batch) + ", which has not been posted before it");
    if (sends_[p] & waited) return problem_at(flat_, v, "second wait for the " + send_name + " of " + what(in.stage, in.micro_batch));
    sends_[p] |= waited;
    return std::nullopt;
  }

  // torch's WAIT_REDUCE_GRAD: after its stage's ReduceGrads.
  Problem visit_wait_reduce(Vertex v, const Node& in) {
    if (collective_[static_cast<std::size_t>(in.stage) * 3 + collective_index(Op::ReduceGrads)] == -1)
      return problem_at(flat_, v, "waits for the ReduceGrads of stage " + num(in.stage) + ", which does not come before it");
    return std::nullopt;
  }

  // ReduceTiedGrads, ReduceGrads and OptimizerStep: once per stage, after all backward work
  // (for ReduceGrads, wherever it stands: all of the stage's weight gradients before it).
  Problem visit_collective(Vertex v, const Node& in) {
    const std::size_t slot = static_cast<std::size_t>(in.stage) * 3 + collective_index(in.op);
    if (collective_[slot] != -1)
      return problem_at(flat_, v, "second " + std::string(op_name(in.op)) + " of stage " + num(in.stage) + " (first at " +
                                      at_step(collective_[slot]) + ")");
    if (training_ && backward_done_[in.stage] < m_)
      return problem_at(flat_, v, std::string(op_name(in.op)) + " of stage " + num(in.stage) + " before all its backward work is done (" +
                                      num(backward_done_[in.stage]) + " of " + num(m_) + " micro-batches)");
    collective_[slot] = v;
    return std::nullopt;
  }

  static std::size_t collective_index(Op op) { return op == Op::ReduceTiedGrads ? 0 : op == Op::ReduceGrads ? 1 : 2; }

  // The optimizer applies reduced gradients: a reduction after the step comes too late.
  Problem check_collective_order() const {
    for (int s = 0; s < schedule_.num_stages; ++s) {
      const Vertex step = collective_[static_cast<std::size_t>(s) * 3 + 2];
      if (step == -1) continue;
      for (std::size_t k = 0; k < 2; ++k) {
        const Vertex reduce = collective_[static_cast<std::size_t>(s) * 3 + k];
        if (reduce > step)
          return problem_at(flat_, reduce, "reduces after the OptimizerStep of stage " + num(s) + " (" + at_step(step) +
                                               ") that should use the reduced gradients");
      }
    }
    return std::nullopt;
  }

  const FlatSchedule& flat_;
  const Schedule& schedule_;
  bool training_;
  int m_;  // micro-batches
  std::size_t pairs_;
  std::vector<std::uint8_t> seen_;                      // by (stage, micro-batch)
  std::vector<Vertex> load_, forward_, backward_, weight_;  // first vertex of each, by pair; -1 if none
  std::vector<int> backward_done_;  // micro-batches whose backward work is finished, by stage
  std::vector<std::uint8_t> stage_has_loads_;
  std::vector<Vertex> collective_;  // by stage x (ReduceTiedGrads, ReduceGrads, OptimizerStep)
  std::vector<std::uint8_t> sends_;  // by pair: SendSeen bits
};

}  // namespace

Problem check_program_order(const FlatSchedule& flat, bool training) {
  ProgramOrderChecker checker(flat, training);
  if (Problem problem = checker.walk()) return problem;
  return checker.check_completeness();
}

}  // namespace pipescope::validation
