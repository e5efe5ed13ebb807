// The lock a run holds on its --checkpoint-dir (exec/src/pprun/checkpoint_lock.hpp). Scenario, in
// a fresh folder: a run's lock on ckpt (a folder it creates) refuses a second run's with
// "option --checkpoint-dir ckpt: another pprun run is writing its checkpoints there"; once the
// first ends, the folder it made and left empty is gone and a new lock is taken; a folder holding
// a file stays when its lock ends. A worker whose launcher hands it the lock (the descriptor under
// PIPESCOPE_CHECKPOINT_LOCK_FD) and a torchrun-style rank other than 0 take none; no
// --checkpoint-dir, no lock.
#include <stdlib.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <unistd.h>

#include "launcher.hpp"
#include "pipescope/core/errors.hpp"
#include "pprun/checkpoint_lock.hpp"
#include "pprun/options.hpp"

using namespace pipescope::exec;
namespace fs = std::filesystem;

namespace {

fs::path lock_test_folder() {
  const fs::path dir = fs::temp_directory_path() / ("pipescope-test-checkpoint-lock-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

RunOptions options_for_lock(const fs::path& checkpoint_dir) {
  return parse_run_options({"--model", "mlp", "--checkpoint-dir", checkpoint_dir.string()});
}

}  // namespace

TEST_CASE("a second run on a locked checkpoint folder is refused; the lock ends with its run", "[checkpoint_lock]") {
  const fs::path dir = lock_test_folder();
  const fs::path ckpt = dir / "ckpt";
  {
    const CheckpointDirLock first = CheckpointDirLock::for_run(options_for_lock(ckpt), std::nullopt);
    CHECK(first.descriptor() >= 0);
    CHECK(fs::is_directory(ckpt));
    CHECK_THROWS_AS(CheckpointDirLock::for_run(options_for_lock(ckpt), std::nullopt), pipescope::UsageError);
    CHECK_THROWS_WITH(CheckpointDirLock::for_run(options_for_lock(ckpt), std::nullopt),
                      Catch::Contains("option --checkpoint-dir " + ckpt.string() + ": another pprun run is writing its checkpoints there"));
  }
  CHECK_FALSE(fs::exists(ckpt));  // made by the lock and left empty: removed
  {
    const CheckpointDirLock again = CheckpointDirLock::for_run(options_for_lock(ckpt), std::nullopt);
    CHECK(again.descriptor() >= 0);
    std::ofstream(ckpt / "manifest.json") << "{}";
  }
  CHECK(fs::exists(ckpt / "manifest.json"));  // a folder with a run's files in it stays
  fs::remove_all(dir);
}

TEST_CASE("workers handed the lock, other ranks and runs without checkpoints take none", "[checkpoint_lock]") {
  const fs::path dir = lock_test_folder();
  const fs::path ckpt = dir / "ckpt";
  const CheckpointDirLock launcher = CheckpointDirLock::for_run(options_for_lock(ckpt), std::nullopt);
  REQUIRE(launcher.descriptor() >= 0);
  ::setenv(kCheckpointLockVariable, std::to_string(launcher.descriptor()).c_str(), 1);
  WorkerEnvironment rank0;
  CHECK(CheckpointDirLock::for_run(options_for_lock(ckpt), rank0).descriptor() == -1);
  ::unsetenv(kCheckpointLockVariable);
  WorkerEnvironment rank1;
  rank1.rank = 1;
  rank1.world_size = 2;
  CHECK(CheckpointDirLock::for_run(options_for_lock(ckpt), rank1).descriptor() == -1);
  CHECK(CheckpointDirLock::for_run(parse_run_options({"--model", "mlp"}), std::nullopt).descriptor() == -1);
  fs::remove_all(dir);
}
