// One pprun worker: everything a rank does from its environment to its exit status (through a
// PipelineEngine), on the plan (schedule, partition) that the launcher checks before starting
// any process (run_plan.hpp).
#pragma once

#include "launcher.hpp"
#include "pprun/run_plan.hpp"

namespace pipescope::exec {

// Runs the worker to the end. Returns the exit status (0, or 1 after printing one
// `pprun: error: rank R: ...` line for a failure while running).
int run_worker(const RunPlan& plan, const WorkerEnvironment& env);

}  // namespace pipescope::exec
