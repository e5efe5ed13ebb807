// One pprun worker: everything a rank does from its environment to its exit status (through a
// PipelineEngine), and the plan (schedule, partition) that the launcher checks before starting
// any process.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "pipescope/core/partitioner.hpp"
#include "pipescope/core/schedule.hpp"
#include "pipescope/exec/model.hpp"
#include "launcher.hpp"
#include "pprun/options.hpp"

namespace pipescope::exec {

struct RunPlan {
  RunOptions options;
  ModelSpec model;
  Schedule schedule;
  Partition partition;
  int world_size = 1;
  int pipeline_ranks = 1;
  // The text the run trains on, as run_identity records it ("synthetic" for the generator):
  // "text: F file(s), N bytes", so a resumed run refuses other text.
  std::string data_identity;
};

// Builds and checks the schedule (for world_size / --dp pipeline ranks), validates it, splits
// the model into its stages and opens the text data to check it. Throws UsageError or ScheduleError naming the option or schedule.
RunPlan make_run_plan(const RunOptions& options, int world_size);

// What identifies a run for checkpoints: resuming with a different one is refused.
nlohmann::json run_identity(const RunPlan& plan);

// Runs the worker to the end. Returns the exit status (0, or 1 after printing one
// `pprun: error: rank R: ...` line for a failure while running).
int run_worker(const RunPlan& plan, const WorkerEnvironment& env);

}  // namespace pipescope::exec
