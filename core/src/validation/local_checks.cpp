// Checks that need no more than one instruction (and the header) at a time.
#include <algorithm>
#include <limits>
#include <string>

#include "checks.hpp"

namespace pipescope::validation {
namespace {

// Activations flow to later stages, gradients to earlier ones; skip connections are allowed.
bool peer_in_right_direction(Op op, int stage, int peer) {
  switch (op) {
    case Op::SendActivation: return peer > stage;
    case Op::RecvActivation: return peer < stage;
    case Op::SendGrad: return peer < stage;
    case Op::RecvGrad: return peer > stage;
    default: return true;
  }
}

const char* direction_text(Op op) {
  switch (op) {
    case Op::SendActivation: return "activations go to a later stage";
    case Op::RecvActivation: return "activations come from an earlier stage";
    case Op::SendGrad: return "gradients go to an earlier stage";
    default: return "gradients come from a later stage";
  }
}

Problem check_peer(const FlatSchedule& flat, Vertex v, int rank) {
  const Schedule& schedule = *flat.schedule;
  const Node& in = flat.node[v];
  const int peer = in.peer;
  if (peer < 0 || peer >= schedule.num_stages) {
    if (flat.instruction(v).peer_stage != kNone)
      return problem_at(flat, v, "peer stage " + num(peer) + " out of range 0.." + num(schedule.num_stages - 1));
    return problem_at(flat, v, std::string("the default peer (the ") +
                                   ((in.op == Op::SendActivation || in.op == Op::RecvGrad) ? "next" : "previous") +
                                   " stage) does not exist; stages are 0.." + num(schedule.num_stages - 1));
  }
  if (!peer_in_right_direction(in.op, in.stage, peer))
    return problem_at(flat, v, "peer stage " + num(peer) + " is in the wrong direction: " + direction_text(in.op));
  if (schedule.stage_to_rank[peer] == rank)
    return problem_at(flat, v, "stages " + num(std::min(in.stage, peer)) + " and " + num(std::max(in.stage, peer)) +
                                   " are both on rank " + num(rank) +
                                   "; the value stays in memory, no send or receive between them");
  return std::nullopt;
}

}  // namespace

Problem check_header(const Schedule& schedule) {
  if (std::optional<std::string> shape = shape_problem(schedule)) return global_problem(*shape);
  if (schedule.num_micro_batches < 1)
    return global_problem("num_micro_batches is " + num(schedule.num_micro_batches) + ", must be at least 1");
  std::vector<bool> holds_stage(static_cast<std::size_t>(schedule.num_ranks), false);
  for (const int rank : schedule.stage_to_rank) holds_stage[rank] = true;
  for (int r = 0; r < schedule.num_ranks; ++r)
    if (!holds_stage[r]) return global_problem("rank " + num(r) + " holds no stage (stage_to_rank never names it)", r);
  if (schedule.instruction_count() > static_cast<std::size_t>(std::numeric_limits<int>::max() / 2))
    return global_problem("too many instructions (" + num(static_cast<long long>(schedule.instruction_count())) + ")");
  return std::nullopt;
}

Problem check_instructions(const FlatSchedule& flat, bool training) {
  const Schedule& schedule = *flat.schedule;
  const int num_stages = schedule.num_stages;
  const std::size_t num_ranks = schedule.programs.size();
  for (std::size_t r = 0; r < num_ranks; ++r) {
    const int rank = static_cast<int>(r);
    for (Vertex v = flat.rank_begin[r]; v < flat.rank_begin[r + 1]; ++v) {
      const Node& in = flat.node[v];
      if (static_cast<unsigned>(in.op) >= static_cast<unsigned>(kNumOps))
        return problem_at(flat, v, "unknown op code " + num(static_cast<int>(in.op)));
      if (in.stage < 0 || in.stage >= num_stages)
        return problem_at(flat, v, "stage " + num(in.stage) + " out of range 0.." + num(num_stages - 1));
      if (schedule.stage_to_rank[in.stage] != rank)
        return problem_at(flat, v, "stage " + num(in.stage) + " is held by rank " + num(schedule.stage_to_rank[in.stage]) +
                                       ", not by this rank");
      if (needs_micro_batch(in.op)) {
        if (in.micro_batch == kNone) return problem_at(flat, v, std::string(op_name(in.op)) + " needs a micro-batch");
        if (in.micro_batch < 0 || in.micro_batch >= schedule.num_micro_batches)
          return problem_at(flat, v, "micro-batch " + num(in.micro_batch) + " out of range 0.." +
                                         num(schedule.num_micro_batches - 1));
      } else if (in.micro_batch != kNone) {
        return problem_at(flat, v, std::string(op_name(in.op)) + " works on the whole batch and takes no micro-batch");
      }
      if (in.buffer < kNone) return problem_at(flat, v, "buffer " + num(in.buffer) + " is negative");
      if (!is_p2p(in.op)) {
        if (in.peer != kNone)
          return problem_at(flat, v, "peer_stage " + num(in.peer) + " on " + std::string(op_name(in.op)) +
                                         ", which is not a send or receive");
      } else if (Problem problem = check_peer(flat, v, rank)) {
        return problem;
      }
      if (in.op == Op::LoadMicroBatch && in.stage != 0 && in.stage != num_stages - 1)
        return problem_at(flat, v, "LoadMicroBatch on stage " + num(in.stage) +
                                       ", which is neither the first nor the last stage (inputs and labels are loaded there)");
      if (!training && (in.op == Op::SendGrad || in.op == Op::RecvGrad || in.op == Op::ReduceTiedGrads ||
                        in.op == Op::ReduceGrads || in.op == Op::OptimizerStep || in.op == Op::WaitSendGrad ||
                        in.op == Op::WaitReduceGrads))
        return problem_at(flat, v, std::string(op_name(in.op)) +
                                       " in an inference schedule (no rank runs a backward pass)");
    }
  }
  return std::nullopt;
}

Problem check_size(const FlatSchedule& flat) {
  const Schedule& schedule = *flat.schedule;
  const long long pairs = static_cast<long long>(schedule.num_stages) * schedule.num_micro_batches;
  if (pairs <= static_cast<long long>(flat.size())) return std::nullopt;
  // Too few instructions for one forward per (stage, micro-batch): some forward is missing.
  // Find the first one without tables of stages x micro-batches (they may not fit in memory).
  std::vector<std::vector<int>> forwards(static_cast<std::size_t>(schedule.num_stages));
  for (const Node& in : flat.node)
    if (in.op == Op::ForwardPass) forwards[in.stage].push_back(in.micro_batch);
  for (int s = 0; s < schedule.num_stages; ++s) {
    auto& mbs = forwards[s];
    std::sort(mbs.begin(), mbs.end());
    mbs.erase(std::unique(mbs.begin(), mbs.end()), mbs.end());
    if (static_cast<int>(mbs.size()) == schedule.num_micro_batches) continue;
    int missing = 0;
    while (missing < static_cast<int>(mbs.size()) && mbs[missing] == missing) ++missing;
    const int rank = schedule.stage_to_rank[s];
    return global_problem("rank " + num(rank) + ": stage " + num(s) + " micro-batch " + num(missing) +
                              " has no ForwardPass (the schedule has " + num(static_cast<long long>(flat.size())) +
                              " instructions for " + num(schedule.num_stages) + " stages x " +
                              num(schedule.num_micro_batches) + " micro-batches)",
                          rank);
  }
  return std::nullopt;  // unreachable: fewer forwards than pairs means some stage lacks one
}

}  // namespace pipescope::validation
