// Back-to-back iterations whose optimizer steps do not wait for one another: the Zero Bubble
// paper's post-validation, under which one iteration's warm-up runs beside the previous one's
// drain. simulate() predicts one isolated iteration, warm-up and drain included; this predicts
// the period of the steady state, which is what a long run's step time measures then.
#pragma once

#include "pipescope/sim/simulator.hpp"

namespace pipescope::sim {

// Iterations simulated in a row for a steady state: the first holds the warm-up, the last the
// drain, and the period is measured over the others.
inline constexpr int kSteadyStateIterations = 4;

// `iterations` copies of `one` in one program per rank, each rank's copies in order: micro-batch
// ids and transfers of copy i follow those of copy i - 1 (micro-batch j of copy i is i * m + j).
// Throws UsageError past the compiled form's 32-bit indices.
CompiledSchedule repeat_iterations(const CompiledSchedule& one, int iterations);

// A runtime that makes the ranks wait for one another at every optimizer step or tied-gradient
// reduction (a calibrated pprun profile's): its iterations cannot overlap.
bool synchronises_every_step(const RuntimeEffects& runtime);

// The steady state of back-to-back iterations of `schedule`, from `iterations` (>= 2) simulated
// in a row: iteration time = (T_k - T_1) / (k - 1), T_n the end of n iterations; busy time per
// iteration = the k iterations' / k; peak memory = the k iterations' (the overlap can raise it).
// No trace. Refuses (UsageError) costs whose runtime synchronises_every_step.
Summary simulate_steady_state(const CompiledSchedule& schedule, const CostModel& costs, const Topology& topology = {},
                              const SimOptions& options = {}, int iterations = kSteadyStateIterations);

}  // namespace pipescope::sim
