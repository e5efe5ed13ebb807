// Both sides of a local launch. The launcher of `pprun --nproc-per-node N` (and of programs
// using run_pipeline_processes) starts N workers (this executable again, with torchrun-style
// variables), watches them, reports the rank that failed first and stops the rest (process
// group, PR_SET_PDEATHSIG: no orphans). A worker reads those variables back.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "pipescope/exec/transport.hpp"

namespace pipescope::exec {

struct LaunchOptions {
  int nproc = 1;
  std::string executable;            // the worker program (normally /proc/self/exe)
  std::vector<std::string> args;     // its arguments (without argv[0])
  std::string master_addr;           // empty: MASTER_ADDR when set, else a private file store
                                     // (no listening socket) and Gloo on 127.0.0.1
  int master_port = 0;               // 0: MASTER_PORT when set, else a free loopback port
                                     // (only used with a master address)
  std::chrono::milliseconds grace{65000};  // how long the others may take to stop after a failure
  bool quiet = false;
  std::string program_name = "pprun";  // how error lines start
};

// Returns the exit status for pprun: 0 when every worker succeeded, else 1 (after printing
// which rank failed first).
int launch_local_workers(const LaunchOptions& options);

// A TCP port free on the loopback interface right now.
int find_free_port();

// torchrun-style variables of one worker.
struct WorkerEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 0;  // LOCAL_WORLD_SIZE; 0 when not set
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string store_file;  // PIPESCOPE_STORE_FILE: set by the local launcher (see WorldOptions)
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and PIPESCOPE_STORE_FILE);
// nothing when RANK is unset.
// Throws UsageError naming the variable when one is malformed.
std::optional<WorkerEnvironment> worker_environment_from_env();

// The rendezvous of this worker's world.
WorldOptions world_options(const WorkerEnvironment& env, std::chrono::milliseconds timeout);

// How many ranks share this machine's cores under --bind-cores: LOCAL_WORLD_SIZE; throws
// UsageError when it is not set.
int local_world_size_for_binding(const WorkerEnvironment& env);

}  // namespace pipescope::exec
