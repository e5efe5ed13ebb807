// One pprun worker: everything a rank does from its environment to its exit status, and the
// plan (schedule, partition) that the launcher checks before starting any process.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "pipescope/core/partitioner.hpp"
#include "pipescope/core/schedule.hpp"
#include "pipescope/exec/model.hpp"
#include "pipescope/exec/options.hpp"

namespace pipescope::exec {

struct RunPlan {
  RunOptions options;
  ModelSpec model;
  Schedule schedule;
  Partition partition;
  int world_size = 1;
  int pipeline_ranks = 1;
};

// Builds and checks the schedule (for world_size / --dp pipeline ranks), validates it and splits
// the model into its stages. Throws UsageError or ScheduleError naming the option or schedule.
RunPlan make_run_plan(const RunOptions& options, int world_size);

// What identifies a run for checkpoints: resuming with a different one is refused.
nlohmann::json run_identity(const RunPlan& plan);

// torchrun-style variables of one worker.
struct WorkerEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 0;  // LOCAL_WORLD_SIZE; 0 when not set
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string store_file;  // PIPESCOPE_STORE_FILE: set by the local launcher (see GlooOptions)
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and PIPESCOPE_STORE_FILE);
// nothing when RANK is unset.
// Throws UsageError naming the variable when one is malformed.
std::optional<WorkerEnvironment> worker_environment_from_env();

// How many ranks share this machine's cores under --bind-cores: LOCAL_WORLD_SIZE; throws
// UsageError when it is not set.
int local_world_size_for_binding(const WorkerEnvironment& env);

// Runs the worker to the end. Returns the exit status (0, or 1 after printing one
// `pprun: error: rank R: ...` line for a failure while running).
int run_worker(const RunPlan& plan, const WorkerEnvironment& env);

}  // namespace pipescope::exec
