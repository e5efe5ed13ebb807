// The validator's names for the core's schedule index (pipescope/core/schedule_index.hpp),
// plus how a problem at one of its vertices is reported.
#pragma once

#include <string>

#include "pipescope/core/schedule_index.hpp"
#include "pipescope/core/validator.hpp"

namespace pipescope::validation {

using FlatSchedule = ScheduleIndex;
using Node = IndexedInstruction;
using pipescope::Vertex;

// Inline twins of the instruction.hpp predicates, for loops over millions of instructions.
constexpr bool sends(Op op) { return op == Op::SendActivation || op == Op::SendGrad; }
constexpr bool receives(Op op) { return op == Op::RecvActivation || op == Op::RecvGrad; }
constexpr bool per_micro_batch(Op op) {
  return op != Op::ReduceTiedGrads && op != Op::ReduceGrads && op != Op::OptimizerStep &&
         op != Op::WaitReduceGrads && op != Op::Unshard && op != Op::Reshard;
}

// The problem at vertex v, with the one-line message
// "rank R, step T, position I, instruction X: why".
ValidationProblem problem_at(const FlatSchedule& flat, Vertex v, const std::string& why);

// A problem that belongs to no single instruction (header, a missing instruction).
ValidationProblem global_problem(const std::string& why, int rank = -1);

}  // namespace pipescope::validation
