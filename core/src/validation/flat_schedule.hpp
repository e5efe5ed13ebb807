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

// Numbers in messages: "3", and "3rd" for the k-th send or receive of a channel.
std::string num(long long value);
std::string ordinal(long long n);

// The problem at vertex v, with the one-line message
// "rank R, step T, position I, instruction X: why".
ValidationProblem problem_at(const FlatSchedule& flat, Vertex v, const std::string& why);

// A problem that belongs to no single instruction (header, a missing instruction).
ValidationProblem global_problem(const std::string& why, int rank = -1);

}  // namespace pipescope::validation
