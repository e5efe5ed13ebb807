// The programs an overlapped run executes: each marked pair (a ForwardPass with
// Instruction::overlaps_next_backward and the rank's next BackwardPass or BackwardInput) made
// adjacent in one step, as torch lowers its OVERLAP_F_B cell and DualPipe runs its F&B step:
// what stood between them (the backward's receive, a load) first, then the two passes, then the
// forward's sends. A generator writes the forward's send before the backward's receive; moving
// it behind the backward could wait forever where a peer sends only after it received, so the
// paired schedule is validated (every rank's programs together) before it is used.
#pragma once

#include <optional>

#include "pipescope/core/schedule.hpp"

namespace pipescope::exec::runtime {

struct PairedSchedule {
  Schedule schedule;
  int pairs = 0;  // over all ranks
};

// Nothing when `schedule` marks no pair, or when its paired programs would not run (the
// validator's problem): the passes then run one after the other.
std::optional<PairedSchedule> with_paired_steps(const Schedule& schedule);

// Whether step[index] starts a pair: a marked ForwardPass right before a BackwardPass or
// BackwardInput.
bool starts_pair(const Step& step, std::size_t index);

}  // namespace pipescope::exec::runtime
