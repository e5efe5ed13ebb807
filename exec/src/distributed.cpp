// The process start-up of user programs: the launcher's side or one worker's, with its world.
#include "pipescope/exec/distributed.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include "error_text.hpp"
#include "launcher.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/exec/runtime.hpp"
#include "threads.hpp"

namespace pipescope::exec {

int run_pipeline_processes(int argc, char** argv, const std::function<void(ProcessContext&)>& body, ProcessOptions options) {
  // Workers run as /proc/self/exe: the program's own name comes from the link.
  std::error_code no_link;
  std::string program = std::filesystem::read_symlink("/proc/self/exe", no_link).filename().string();
  if (no_link || program.empty()) program = argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "pipeline";
  std::vector<std::string> args;
  int nproc = 1;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      std::string value;
      if (a == "--nproc-per-node") {
        if (i + 1 >= argc) throw UsageError("option --nproc-per-node needs a value");
        value = argv[++i];
      } else if (a.rfind("--nproc-per-node=", 0) == 0) {
        value = a.substr(std::string("--nproc-per-node=").size());
      } else {
        args.push_back(a);
        continue;
      }
      std::size_t used = 0;
      nproc = std::stoi(value, &used);
      if (used != value.size() || nproc < 1) throw UsageError(fmt::format("option --nproc-per-node '{}': not a positive number", value));
      check_local_worker_count(nproc);
    }
  } catch (const std::invalid_argument&) {
    std::fprintf(stderr, "%s: error: option --nproc-per-node: not a number\n", program.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 2;
  }

  std::optional<WorkerEnvironment> env;
  try {
    env = worker_environment_from_env();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 2;
  }
  if (!env) {
    LaunchOptions launch;
    launch.nproc = nproc;
    launch.executable = "/proc/self/exe";
    launch.args = args;
    launch.quiet = true;
    launch.program_name = program;
    try {
      return launch_local_workers(launch);
    } catch (const UsageError& e) {
      std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
      return 1;
    }
  }

  try {
    set_rank_threads(options.threads_per_rank);
    ProcessContext context;
    context.device = make_local_device(options.device, env->local_rank);
    World world = make_world(context.device->device(), world_options(*env, options.timeout));
    context.rank = env->rank;
    context.world_size = env->world_size;
    context.local_rank = env->local_rank;
    context.world = world.transport.get();
    context.store = world.store;
    context.args = args;
    body(context);
    // Rank 0 may serve the store: every rank is done before any leaves.
    auto done = at::zeros({1});
    world.transport->all_reduce_sum(done)->wait(options.timeout);
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: error: rank %d: %s\n", program.c_str(), env->rank, first_line(e.what()).c_str());
    return 2;
  } catch (const ScheduleError& e) {
    std::fprintf(stderr, "%s: error: rank %d: %s\n", program.c_str(), env->rank, first_line(e.what()).c_str());
    return 2;
  } catch (const RuntimeError& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), first_line(e.what()).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: rank %d: %s\n", program.c_str(), env->rank, first_line(e.what()).c_str());
  }
  return 1;
}

}  // namespace pipescope::exec
