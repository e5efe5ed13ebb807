#include "pipescope/core/schedule_index.hpp"

#include <algorithm>
#include <limits>

namespace pipescope {
namespace {

// The peer stage, computed without overflow for any stage number; kOutOfRangePeer when the
// default neighbour does not fit in an int (the range checks report it).
int peer_of(const Instruction& i) {
  if (!is_p2p(i.op)) return i.peer_stage;  // kept, so a stray peer on a compute is reported
  if (i.peer_stage != kNone) return i.peer_stage;
  const long long stage = i.stage;
  const long long peer = (i.op == Op::SendActivation || i.op == Op::RecvGrad) ? stage + 1 : stage - 1;
  return (peer < 0 || peer > std::numeric_limits<int>::max()) ? kOutOfRangePeer : static_cast<int>(peer);
}

}  // namespace

ScheduleIndex::ScheduleIndex(const Schedule& s, IndexContents contents) : schedule(&s) {
  const std::size_t n = s.instruction_count();
  const bool fields = contents == IndexContents::NumberingAndFields;
  if (fields) node.reserve(n);
  step_of.reserve(n);
  rank_begin.reserve(s.programs.size() + 1);
  for (const Program& program : s.programs) {
    rank_begin.push_back(static_cast<Vertex>(step_of.size()));
    for (std::size_t t = 0; t < program.size(); ++t) {
      for (const Instruction& i : program[t]) {
        if (fields) node.push_back({i.op, i.stage, i.micro_batch, i.buffer, peer_of(i)});
        step_of.push_back(static_cast<int>(t));
      }
    }
  }
  rank_begin.push_back(static_cast<Vertex>(step_of.size()));
}

int ScheduleIndex::rank_of(Vertex v) const {
  // The last rank whose first vertex is <= v; empty programs share a begin with the next rank.
  auto it = std::upper_bound(rank_begin.begin(), rank_begin.end() - 1, v);
  return static_cast<int>(it - rank_begin.begin()) - 1;
}

int ScheduleIndex::index_in_step(Vertex v) const {
  const Vertex first = rank_begin[rank_of(v)];
  int index = 0;
  while (v - index - 1 >= first && step_of[v - index - 1] == step_of[v]) ++index;
  return index;
}

const Instruction& ScheduleIndex::instruction(Vertex v) const {
  return schedule->programs[rank_of(v)][step_of[v]][index_in_step(v)];
}

std::string ScheduleIndex::text(Vertex v) const {
  const Instruction& instr = instruction(v);
  if (static_cast<unsigned>(instr.op) >= static_cast<unsigned>(kNumOps))
    return std::to_string(instr.stage) + "<op " + std::to_string(static_cast<unsigned>(instr.op)) + ">";
  return to_string(instr);
}

std::string ScheduleIndex::short_name(Vertex v) const {
  return "rank " + std::to_string(rank_of(v)) + " step " + std::to_string(step_of[v]) + " " + text(v);
}

std::string ScheduleIndex::place(Vertex v) const {
  return "rank " + std::to_string(rank_of(v)) + ", step " + std::to_string(step_of[v]) + ", position " +
         std::to_string(index_in_step(v)) + ", instruction " + text(v);
}

std::optional<std::string> shape_problem(const Schedule& schedule) {
  if (schedule.num_ranks < 1)
    return "num_ranks is " + std::to_string(schedule.num_ranks) + ", must be at least 1";
  if (schedule.programs.size() != static_cast<std::size_t>(schedule.num_ranks))
    return "num_ranks is " + std::to_string(schedule.num_ranks) + " but there are " +
           std::to_string(schedule.programs.size()) + " programs";
  if (schedule.num_stages < 1)
    return "num_stages is " + std::to_string(schedule.num_stages) + ", must be at least 1";
  if (schedule.stage_to_rank.size() != static_cast<std::size_t>(schedule.num_stages))
    return "num_stages is " + std::to_string(schedule.num_stages) + " but stage_to_rank has " +
           std::to_string(schedule.stage_to_rank.size()) + " entries";
  for (int s = 0; s < schedule.num_stages; ++s) {
    const int rank = schedule.stage_to_rank[s];
    if (rank < 0 || rank >= schedule.num_ranks)
      return "stage_to_rank[" + std::to_string(s) + "] is rank " + std::to_string(rank) + ", out of range 0.." +
             std::to_string(schedule.num_ranks - 1);
  }
  return std::nullopt;
}

}  // namespace pipescope
