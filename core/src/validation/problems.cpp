#include "flat_schedule.hpp"

namespace pipescope::validation {

std::string num(long long value) { return std::to_string(value); }

std::string ordinal(long long n) {
  const long long tens = n % 100;
  const char* suffix = (tens >= 11 && tens <= 13) ? "th" : n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
  return num(n) + suffix;
}

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
