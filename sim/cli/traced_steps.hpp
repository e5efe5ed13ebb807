// The steps `pprun --trace FILE` traced beside FILE. pprun traces the last K steps of a run
// (--trace-steps, by default every step after the first, at most 8): FILE holds the last and
// FILE's name with ".step<N>" before its extension the others. Calibration learns from all of
// them, so a user who names FILE gets what the run measured, not one sample of it.
#pragma once

#include <string>
#include <vector>

namespace pipescope::cli {

// `inputs` with, after each FILE, the step traces pprun wrote beside it in the same run (in step
// order), unless they are among `inputs` already. A sibling belongs to FILE's run when it is not
// newer than FILE and at most kSameRunWindowSeconds older: pprun writes every traced step of a
// run at its end, so a ".step<N>" file much older than FILE is left from an earlier run.
std::vector<std::string> with_traced_steps(const std::vector<std::string>& inputs);

inline constexpr double kSameRunWindowSeconds = 120;

}  // namespace pipescope::cli
