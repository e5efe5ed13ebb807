// The local launcher of `pprun --nproc-per-node N`: starts N workers (this executable again,
// with torchrun-style variables), watches them, reports the rank that failed first and stops
// the rest (process group, PR_SET_PDEATHSIG: no orphans).
#pragma once

#include <string>
#include <vector>

namespace pipescope::exec {

struct LaunchOptions {
  int nproc = 1;
  std::string executable;            // the worker program (normally /proc/self/exe)
  std::vector<std::string> args;     // its arguments (without argv[0])
  std::string master_addr;           // empty: MASTER_ADDR when set, else a private file store
                                     // (no listening socket) and Gloo on 127.0.0.1
  int master_port = 0;               // 0: MASTER_PORT when set, else a free loopback port
                                     // (only used with a master address)
  double grace_s = 65;               // how long the others may take to stop after a failure
  bool quiet = false;
  std::string program_name = "pprun";  // how error lines start
};

// Returns the exit status for pprun: 0 when every worker succeeded, else 1 (after printing
// which rank failed first).
int launch_local_workers(const LaunchOptions& options);

// A TCP port free on the loopback interface right now.
int find_free_port();

}  // namespace pipescope::exec
