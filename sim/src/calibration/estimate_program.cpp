// Estimators of the runtime's program: its own time between instructions and after the last
// one, and whether its collectives wait for every member rank.
#include <algorithm>

#include <fmt/format.h>

#include "estimation.hpp"

namespace pipescope::sim::calibration {

void estimate_program_time(Estimation& e) {
  const Collected& c = e.collected;
  Profile& p = e.result.profile;
  // The program's own time between instructions.
  if (!c.instruction_gaps.empty())
    p.instruction_overhead_s = std::max(0.0, e.summary.estimate("program time between instructions", "s", c.instruction_gaps));
  // The step's own time after its last instruction (pprun gathers the step's figures).
  if (!c.step_overheads.empty()) p.step_overhead_s = e.summary.estimate("step time after the last instruction", "s", c.step_overheads);
}

namespace {

// Whether the traces together show the collective waiting (some show it, none rules it out);
// its times become the matching reading of its first events.
bool decide_sync(Collected& c, Collective collective) {
  const bool sync = c.sync_evidence[collective] > 0 && c.no_sync_evidence[collective] == 0;
  const bool optimizer = collective == Collective::Optimizer;
  const Timed reading = optimizer ? (sync ? Timed::OptimizerSynced : Timed::OptimizerUnsynced)
                                  : (sync ? Timed::ReduceTiedSynced : Timed::ReduceTiedUnsynced);
  const Timed decided = optimizer ? Timed::Optimizer : Timed::ReduceTied;
  for (auto it = c.times_s.begin(); it != c.times_s.end(); ++it)
    if (it->first.second == reading) c.times_s[{it->first.first, decided}] = it->second;
  return sync;
}

}  // namespace

void estimate_collective_waits(Estimation& e) {
  Collected& c = e.collected;
  Profile& p = e.result.profile;
  p.optimizer_sync = decide_sync(c, Collective::Optimizer);
  p.reduce_tied_sync = decide_sync(c, Collective::ReduceTied);
  if (p.optimizer_sync)
    e.note(fmt::format("optimizer: the first step of each rank waits for every rank's (global-norm clipping; {} trace(s) "
                       "show it): the optimizer times are measured from the last rank's arrival",
                       c.sync_evidence[Collective::Optimizer]));
  else if (c.no_sync_evidence[Collective::Optimizer] > 0)
    e.note("optimizer: ranks step without waiting for each other");
  if (p.reduce_tied_sync)
    e.note(fmt::format("tied weights: the tied-gradient all-reduce of the first and the last stage's ranks waits for both "
                       "({} trace(s) show it): its times are measured from the last arrival",
                       c.sync_evidence[Collective::ReduceTied]));
}

}  // namespace pipescope::sim::calibration
