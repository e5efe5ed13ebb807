// Checks along each rank's program order. A stage lives on one rank, so everything about a
// (stage, micro-batch) happens on one rank and "earlier in program order" is exact; what
// crosses ranks (sends and receives) is left to the channel and deadlock checks.
#include <cstdint>
#include <string>
#include <vector>

#include "checks.hpp"

namespace pipescope::validation {
namespace {

std::string num(long long value) { return std::to_string(value); }

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

struct PairState {
  std::vector<std::uint8_t> seen;
  std::vector<Vertex> load, forward, backward, weight;  // first vertex of each, -1 if none

  explicit PairState(std::size_t pairs)
      : seen(pairs, 0), load(pairs, -1), forward(pairs, -1), backward(pairs, -1), weight(pairs, -1) {}
};

class ProgramOrderChecker {
 public:
  ProgramOrderChecker(const FlatSchedule& flat, bool training)
      : flat_(flat),
        schedule_(*flat.schedule),
        training_(training),
        num_micro_batches_(schedule_.num_micro_batches),
        pairs_(static_cast<std::size_t>(schedule_.num_stages) * schedule_.num_micro_batches),
        backward_done_(static_cast<std::size_t>(schedule_.num_stages), 0),
        stage_has_loads_(static_cast<std::size_t>(schedule_.num_stages), false),
        collective_(static_cast<std::size_t>(schedule_.num_stages) * 3, -1) {
    for (std::size_t v = 0; v < flat_.size(); ++v)
      if (flat_.instr[v]->op == Op::LoadMicroBatch) stage_has_loads_[flat_.instr[v]->stage] = true;
  }

  Problem run() {
    for (std::size_t v = 0; v < flat_.size(); ++v)
      if (Problem problem = visit(static_cast<Vertex>(v))) return problem;
    return check_collective_order();
  }

 private:
  std::size_t pair(int stage, int micro_batch) const {
    return static_cast<std::size_t>(stage) * num_micro_batches_ + micro_batch;
  }
  bool same_rank(int stage_a, int stage_b) const { return schedule_.stage_to_rank[stage_a] == schedule_.stage_to_rank[stage_b]; }
  std::string at_step(Vertex v) const { return "step " + num(flat_.step_of[v]); }

  Problem visit(Vertex v) {
    const Instruction& in = *flat_.instr[v];
    if (!needs_micro_batch(in.op)) return visit_collective(v, in);
    const std::size_t p = pair(in.stage, in.micro_batch);
    std::uint8_t& seen = state_.seen[p];
    const std::string what = "stage " + num(in.stage) + " micro-batch " + num(in.micro_batch);
    switch (in.op) {
      case Op::LoadMicroBatch:
        if (seen & kLoaded) return flat_.problem_at(v, "loads " + what + " a second time (first at " + at_step(state_.load[p]) + ")");
        if (seen & kForward)
          return flat_.problem_at(v, "loads after the ForwardPass that needs it (" + at_step(state_.forward[p]) + ")");
        seen |= kLoaded;
        state_.load[p] = v;
        return std::nullopt;
      case Op::ForwardPass: return visit_forward(v, in, p, what);
      case Op::BackwardPass:
      case Op::BackwardInput: return visit_backward(v, in, p, what);
      case Op::BackwardWeight:
        if (seen & kWeight) return flat_.problem_at(v, "second BackwardWeight of " + what + " (first at " + at_step(state_.weight[p]) + ")");
        if (seen & kBackwardFull)
          return flat_.problem_at(v, what + " already ran a full BackwardPass (" + at_step(state_.backward[p]) +
                                         "); a micro-batch runs either BackwardPass or BackwardInput + BackwardWeight");
        if (!(seen & kBackwardInput)) return flat_.problem_at(v, "BackwardWeight before the BackwardInput of " + what);
        seen |= kWeight;
        state_.weight[p] = v;
        ++backward_done_[in.stage];
        return std::nullopt;
      case Op::SendActivation:
        if (!(seen & kForward)) return flat_.problem_at(v, "sends the activation of " + what + " before its ForwardPass has computed it");
        return std::nullopt;
      case Op::SendGrad:
        if (!(seen & (kBackwardFull | kBackwardInput)))
          return flat_.problem_at(v, "sends the input gradient of " + what + " before its backward has computed it");
        return std::nullopt;
      case Op::RecvActivation:
        if (seen & kForward)
          return flat_.problem_at(v, "receives after the ForwardPass that consumes it (" + at_step(state_.forward[p]) + ")");
        if (resolved_peer_stage(in) == in.stage - 1) seen |= kActivationFromPrevious;
        return std::nullopt;
      case Op::RecvGrad:
        if (seen & (kBackwardFull | kBackwardInput))
          return flat_.problem_at(v, "receives after the backward that consumes it (" + at_step(state_.backward[p]) + ")");
        if (resolved_peer_stage(in) == in.stage + 1) seen |= kGradFromNext;
        return std::nullopt;
      default: return std::nullopt;
    }
  }

  Problem visit_forward(Vertex v, const Instruction& in, std::size_t p, const std::string& what) {
    std::uint8_t& seen = state_.seen[p];
    if (seen & kForward) return flat_.problem_at(v, "second ForwardPass of " + what + " (first at " + at_step(state_.forward[p]) + ")");
    if (stage_has_loads_[in.stage] && (in.stage == 0 || in.stage == schedule_.num_stages - 1) && !(seen & kLoaded))
      return flat_.problem_at(v, "no LoadMicroBatch of " + what + " before it (the schedule loads other micro-batches of this stage)");
    if (in.stage > 0) {
      const int previous = in.stage - 1;
      if (same_rank(previous, in.stage)) {
        if (!(state_.seen[pair(previous, in.micro_batch)] & kForward))
          return flat_.problem_at(v, "needs the ForwardPass of stage " + num(previous) + " micro-batch " + num(in.micro_batch) +
                                         " first (stage " + num(previous) + " is on this rank, and it has not run yet)");
      } else if (!(seen & kActivationFromPrevious)) {
        return flat_.problem_at(v, "no RecvActivation of micro-batch " + num(in.micro_batch) + " from stage " + num(previous) +
                                       " (rank " + num(schedule_.stage_to_rank[previous]) + ") before it");
      }
    }
    seen |= kForward;
    state_.forward[p] = v;
    return std::nullopt;
  }

  Problem visit_backward(Vertex v, const Instruction& in, std::size_t p, const std::string& what) {
    std::uint8_t& seen = state_.seen[p];
    if (seen & (kBackwardFull | kBackwardInput)) {
      const bool same_kind = (in.op == Op::BackwardPass) == bool(seen & kBackwardFull);
      if (same_kind)
        return flat_.problem_at(v, "second " + std::string(op_name(in.op)) + " of " + what + " (first at " +
                                       at_step(state_.backward[p]) + ")");
      return flat_.problem_at(v, what + " already ran " + ((seen & kBackwardFull) ? "a BackwardPass" : "a BackwardInput") +
                                     " (" + at_step(state_.backward[p]) +
                                     "); a micro-batch runs either BackwardPass or BackwardInput + BackwardWeight");
    }
    if (!(seen & kForward)) return flat_.problem_at(v, "backward before the ForwardPass of " + what);
    if (in.stage + 1 < schedule_.num_stages) {
      const int next = in.stage + 1;
      if (same_rank(next, in.stage)) {
        if (!(state_.seen[pair(next, in.micro_batch)] & (kBackwardFull | kBackwardInput)))
          return flat_.problem_at(v, "needs the gradient from the backward of stage " + num(next) + " micro-batch " +
                                         num(in.micro_batch) + " first (stage " + num(next) +
                                         " is on this rank, and its backward has not run yet)");
      } else if (!(seen & kGradFromNext)) {
        return flat_.problem_at(v, "no RecvGrad of micro-batch " + num(in.micro_batch) + " from stage " + num(next) + " (rank " +
                                       num(schedule_.stage_to_rank[next]) + ") before it");
      }
    }
    seen |= in.op == Op::BackwardPass ? kBackwardFull : kBackwardInput;
    state_.backward[p] = v;
    if (in.op == Op::BackwardPass) ++backward_done_[in.stage];
    return std::nullopt;
  }

  // ReduceTiedGrads, ReduceGrads and OptimizerStep: once per stage, after all backward work.
  Problem visit_collective(Vertex v, const Instruction& in) {
    const std::size_t slot = static_cast<std::size_t>(in.stage) * 3 + collective_index(in.op);
    if (collective_[slot] != -1)
      return flat_.problem_at(v, "second " + std::string(op_name(in.op)) + " of stage " + num(in.stage) + " (first at " +
                                     at_step(collective_[slot]) + ")");
    if (training_ && backward_done_[in.stage] < num_micro_batches_)
      return flat_.problem_at(v, std::string(op_name(in.op)) + " of stage " + num(in.stage) + " before all its backward work is done (" +
                                     num(backward_done_[in.stage]) + " of " + num(num_micro_batches_) + " micro-batches)");
    collective_[slot] = v;
    return std::nullopt;
  }

  static std::size_t collective_index(Op op) {
    return op == Op::ReduceTiedGrads ? 0 : op == Op::ReduceGrads ? 1 : 2;
  }

  // The optimizer applies reduced gradients: a reduction after the step comes too late.
  Problem check_collective_order() const {
    for (int s = 0; s < schedule_.num_stages; ++s) {
      const Vertex step = collective_[static_cast<std::size_t>(s) * 3 + 2];
      if (step == -1) continue;
      for (std::size_t k = 0; k < 2; ++k) {
        const Vertex reduce = collective_[static_cast<std::size_t>(s) * 3 + k];
        if (reduce > step)
          return flat_.problem_at(reduce, "reduces after the OptimizerStep of stage " + num(s) + " (" + at_step(step) +
                                              ") that should use the reduced gradients");
      }
    }
    return std::nullopt;
  }

  const FlatSchedule& flat_;
  const Schedule& schedule_;
  bool training_;
  int num_micro_batches_;
  std::size_t pairs_;
  PairState state_{pairs_};
  std::vector<int> backward_done_;  // micro-batches whose backward work is finished, by stage
  std::vector<bool> stage_has_loads_;
  std::vector<Vertex> collective_;  // by stage x (ReduceTiedGrads, ReduceGrads, OptimizerStep)
};

}  // namespace

Problem check_program_order(const FlatSchedule& flat, bool training) {
  ProgramOrderChecker checker(flat, training);
  return checker.run();
}

Problem check_completeness(const FlatSchedule& flat, bool training) {
  const Schedule& schedule = *flat.schedule;
  const int m = schedule.num_micro_batches;
  // Forward, backward and weight instruction of each pair, gathered in one pass.
  const std::size_t pairs = static_cast<std::size_t>(schedule.num_stages) * m;
  std::vector<Vertex> forward(pairs, -1), backward(pairs, -1), weight(pairs, -1);
  for (std::size_t v = 0; v < flat.size(); ++v) {
    const Instruction& in = *flat.instr[v];
    const std::size_t p = static_cast<std::size_t>(in.stage) * m + in.micro_batch;
    if (in.op == Op::ForwardPass) forward[p] = static_cast<Vertex>(v);
    else if (is_backward(in.op)) backward[p] = static_cast<Vertex>(v);
    else if (in.op == Op::BackwardWeight) weight[p] = static_cast<Vertex>(v);
  }
  for (int s = 0; s < schedule.num_stages; ++s) {
    const int rank = schedule.stage_to_rank[s];
    for (int mb = 0; mb < m; ++mb) {
      const std::size_t p = static_cast<std::size_t>(s) * m + mb;
      const std::string what = "stage " + num(s) + " micro-batch " + num(mb);
      if (forward[p] == -1) return global_problem("rank " + num(rank) + ": " + what + " has no ForwardPass", rank);
      if (!training) continue;
      if (backward[p] == -1)
        return global_problem("rank " + num(rank) + ": " + what + " has no backward (BackwardPass or BackwardInput)", rank);
      if (flat.instr[backward[p]]->op == Op::BackwardInput && weight[p] == -1)
        return flat.problem_at(backward[p], "BackwardInput of " + what + " has no BackwardWeight");
    }
  }
  return std::nullopt;
}

}  // namespace pipescope::validation
