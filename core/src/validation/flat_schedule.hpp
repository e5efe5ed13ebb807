// The validator's view of a schedule: every instruction of every rank numbered 0..N-1, rank
// after rank in program order, so that per-instruction facts live in plain vectors indexed by
// that number (the vertex of the dependency graph) instead of maps. The fields the passes
// read are copied into one compact array, so the hot loops walk memory in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pipescope/core/schedule.hpp"
#include "pipescope/core/validator.hpp"

namespace pipescope::validation {

using Vertex = int;

// Node::peer of a send or receive whose default neighbour is not a valid stage number.
inline constexpr int kOutOfRangePeer = -2;

struct Node {
  Op op;
  int stage;
  int micro_batch;
  int buffer;
  int peer;  // resolved peer stage of a send or receive; for other ops the peer_stage field as given
};

// Inline twins of the instruction.hpp predicates, for loops over millions of nodes.
constexpr bool sends(Op op) { return op == Op::SendActivation || op == Op::SendGrad; }
constexpr bool receives(Op op) { return op == Op::RecvActivation || op == Op::RecvGrad; }
constexpr bool per_micro_batch(Op op) {
  return op != Op::ReduceTiedGrads && op != Op::ReduceGrads && op != Op::OptimizerStep;
}

struct FlatSchedule {
  const Schedule* schedule = nullptr;
  std::vector<Node> node;          // by vertex
  std::vector<int> step_of;        // by vertex
  std::vector<Vertex> rank_begin;  // rank r holds vertices [rank_begin[r], rank_begin[r+1])

  explicit FlatSchedule(const Schedule& s);

  std::size_t size() const { return node.size(); }
  int rank_of(Vertex v) const;
  int index_in_step(Vertex v) const;
  const Instruction& instruction(Vertex v) const;
  bool is_first_of_rank(Vertex v) const { return v == rank_begin[rank_of(v)]; }
  bool is_last_of_rank(Vertex v) const { return v + 1 == rank_begin[rank_of(v) + 1]; }

  // "rank 1 step 4 1SEND_F3": how a vertex is named inside a longer message.
  std::string short_name(Vertex v) const;
  // The problem at vertex v, with the one-line message
  // "rank R, step T, position I, instruction X: why".
  ValidationProblem problem_at(Vertex v, const std::string& why) const;
};

// A problem that belongs to no single instruction (header, a missing instruction).
ValidationProblem global_problem(const std::string& why, int rank = -1);

}  // namespace pipescope::validation
