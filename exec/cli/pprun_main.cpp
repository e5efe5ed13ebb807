// pprun: runs a pipeline schedule for real. With --nproc-per-node N it starts N local workers
// (itself again); under torchrun-style variables (RANK, WORLD_SIZE, ...) it is one worker, a
// client of PipelineEngine (src/pprun/worker.cpp). Whatever the path out, stdout is checked
// last: text that could not be written is a failure (pipescope/core/atomic_file.hpp).
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/terminal_text.hpp"
#include "launcher.hpp"
#include "pprun/checkpoint_lock.hpp"
#include "pprun/core_binding.hpp"
#include "pprun/options.hpp"
#include "pprun/worker.hpp"

namespace {

int usage_error(const std::string& message) {
  std::fprintf(stderr, "pprun: error: %s\n", pipescope::printable(message).c_str());
  return 2;
}

int run_pprun(const std::vector<std::string>& args) {
  using namespace pipescope::exec;
  RunOptions options;
  std::optional<WorkerEnvironment> env;
  RunPlan plan;
  CheckpointDirLock checkpoint_lock;  // held until this process ends (a launcher: after its workers)
  try {
    options = parse_run_options(args);
    if (options.show_help) {
      std::fputs(run_options_help().c_str(), stdout);
      return 0;
    }
    if (options.show_version) {
      std::printf("pprun %s\n", PIPESCOPE_VERSION);
      return 0;
    }
    env = worker_environment_from_env();
    if (env) check_options_agree_with_environment(options, *env);
    // Before the folder is looked at: a second run on it is refused, not let in beside the first.
    checkpoint_lock = CheckpointDirLock::for_run(options, env);
    // Everything checkable is checked before any worker starts.
    plan = make_run_plan(options, env ? env->world_size : options.nproc_per_node);
    if (options.bind_cores)
      core_share(allowed_cores(), env ? env->local_rank : 0, env ? local_world_size_for_binding(*env) : options.nproc_per_node);
  } catch (const pipescope::UsageError& e) {
    return usage_error(e.what());
  } catch (const pipescope::ScheduleError& e) {
    return usage_error(e.what());
  } catch (const std::exception& e) {
    return usage_error(e.what());
  }
  if (env) return run_worker(plan, *env);
  try {
    LaunchOptions launch;
    launch.nproc = options.nproc_per_node;
    launch.executable = "/proc/self/exe";
    launch.args = args;
    launch.quiet = options.quiet;
    if (checkpoint_lock.descriptor() >= 0)
      launch.descriptors_for_workers.emplace_back(kCheckpointLockVariable, checkpoint_lock.descriptor());
    return launch_local_workers(launch);
  } catch (const pipescope::UsageError& e) {
    return usage_error(e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pprun: error: %s\n", pipescope::printable(e.what()).c_str());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  return pipescope::finish_standard_output("pprun", run_pprun(std::vector<std::string>(argv + 1, argv + argc)));
}
