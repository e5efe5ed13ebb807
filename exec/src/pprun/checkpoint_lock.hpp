// The exclusive lock a run holds on its --checkpoint-dir, taken before it looks for a manifest
// and held to its end: a second run started on the same folder is refused at once, instead of
// both passing the "no manifest yet" check and the first run's checkpoints being replaced by the
// second's. One-node runs: the launcher holds it and hands it to its workers; torchrun-style
// jobs: rank 0 holds it.
#pragma once

#include <optional>
#include <string>

namespace pipescope::exec {

struct RunOptions;
struct WorkerEnvironment;

// The variable under which a launcher's workers find the descriptor that holds the lock.
inline constexpr const char* kCheckpointLockVariable = "PIPESCOPE_CHECKPOINT_LOCK_FD";

class CheckpointDirLock {
 public:
  CheckpointDirLock() = default;
  CheckpointDirLock(CheckpointDirLock&& other) noexcept;
  CheckpointDirLock& operator=(CheckpointDirLock&& other) noexcept;
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;
  // Releases the lock; a folder this lock created and nothing has written into is removed.
  ~CheckpointDirLock();

  // The descriptor holding the lock (-1 when none), for the workers of a launch.
  int descriptor() const { return fd_; }

  // The lock this process needs for `options`: none without --checkpoint-dir, for a worker whose
  // launcher holds it (kCheckpointLockVariable names a descriptor locking the same folder), or
  // for a torchrun-style worker other than rank 0; otherwise the folder is created if missing
  // (the last part of its path only) and locked. Throws UsageError naming the folder when
  // another run holds it.
  static CheckpointDirLock for_run(const RunOptions& options, const std::optional<WorkerEnvironment>& env);

 private:
  int fd_ = -1;
  std::string created_;  // the folder, when this lock made it
};

}  // namespace pipescope::exec
