// The validator runs its passes (validation/checks.hpp) from the cheapest and most basic to the
// dry run, so the first problem reported is the most direct one: a bad header before a bad
// instruction, a missing forward before the unmatched send it leaves behind, and a deadlock
// only for schedules that are otherwise well formed.
#include "pipescope/core/validator.hpp"

#include "pipescope/core/errors.hpp"
#include "validation/checks.hpp"
#include "validation/flat_schedule.hpp"

namespace pipescope {

std::optional<ValidationProblem> find_problem(const Schedule& schedule, const ValidationOptions& options) {
  using namespace validation;
  if (Problem problem = check_header(schedule)) return problem;
  const FlatSchedule flat(schedule);
  const bool training = schedule.is_training();
  if (Problem problem = check_instructions(flat, training)) return problem;
  if (Problem problem = check_size(flat)) return problem;
  if (Problem problem = check_program_order(flat, training)) return problem;
  std::vector<Vertex> partner;
  if (Problem problem = check_channels(flat, partner)) return problem;
  if (Problem problem = check_rank_pair_order(flat, partner)) return problem;
  if (Problem problem = check_buffers(flat)) return problem;
  return check_deadlock(flat, partner, options.blocking_sends);
}

void validate(const Schedule& schedule, const ValidationOptions& options) {
  if (auto problem = find_problem(schedule, options)) throw ValidationError(problem->message);
}

}  // namespace pipescope
