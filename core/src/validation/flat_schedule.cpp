#include "flat_schedule.hpp"

#include <algorithm>
#include <limits>

namespace pipescope::validation {
namespace {

// The peer stage, computed without overflow for any stage number; kOutOfRangePeer when the
// default neighbour does not fit in an int (the range check reports it).
int peer_of(const Instruction& i) {
  if (!is_p2p(i.op)) return i.peer_stage;  // kept, so a stray peer on a compute is reported
  if (i.peer_stage != kNone) return i.peer_stage;
  const long long stage = i.stage;
  const long long peer = (i.op == Op::SendActivation || i.op == Op::RecvGrad) ? stage + 1 : stage - 1;
  return (peer < 0 || peer > std::numeric_limits<int>::max()) ? kOutOfRangePeer : static_cast<int>(peer);
}

// The text form, also for an instruction whose op is not a valid Op value (a schedule built
// in code can hold one; the validator reports it rather than reading past the op table).
std::string text_of(const Instruction& instr) {
  if (static_cast<unsigned>(instr.op) >= static_cast<unsigned>(kNumOps))
    return std::to_string(instr.stage) + "<op " + std::to_string(static_cast<unsigned>(instr.op)) + ">";
  return to_string(instr);
}

}  // namespace

FlatSchedule::FlatSchedule(const Schedule& s) : schedule(&s) {
  const std::size_t n = s.instruction_count();
  node.reserve(n);
  step_of.reserve(n);
  rank_begin.reserve(s.programs.size() + 1);
  for (const Program& program : s.programs) {
    rank_begin.push_back(static_cast<Vertex>(node.size()));
    for (std::size_t t = 0; t < program.size(); ++t) {
      for (const Instruction& i : program[t]) {
        node.push_back({i.op, i.stage, i.micro_batch, i.buffer, peer_of(i)});
        step_of.push_back(static_cast<int>(t));
      }
    }
  }
  rank_begin.push_back(static_cast<Vertex>(node.size()));
}

int FlatSchedule::rank_of(Vertex v) const {
  // The last rank whose first vertex is <= v; empty programs share a begin with the next rank.
  auto it = std::upper_bound(rank_begin.begin(), rank_begin.end() - 1, v);
  return static_cast<int>(it - rank_begin.begin()) - 1;
}

int FlatSchedule::index_in_step(Vertex v) const {
  const Vertex first = rank_begin[rank_of(v)];
  int index = 0;
  while (v - index - 1 >= first && step_of[v - index - 1] == step_of[v]) ++index;
  return index;
}

const Instruction& FlatSchedule::instruction(Vertex v) const {
  return schedule->programs[rank_of(v)][step_of[v]][index_in_step(v)];
}

std::string FlatSchedule::short_name(Vertex v) const {
  return "rank " + std::to_string(rank_of(v)) + " step " + std::to_string(step_of[v]) + " " + text_of(instruction(v));
}

ValidationProblem FlatSchedule::problem_at(Vertex v, const std::string& why) const {
  ValidationProblem problem;
  problem.rank = rank_of(v);
  problem.step = step_of[v];
  problem.index = index_in_step(v);
  problem.instruction = text_of(instruction(v));
  problem.message = "rank " + std::to_string(problem.rank) + ", step " + std::to_string(problem.step) +
                    ", position " + std::to_string(problem.index) + ", instruction " + problem.instruction +
                    ": " + why;
  return problem;
}

ValidationProblem global_problem(const std::string& why, int rank) {
  ValidationProblem problem;
  problem.rank = rank;
  problem.message = why;
  return problem;
}

}  // namespace pipescope::validation
