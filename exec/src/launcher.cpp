#include "launcher.hpp"

#include <fmt/format.h>
#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <thread>

#include "pipescope/core/errors.hpp"
#include "pprun/core_binding.hpp"
#include "rendezvous_store.hpp"

namespace pipescope::exec {
namespace {

int env_int(const char* name, const char* value) {
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (!*value || *end || v < 0 || v > 1 << 30)
    throw UsageError(fmt::format("environment variable {}='{}' is not a valid number", name, value));
  return static_cast<int>(v);
}

// The signal handlers only record the signal and pass it on to the workers; the launcher's
// loop does the rest (waiting, removing the folder), which a handler may not.
volatile std::sig_atomic_t g_worker_group = 0;
volatile std::sig_atomic_t g_signal = 0;
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

void forward_signal(int sig) {
  g_signal = sig;
  if (g_worker_group > 0) kill(-g_worker_group, sig);
}

// Installs forward_signal for the launch and puts the previous handlers back afterwards (a
// program may launch more than once, as the tests do).
class SignalForwarding {
 public:
  SignalForwarding() {
    g_signal = 0;
    struct sigaction action {};
    action.sa_handler = forward_signal;
    sigemptyset(&action.sa_mask);
    for (std::size_t i = 0; i < std::size(kForwardedSignals); ++i)
      sigaction(kForwardedSignals[i], &action, &previous_[i]);
  }
  ~SignalForwarding() {
    g_worker_group = 0;
    for (std::size_t i = 0; i < std::size(kForwardedSignals); ++i)
      sigaction(kForwardedSignals[i], &previous_[i], nullptr);
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  struct sigaction previous_[std::size(kForwardedSignals)]{};
};

// Blocks the forwarded signals while a worker is forked, so that none arrives between fork()
// and the moment the launcher knows the worker's pid (or, in the worker, before exec).
class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kForwardedSignals) sigaddset(&set, sig);
    sigprocmask(SIG_BLOCK, &set, &previous_);
  }
  ~SignalsBlocked() { sigprocmask(SIG_SETMASK, &previous_, nullptr); }
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t previous_{};
};

// Removes the rendezvous folders of this user's launchers that are gone: a launcher killed with
// SIGKILL (or by the machine) cannot remove its own, so the next launch does. A folder's name
// holds its launcher's pid, and its launcher holds a lock on it for as long as it lives; one
// whose process still lives, whose lock is held (a launcher in another pid namespace sharing
// /tmp), or that is another user's is left alone.
void remove_folders_of_dead_launchers() {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/tmp", error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("pprun-", 0) != 0) continue;
    pid_t pid = 0;
    const char* begin = name.c_str() + 6;
    const char* end = name.c_str() + name.size();
    const auto [after, parsed] = std::from_chars(begin, end, pid);
    if (parsed != std::errc() || after == end || *after != '-' || pid <= 0) continue;
    struct stat info {};
    if (lstat(entry.path().c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != geteuid()) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to ask about
    const int fd = ::open(entry.path().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      std::error_code ignored;
      std::filesystem::remove_all(entry.path(), ignored);
    }
    ::close(fd);
  }
}

// The private folder of the file store, removed when the launch ends, however it ends (and, after
// a SIGKILL, by the next launch: remove_folders_of_dead_launchers, which the lock held on it
// here keeps off a live launch's folder).
class PrivateStoreDir {
 public:
  PrivateStoreDir() {
    remove_folders_of_dead_launchers();
    std::string pattern = fmt::format("/tmp/pprun-{}-XXXXXX", getpid());  // mkdtemp: a new folder, mode 0700
    if (!mkdtemp(pattern.data()))
      throw std::runtime_error(
          fmt::format("cannot create a folder for the rendezvous in /tmp: {}", std::strerror(errno)));
    dir_ = pattern;
    lock_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock_fd_ >= 0) flock(lock_fd_, LOCK_EX | LOCK_NB);  // new and private: never held by another
  }
  ~PrivateStoreDir() { remove(); }
  PrivateStoreDir(const PrivateStoreDir&) = delete;
  PrivateStoreDir& operator=(const PrivateStoreDir&) = delete;
  void remove() {
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
    dir_.clear();
    if (lock_fd_ >= 0) ::close(lock_fd_);
    lock_fd_ = -1;
  }
  std::string store_file() const { return dir_ + "/store"; }

 private:
  std::string dir_;
  int lock_fd_ = -1;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

// A pipe on which each worker that fails writes its rank (report_failure_to_launcher) before
// it tears anything down. Writes of a few bytes to a pipe are atomic and keep their order, and
// a pipe needs no disk: a rank that failed for a full disk can still say so.
class FailureReports {
 public:
  FailureReports() {
    if (pipe2(fds_, O_CLOEXEC) != 0) fds_[0] = fds_[1] = -1;  // no reports: exits stand in
  }
  ~FailureReports() {
    for (int fd : fds_)
      if (fd >= 0) close(fd);
  }
  FailureReports(const FailureReports&) = delete;
  FailureReports& operator=(const FailureReports&) = delete;

  // In a forked worker, before exec: the write end survives exec, under a name it can find.
  void hand_to_worker() const {
    if (fds_[1] < 0) return;
    fcntl(fds_[1], F_SETFD, 0);
    setenv("PIPESCOPE_FAILURE_FD", std::to_string(fds_[1]).c_str(), 1);
  }
  // In the launcher once every worker is forked: only the workers hold the write end now.
  void workers_started() {
    if (fds_[1] >= 0) close(fds_[1]);
    fds_[1] = -1;
    if (fds_[0] >= 0) fcntl(fds_[0], F_SETFL, fcntl(fds_[0], F_GETFL) | O_NONBLOCK);
  }
  void read_available() {
    if (fds_[0] < 0) return;
    char buffer[256];
    for (ssize_t n; (n = read(fds_[0], buffer, sizeof buffer)) > 0;) text_.append(buffer, static_cast<std::size_t>(n));
  }
  // The rank of the first complete report, if any.
  std::optional<int> first_rank() const {
    const auto end = text_.find('\n');
    if (end == std::string::npos) return std::nullopt;
    int rank = -1;
    auto [ptr, ec] = std::from_chars(text_.data(), text_.data() + end, rank);
    if (ec != std::errc() || ptr != text_.data() + end) return std::nullopt;
    return rank;
  }

 private:
  int fds_[2] = {-1, -1};
  std::string text_;
};

// Dies of `sig` as if the launcher had never caught it (its shell then sees the usual status).
[[noreturn]] void die_of(int sig) {
  std::signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  std::raise(sig);
  std::_Exit(128 + sig);
}

}  // namespace

void check_local_worker_count(int nproc) {
  if (nproc < 1) throw UsageError(fmt::format("option --nproc-per-node: {} is below the minimum 1", nproc));
  if (nproc > kMaxLocalWorkers)
    throw UsageError(fmt::format(
        "option --nproc-per-node: {} workers on one node is more than the limit {} (each is a LibTorch process)", nproc,
        kMaxLocalWorkers));
}

int parse_master_port(const std::string& value) {
  int port = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, port);
  if (value.empty() || ec != std::errc() || ptr != end || port < 1 || port > 65535)
    throw UsageError(fmt::format("environment variable MASTER_PORT='{}' is not a port number (1-65535)", value));
  return port;
}

namespace {

// The workers of a launch, by rank (-1 once a worker is gone), and their process group.
struct StartedWorkers {
  std::vector<pid_t> pids;
  pid_t group = 0;
};

// In a forked worker: the torchrun-style variables of `rank`, the run's store and secret, the
// descriptors it inherits, then the worker program itself. Never returns.
[[noreturn]] void exec_worker(const LaunchOptions& options, int rank, pid_t launcher, pid_t group,
                              const std::string& store_file, const std::string& secret,
                              const FailureReports& failure_reports, std::vector<char*>& argv) {
  // Worker: one process group for all workers, and death with the launcher.
  for (int sig : kForwardedSignals) std::signal(sig, SIG_DFL);
  setpgid(0, group);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(1);
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(options.nproc).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(options.nproc).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);  // Gloo listens on the loopback interface only
  unsetenv("MASTER_PORT");                // no TCP store: nothing to say
  setenv("PIPESCOPE_STORE_FILE", store_file.c_str(), 1);
  setenv("PIPESCOPE_RUN_SECRET", secret.c_str(), 1);
  failure_reports.hand_to_worker();
  for (const auto& [variable, fd] : options.descriptors_for_workers) {
    fcntl(fd, F_SETFD, 0);  // survives exec
    setenv(variable.c_str(), std::to_string(fd).c_str(), 1);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execv(options.executable.c_str(), argv.data());
  std::fprintf(stderr, "%s: error: rank %d: cannot start %s: %s\n", options.program_name.c_str(), rank,
               options.executable.c_str(), std::strerror(errno));
  _exit(127);
}

// Forks every worker (fewer when a signal comes first) into one process group; a failed fork
// kills and reaps the ones already started and throws.
StartedWorkers start_workers(const LaunchOptions& options, const std::string& store_file, const std::string& secret,
                             const FailureReports& failure_reports) {
  std::vector<std::string> argv_storage{options.executable};
  argv_storage.insert(argv_storage.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  argv.reserve(argv_storage.size() + 1);
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t launcher = getpid();
  StartedWorkers started{std::vector<pid_t>(static_cast<std::size_t>(options.nproc), -1), 0};
  std::fflush(nullptr);
  for (int rank = 0; rank < options.nproc && !g_signal; ++rank) {
    SignalsBlocked blocked;
    const pid_t pid = fork();
    if (pid < 0) {
      const std::string error = std::strerror(errno);
      if (started.group > 0) {
        kill(-started.group, SIGKILL);
        while (waitpid(-started.group, nullptr, 0) > 0) {
        }
      }
      throw std::runtime_error(fmt::format("cannot start rank {}: fork: {}", rank, error));
    }
    if (pid == 0) exec_worker(options, rank, launcher, started.group, store_file, secret, failure_reports, argv);
    if (started.group == 0) started.group = pid;
    setpgid(pid, started.group);  // also here: whichever of parent and child runs first
    started.pids[rank] = pid;
    g_worker_group = started.group;
  }
  return started;
}

// How the workers ended, as watch_workers saw it.
struct WorkersEnded {
  std::vector<bool> stopped;                         // by SIGSTOP or the like, when last seen
  std::optional<std::pair<int, int>> first_failure;  // rank, status
  std::vector<int> statuses;                         // each rank's exit status
  std::optional<int> first_crash;                    // the first rank to die of a signal it was not sent by us
  bool killed = false;
  std::vector<int> killed_ranks;
};

// Waits for every worker; after the first failure (or a signal to the launcher) the others get
// options.grace to stop before the group is killed.
WorkersEnded watch_workers(const LaunchOptions& options, StartedWorkers& workers, FailureReports& failure_reports) {
  std::vector<pid_t>& pids = workers.pids;
  int remaining = static_cast<int>(std::count_if(pids.begin(), pids.end(), [](pid_t p) { return p > 0; }));
  WorkersEnded ended;
  ended.stopped.assign(static_cast<std::size_t>(options.nproc), false);
  ended.statuses.assign(static_cast<std::size_t>(options.nproc), 0);
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  auto rank_of = [&](pid_t pid) {
    for (int r = 0; r < options.nproc; ++r)
      if (pids[r] == pid) return r;
    return -1;
  };
  while (remaining > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
    if (pid > 0) {
      const int rank = rank_of(pid);
      if (rank < 0) continue;
      if (WIFSTOPPED(status) || WIFCONTINUED(status)) {
        ended.stopped[rank] = WIFSTOPPED(status);
        continue;
      }
      pids[rank] = -1;
      ended.statuses[rank] = status;
      --remaining;
      // Killed by a signal the launcher did not send (SIGKILL from outside, a crash): such a
      // rank cannot report its failure, and the others' failures follow from it.
      if (WIFSIGNALED(status) && !ended.killed && !g_signal && !ended.first_crash) ended.first_crash = rank;
      if (failed(status) && !ended.first_failure && !g_signal) {
        ended.first_failure = {rank, status};
        // The others notice through the closed connections (or their own timeouts) and report
        // what they were blocked in; whoever has not stopped by then is killed.
        kill_at = std::chrono::steady_clock::now() + options.grace;
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    failure_reports.read_available();
    if (g_signal && !kill_at) kill_at = std::chrono::steady_clock::now() + options.grace;
    // A stopped worker reports nothing more: once the run has failed, it is not waited for.
    bool only_stopped_left = kill_at.has_value();
    for (int r = 0; r < options.nproc; ++r)
      if (pids[r] > 0 && !ended.stopped[r]) only_stopped_left = false;
    if (kill_at && !ended.killed && (only_stopped_left || std::chrono::steady_clock::now() >= *kill_at)) {
      for (int r = 0; r < options.nproc; ++r)
        if (pids[r] > 0) ended.killed_ranks.push_back(r);
      kill(-workers.group, SIGKILL);
      ended.killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ended;
}

// The one line that names the rank that failed first, and what became of the others.
void print_first_failure(const LaunchOptions& options, const WorkersEnded& ended, FailureReports& failure_reports) {
  // The order of exits is not the order of failures: a failing rank closes its connections
  // as it unwinds, and the ranks waiting on it may exit before it does. So: a rank that died
  // of a signal from outside failed first; else the first rank to report its failure; else
  // the first to exit.
  failure_reports.read_available();
  const auto reported = failure_reports.first_rank();
  std::pair<int, int> first_failure = *ended.first_failure;
  if (ended.first_crash)
    first_failure = {*ended.first_crash, ended.statuses[*ended.first_crash]};
  else if (reported && *reported >= 0 && *reported < options.nproc)
    first_failure = {*reported, ended.statuses[*reported]};
  const bool any_stopped = std::ranges::any_of(ended.killed_ranks, [&](int r) { return ended.stopped[r]; });
  const std::string others =
      !ended.killed ? std::string("the other ranks stopped")
      : any_stopped
          ? fmt::format("killed rank(s) {}, stopped (SIGSTOP) or still running", fmt::join(ended.killed_ranks, ", "))
          : fmt::format("killed rank(s) {} still running {:g} s later", fmt::join(ended.killed_ranks, ", "),
                        std::chrono::duration<double>(options.grace).count());
  std::fprintf(stderr, "%s: error: rank %d failed first (%s); %s\n", options.program_name.c_str(), first_failure.first,
               describe_status(first_failure.second).c_str(), others.c_str());
}

}  // namespace

int launch_local_workers(const LaunchOptions& options) {
  check_local_worker_count(options.nproc);
  // Every rank is here: they meet through the file store, whatever MASTER_ADDR and MASTER_PORT
  // say, but a MASTER_PORT that could never have worked is still a mistake worth a line.
  if (const char* port = std::getenv("MASTER_PORT"); port && *port) parse_master_port(port);
  const std::string secret = random_hex(16);  // 128 bits: the run's secret, known to its workers only

  SignalForwarding forwarding;  // before the folder exists: a signal from now on removes it
  PrivateStoreDir store_dir;
  FailureReports failure_reports;  // which rank failed first, as the ranks tell it
  StartedWorkers workers = start_workers(options, store_dir.store_file(), secret, failure_reports);
  // A signal that came while the workers were being started reaches the ones already running.
  if (g_signal && workers.group > 0) kill(-workers.group, g_signal);
  failure_reports.workers_started();

  WorkersEnded ended = watch_workers(options, workers, failure_reports);
  g_worker_group = 0;
  if (const int sig = g_signal) {
    store_dir.remove();
    die_of(sig);
  }
  if (ended.first_failure) {
    print_first_failure(options, ended, failure_reports);
    return 1;
  }
  return 0;
}

void report_failure_to_launcher(int rank) {
  static bool reported = false;
  const char* fd_text = std::getenv("PIPESCOPE_FAILURE_FD");
  if (reported || !fd_text) return;
  reported = true;
  int fd = -1;
  const char* end = fd_text + std::strlen(fd_text);
  if (std::from_chars(fd_text, end, fd).ptr != end || fd < 0) return;
  const std::string line = std::to_string(rank) + "\n";
  // One write of a few bytes: atomic on a pipe, so reports never interleave.
  [[maybe_unused]] const ssize_t written = write(fd, line.data(), line.size());
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
  if (const char* v = std::getenv("MASTER_PORT")) env.master_port = parse_master_port(v);
  if (const char* v = std::getenv("PIPESCOPE_STORE_FILE")) env.store_file = v;
  if (const char* v = std::getenv("PIPESCOPE_RUN_SECRET")) env.run_secret = v;
  return env;
}

WorldOptions world_options(const WorkerEnvironment& env, std::chrono::milliseconds timeout) {
  WorldOptions world;
  world.store_file = env.store_file;
  world.master_addr = env.master_addr;
  world.master_port = env.master_port;
  world.rank = env.rank;
  world.world_size = env.world_size;
  world.local_world_size = env.local_world_size;
  world.run_secret = env.run_secret;
  world.timeout = timeout;
  return world;
}

int local_world_size_for_binding(const WorkerEnvironment& env) {
  if (env.local_world_size < 1)
    throw UsageError("--bind-cores needs LOCAL_WORLD_SIZE (pprun's launcher and torchrun set it)");
  return env.local_world_size;
}

bool binds_cores(bool asked, bool refused, const WorkerEnvironment& env) {
  if (asked || refused) return asked;
  return !env.store_file.empty() && env.local_world_size >= 2 &&
         allowed_cores().size() >= static_cast<std::size_t>(env.local_world_size);
}

}  // namespace pipescope::exec
