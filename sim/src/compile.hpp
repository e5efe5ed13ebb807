// The simulator's compile step on a schedule already indexed (pipescope/core/schedule_index.hpp):
// a caller that validates and then simulates builds the index once and hands it to both.
#pragma once

#include "pipescope/core/schedule_index.hpp"
#include "pipescope/sim/simulator.hpp"

namespace pipescope::sim {

// compile(schedule) without its two steps before indexing (the shape check, and the lowering
// of a compute-only schedule): the index's schedule must have a valid shape (shape_problem)
// and, if its stages cross ranks, its sends and receives.
CompiledSchedule compile(const ScheduleIndex& index);
// The same, taking over the tables of an index that is no longer needed.
CompiledSchedule compile(ScheduleIndex&& index);

}  // namespace pipescope::sim
