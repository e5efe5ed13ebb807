// The validator: a dry run of all ranks' programs over their dependency graph (Boost.Graph)
// that checks the meaning of SPEC.md section 3 and names the first problem it finds.
#pragma once

#include <optional>
#include <string>

#include "pipescope/core/schedule.hpp"

namespace pipescope {

struct ValidationOptions {
  // DeepSpeed's stricter rule: a send also waits for its receive (rendezvous).
  bool blocking_sends = false;
};

// Where and why a schedule is invalid. rank/step/index are -1 when the problem is global.
struct ValidationProblem {
  int rank = -1;
  int step = -1;
  int index = -1;            // position of the instruction inside the step
  std::string instruction;   // text form, e.g. "1SEND_F3"
  std::string message;       // full one-line message: "rank 1, step 4, instruction 1SEND_F3: ..."
};

// Returns the first problem, or nothing when the schedule is valid.
std::optional<ValidationProblem> find_problem(const Schedule& schedule,
                                              const ValidationOptions& options = {});

// Throws ValidationError with the problem's message when the schedule is invalid.
void validate(const Schedule& schedule, const ValidationOptions& options = {});

}  // namespace pipescope
