#include "pipescope/core/schedule.hpp"

#include "pipescope/core/errors.hpp"

namespace pipescope {

std::vector<int> Schedule::stages_of_rank(int rank) const {
  std::vector<int> stages;
  for (int s = 0; s < static_cast<int>(stage_to_rank.size()); ++s)
    if (stage_to_rank[s] == rank) stages.push_back(s);
  return stages;
}

bool Schedule::is_training() const {
  for (const auto& program : programs)
    for (const auto& step : program)
      for (const auto& instr : step)
        if (is_backward(instr.op) || instr.op == Op::BackwardWeight) return true;
  return false;
}

std::size_t Schedule::instruction_count() const {
  std::size_t n = 0;
  for (const auto& program : programs)
    for (const auto& step : program) n += step.size();
  return n;
}

std::vector<int> loop_placement(int num_ranks, int chunks) {
  std::vector<int> placement(static_cast<std::size_t>(num_ranks) * chunks);
  for (std::size_t s = 0; s < placement.size(); ++s) placement[s] = static_cast<int>(s) % num_ranks;
  return placement;
}

std::vector<int> v_placement(int num_ranks) {
  std::vector<int> placement(static_cast<std::size_t>(2 * num_ranks));
  for (int r = 0; r < num_ranks; ++r) {
    placement[r] = r;
    placement[2 * num_ranks - 1 - r] = r;
  }
  return placement;
}

}  // namespace pipescope
