#include "pprun/checkpoint_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "launcher.hpp"
#include "pipescope/core/errors.hpp"
#include "pprun/options.hpp"

namespace pipescope::exec {
namespace {

// Whether this process inherited a descriptor (from its launcher) that locks `dir` already.
bool lock_inherited(const std::string& dir) {
  const char* text = std::getenv(kCheckpointLockVariable);
  if (!text) return false;
  int fd = -1;
  const char* end = text + std::strlen(text);
  if (std::from_chars(text, end, fd).ptr != end || fd < 0) return false;
  struct stat held {}, wanted {};
  if (::fstat(fd, &held) != 0 || ::stat(dir.c_str(), &wanted) != 0) return false;
  return held.st_dev == wanted.st_dev && held.st_ino == wanted.st_ino;
}

}  // namespace

CheckpointDirLock::CheckpointDirLock(CheckpointDirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), created_(std::exchange(other.created_, {})) {}

CheckpointDirLock& CheckpointDirLock::operator=(CheckpointDirLock&& other) noexcept {
  if (this != &other) {
    this->~CheckpointDirLock();
    fd_ = std::exchange(other.fd_, -1);
    created_ = std::exchange(other.created_, {});
  }
  return *this;
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!created_.empty()) ::rmdir(created_.c_str());  // only when still empty: nothing of a run is lost
  created_.clear();
}

CheckpointDirLock CheckpointDirLock::for_run(const RunOptions& options, const std::optional<WorkerEnvironment>& env) {
  CheckpointDirLock lock;
  const std::string& dir = options.checkpoint_dir;
  if (dir.empty() || (env && (env->rank != 0 || lock_inherited(dir)))) return lock;
  check_run_options(options);  // the folder's path can be used, or says why not
  if (::mkdir(dir.c_str(), 0777) == 0) lock.created_ = dir;
  else if (errno != EEXIST)
    throw UsageError(fmt::format("option --checkpoint-dir {}: cannot create it: {}", dir, std::strerror(errno)));
  lock.fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock.fd_ < 0) throw UsageError(fmt::format("option --checkpoint-dir {}: cannot open it: {}", dir, std::strerror(errno)));
  if (::flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EWOULDBLOCK)
      throw UsageError(fmt::format("option --checkpoint-dir {}: another pprun run is writing its checkpoints there (it "
                                   "holds the folder's lock); wait for it to end, or give another folder",
                                   dir));
    throw UsageError(fmt::format("option --checkpoint-dir {}: cannot lock it: {}", dir, std::strerror(error)));
  }
  return lock;
}

}  // namespace pipescope::exec
