// Both sides of a local launch. The launcher of `pprun --nproc-per-node N` (and of programs
// using run_pipeline_processes) starts N workers (this executable again, with torchrun-style
// variables), watches them, reports the rank that failed first and stops the rest (process
// group, PR_SET_PDEATHSIG: no orphans). A worker reads those variables back.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pipescope/exec/transport.hpp"

namespace pipescope::exec {

// More local workers than this are refused before any is started: each is a whole LibTorch
// process (about 100 MB and a few threads before it computes anything), and no node this
// runs on has more cores or GPUs than this to give each its own. A fixed figure, unlike a
// multiple of the cores, keeps a run's validity the same on every machine.
constexpr int kMaxLocalWorkers = 256;

// Throws UsageError naming --nproc-per-node when `nproc` is below 1 or above kMaxLocalWorkers.
void check_local_worker_count(int nproc);

struct LaunchOptions {
  int nproc = 1;
  std::string executable;            // the worker program (normally /proc/self/exe)
  std::vector<std::string> args;     // its arguments (without argv[0])
  // How long the other workers may take to stop after the first failure (or after a signal to
  // the launcher) before they are killed. A rank that failed on its own has already waited out
  // --timeout for its peers; the others, blocked on it, see its connections close at once, so
  // a few seconds are enough, and a stopped or hung rank does not add another --timeout.
  std::chrono::milliseconds grace{5000};
  bool quiet = false;
  std::string program_name = "pprun";  // how error lines start
  // Descriptors every worker inherits, each under the variable named with it (the lock on the
  // checkpoint folder that the launcher holds for the whole run: pprun/checkpoint_lock.hpp).
  std::vector<std::pair<std::string, int>> descriptors_for_workers;
};

// Starts the workers of a one-node run. They always meet through a c10d FileStore in a private
// (0700) folder under /tmp and talk over Gloo on 127.0.0.1, whatever MASTER_ADDR and
// MASTER_PORT say (a malformed MASTER_PORT is still refused): nothing of the run listens beyond
// this host. Each worker gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR
// (127.0.0.1), PIPESCOPE_STORE_FILE, a fresh PIPESCOPE_RUN_SECRET and PIPESCOPE_FAILURE_FD
// (report_failure_to_launcher). SIGINT, SIGTERM and SIGHUP
// are forwarded to the workers; the folder is removed and the launcher then dies of the signal.
// Returns the exit status for pprun: 0 when every worker succeeded, else 1 (after printing
// which rank failed first). Throws UsageError for a bad worker count or MASTER_PORT.
int launch_local_workers(const LaunchOptions& options);

// In a worker of launch_local_workers: tells the launcher that this rank has failed, once,
// before the caller tears anything down (the launcher then names this rank as the one that
// failed first, not a rank that only lost its connection to it). Does nothing elsewhere.
void report_failure_to_launcher(int rank);

// MASTER_PORT's value as a port: a whole number from 1 to 65535, else UsageError naming
// MASTER_PORT and the value.
int parse_master_port(const std::string& value);

// torchrun-style variables of one worker.
struct WorkerEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 0;  // LOCAL_WORLD_SIZE; 0 when not set
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string store_file;  // PIPESCOPE_STORE_FILE: set by the local launcher (see WorldOptions)
  std::string run_secret;  // PIPESCOPE_RUN_SECRET: what proves a worker belongs to the run
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and
// PIPESCOPE_STORE_FILE, PIPESCOPE_RUN_SECRET);
// nothing when RANK is unset.
// Throws UsageError naming the variable when one is malformed.
std::optional<WorkerEnvironment> worker_environment_from_env();

// The rendezvous of this worker's world.
WorldOptions world_options(const WorkerEnvironment& env, std::chrono::milliseconds timeout);

// How many ranks share this machine's cores under --bind-cores: LOCAL_WORLD_SIZE; throws
// UsageError when it is not set.
int local_world_size_for_binding(const WorkerEnvironment& env);

// Whether this worker binds to its share of the cores: `asked` (--bind-cores) binds, `refused`
// (--no-bind-cores) does not; neither binds when pprun's own launcher started this worker
// (PIPESCOPE_STORE_FILE set), beside at least one other, and every local worker gets a core of
// its own. A job started by another launcher (torchrun) keeps the cores that launcher gave.
bool binds_cores(bool asked, bool refused, const WorkerEnvironment& env);

}  // namespace pipescope::exec
