// Simulates 1F1B on 4 ranks with 8 micro-batches, F = 1 s and B = 2 s, transfers free, and
// prints the iteration time: (M + P - 1)(F + B) = 33 s.
#include <cstdio>

#include "pipescope/core/registry.hpp"
#include "pipescope/sim/simulator.hpp"

int main() {
  pipescope::ScheduleParams params;
  params.num_ranks = 4;
  params.num_micro_batches = 8;
  const auto schedule = pipescope::make_schedule("1f1b", params);
  const auto costs = pipescope::sim::CostModel::uniform(/*f_s=*/1, /*b_s=*/2, /*w_s=*/0, /*c_s=*/0);
  const auto result = pipescope::sim::simulate(schedule, costs);
  std::printf("1f1b, %d ranks, %d micro-batches: iteration time %g s\n", params.num_ranks,
              params.num_micro_batches, result.summary.iteration_time_s);
}
