#include "flat_schedule.hpp"

namespace pipescope::validation {

ValidationProblem problem_at(const FlatSchedule& flat, Vertex v, const std::string& why) {
  ValidationProblem problem;
  problem.rank = flat.rank_of(v);
  problem.step = flat.step_of[v];
  problem.index = flat.index_in_step(v);
  problem.instruction = flat.text(v);
  problem.message = flat.place(v) + ": " + why;
  return problem;
}

ValidationProblem global_problem(const std::string& why, int rank) {
  ValidationProblem problem;
  problem.rank = rank;
  problem.message = why;
  return problem;
}

}  // namespace pipescope::validation
