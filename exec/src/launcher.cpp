#include "launcher.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <thread>

#include "pipescope/core/errors.hpp"

namespace pipescope::exec {
namespace {

int env_int(const char* name, const char* value) {
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (!*value || *end || v < 0 || v > 1 << 30) throw UsageError(fmt::format("environment variable {}='{}' is not a valid number", name, value));
  return static_cast<int>(v);
}

volatile std::sig_atomic_t g_worker_group = 0;

// A signal to the launcher stops the workers too, then the launcher dies of it.
void forward_signal(int sig) {
  if (g_worker_group > 0) kill(-g_worker_group, SIGKILL);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

}  // namespace

int find_free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    throw std::runtime_error(fmt::format("cannot find a free loopback port: {}", error));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

int launch_local_workers(const LaunchOptions& options) {
  std::string master_addr = options.master_addr;
  if (master_addr.empty()) {
    const char* env = std::getenv("MASTER_ADDR");
    if (env && *env) master_addr = env;
  }
  // Without a master address every rank is here: they meet through a file store in a private
  // directory, so nothing listens on the network (Gloo itself uses the loopback interface).
  std::string store_dir;
  if (master_addr.empty()) {
    char pattern[] = "/tmp/pprun-XXXXXX";
    if (!mkdtemp(pattern)) throw std::runtime_error(fmt::format("mkdtemp: {}", std::strerror(errno)));
    store_dir = pattern;
    master_addr = "127.0.0.1";
  }
  const std::string store_file = store_dir.empty() ? "" : store_dir + "/store";
  struct RemoveDir {
    std::string dir;
    ~RemoveDir() {
      if (!dir.empty()) {
        std::error_code ignored;
        std::filesystem::remove_all(dir, ignored);
      }
    }
  } remove_store_dir{store_dir};
  int master_port = options.master_port;
  if (master_port == 0) {
    const char* env = std::getenv("MASTER_PORT");
    master_port = env && *env ? std::atoi(env) : find_free_port();
  }

  std::vector<std::string> argv_storage{options.executable};
  argv_storage.insert(argv_storage.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t launcher = getpid();
  std::vector<pid_t> pids(static_cast<std::size_t>(options.nproc), -1);
  pid_t group = 0;
  std::fflush(nullptr);
  for (int rank = 0; rank < options.nproc; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      if (group > 0) kill(-group, SIGKILL);
      throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
    }
    if (pid == 0) {
      // Worker: one process group for all workers, and death with the launcher.
      setpgid(0, group);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(1);
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(options.nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(options.nproc).c_str(), 1);
      setenv("MASTER_ADDR", master_addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(master_port).c_str(), 1);
      if (!store_file.empty())
        setenv("PIPESCOPE_STORE_FILE", store_file.c_str(), 1);
      else
        unsetenv("PIPESCOPE_STORE_FILE");
      execv(options.executable.c_str(), argv.data());
      std::fprintf(stderr, "%s: error: rank %d: cannot start %s: %s\n", options.program_name.c_str(), rank, options.executable.c_str(), std::strerror(errno));
      _exit(127);
    }
    if (group == 0) group = pid;
    setpgid(pid, group);  // also here: whichever of parent and child runs first
    pids[rank] = pid;
  }
  g_worker_group = group;
  std::signal(SIGINT, forward_signal);
  std::signal(SIGTERM, forward_signal);

  int remaining = options.nproc;
  std::optional<std::pair<int, int>> first_failure;  // rank, status
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  bool killed = false;
  std::vector<int> killed_ranks;
  while (remaining > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      int rank = -1;
      for (int r = 0; r < options.nproc; ++r)
        if (pids[r] == pid) rank = r;
      if (rank < 0) continue;
      pids[rank] = -1;
      --remaining;
      if (failed(status) && !first_failure) {
        first_failure = {rank, status};
        // The others notice through their own timeouts and report what they were blocked in;
        // whoever has not stopped by then is killed.
        kill_at = std::chrono::steady_clock::now() + options.grace;
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    if (kill_at && !killed && std::chrono::steady_clock::now() >= *kill_at) {
      for (int r = 0; r < options.nproc; ++r)
        if (pids[r] > 0) killed_ranks.push_back(r);
      kill(-group, SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  g_worker_group = 0;
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (first_failure) {
    const std::string others =
        killed ? fmt::format("killed rank(s) {} still running {:g} s later", fmt::join(killed_ranks, ", "),
                            std::chrono::duration<double>(options.grace).count())
               : std::string("the other ranks stopped");
    std::fprintf(stderr, "%s: error: rank %d failed first (%s); %s\n", options.program_name.c_str(), first_failure->first,
                 describe_status(first_failure->second).c_str(), others.c_str());
    return 1;
  }
  return 0;
}

std::optional<WorkerEnvironment> worker_environment_from_env() {
  const char* rank = std::getenv("RANK");
  if (!rank) return std::nullopt;
  WorkerEnvironment env;
  env.rank = env_int("RANK", rank);
  const char* world = std::getenv("WORLD_SIZE");
  if (!world) throw UsageError("environment variable RANK is set but WORLD_SIZE is not");
  env.world_size = env_int("WORLD_SIZE", world);
  if (env.world_size < 1 || env.rank >= env.world_size)
    throw UsageError(fmt::format("environment: RANK {} is not below WORLD_SIZE {}", env.rank, env.world_size));
  if (const char* v = std::getenv("LOCAL_RANK")) env.local_rank = env_int("LOCAL_RANK", v);
  if (const char* v = std::getenv("LOCAL_WORLD_SIZE")) env.local_world_size = env_int("LOCAL_WORLD_SIZE", v);
  if (const char* v = std::getenv("MASTER_ADDR"); v && *v) env.master_addr = v;
  if (const char* v = std::getenv("MASTER_PORT")) env.master_port = env_int("MASTER_PORT", v);
  if (const char* v = std::getenv("PIPESCOPE_STORE_FILE")) env.store_file = v;
  return env;
}

WorldOptions world_options(const WorkerEnvironment& env, std::chrono::milliseconds timeout) {
  WorldOptions world;
  world.store_file = env.store_file;
  world.master_addr = env.master_addr;
  world.master_port = env.master_port;
  world.rank = env.rank;
  world.world_size = env.world_size;
  world.timeout = timeout;
  return world;
}

int local_world_size_for_binding(const WorkerEnvironment& env) {
  if (env.local_world_size < 1)
    throw UsageError("--bind-cores needs LOCAL_WORLD_SIZE (pprun's launcher and torchrun set it)");
  return env.local_world_size;
}

}  // namespace pipescope::exec
