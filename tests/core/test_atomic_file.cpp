// The one write path (write_file_atomic) and the check of stdout (finish_standard_output).
// Scenarios, each in a fresh folder:
// - a new file holds the content and gets 0666 less the umask (0644 under 022, 0600 under
//   077, 0664 under 002);
// - a 0600 file replaced keeps 0600 and nothing is left beside it (no *.tmp.*);
// - a symlink (relative, and a chain of two) stays a link and its target gets the content; a
//   dangling link gets its target created;
// - a FIFO is written through: still a FIFO afterwards, its reader gets the bytes;
// - /dev/fd/N and /proc/self/fd/N write to descriptor N where it stands: a log opened with
//   O_APPEND gets "second" and "third" after its "first"; a closed N is "Bad file descriptor";
// - a directory is refused with "is a directory" and left alone; a missing folder names the path;
// - a write cut short by RLIMIT_FSIZE (EFBIG, "File too large") leaves the old file as it was
//   and no temporary file;
// - stdout on /dev/full: finish_standard_output turns status 0 into 1 with one line
//   "prog: error: cannot write to standard output: No space left on device" (for a short text
//   refused at the final flush and for 100 kB refused on the way), and leaves a failed run's
//   status (2) alone.
#include <fcntl.h>
#include <signal.h>
#include <stdio_ext.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "pipescope/core/atomic_file.hpp"
#include "scratch_folder.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using pipescope::read_file;
using pipescope::write_file_atomic;

namespace {

// A fresh folder per case inside this process's own, which goes when the process ends.
fs::path fresh_dir(const std::string& name) {
  static const test_support::ScratchFolder scratch("atomic-file");
  return scratch.case_dir(name);
}

mode_t mode_of(const fs::path& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// Everything in `dir` but the names given: a leftover temporary file shows up here.
std::size_t entries(const fs::path& dir) {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), {}));
}

struct UmaskFor {
  mode_t old;
  explicit UmaskFor(mode_t mask) : old(::umask(mask)) {}
  ~UmaskFor() { ::umask(old); }
};

}  // namespace

TEST_CASE("a new output gets 0666 less the umask", "[atomic_file]") {
  const fs::path dir = fresh_dir("new");
  {
    UmaskFor mask(022);
    write_file_atomic((dir / "a.json").string(), "first");
  }
  {
    UmaskFor mask(077);
    write_file_atomic((dir / "b.json").string(), "second");
  }
  {
    UmaskFor mask(002);
    write_file_atomic((dir / "c.json").string(), "third");
  }
  REQUIRE(read_file((dir / "a.json").string()) == "first");
  REQUIRE(mode_of(dir / "a.json") == 0644);
  REQUIRE(mode_of(dir / "b.json") == 0600);
  REQUIRE(mode_of(dir / "c.json") == 0664);  // group-writable, as the user's umask asks
  REQUIRE(entries(dir) == 3);
}

TEST_CASE("a replaced file keeps its permission bits", "[atomic_file]") {
  const fs::path dir = fresh_dir("mode");
  const fs::path file = dir / "secret.json";
  write_file_atomic(file.string(), "old");
  REQUIRE(::chmod(file.c_str(), 0600) == 0);
  {
    UmaskFor mask(022);
    write_file_atomic(file.string(), "new");
  }
  REQUIRE(read_file(file.string()) == "new");
  REQUIRE(mode_of(file) == 0600);
  REQUIRE(::chmod(file.c_str(), 0750) == 0);
  write_file_atomic(file.string(), "newer");
  REQUIRE(mode_of(file) == 0750);
  REQUIRE(entries(dir) == 1);
}

TEST_CASE("a symlink stays a link and its target is replaced", "[atomic_file]") {
  const fs::path dir = fresh_dir("symlink");
  fs::create_directories(dir / "real");
  write_file_atomic((dir / "real" / "out.json").string(), "old");
  fs::create_symlink("real/out.json", dir / "link.json");  // relative to the link's folder
  fs::create_symlink("link.json", dir / "link2.json");     // a chain of two

  write_file_atomic((dir / "link.json").string(), "through one link");
  REQUIRE(fs::is_symlink(dir / "link.json"));
  REQUIRE(read_file((dir / "real" / "out.json").string()) == "through one link");

  write_file_atomic((dir / "link2.json").string(), "through two links");
  REQUIRE(fs::is_symlink(dir / "link2.json"));
  REQUIRE(fs::is_symlink(dir / "link.json"));
  REQUIRE(read_file((dir / "real" / "out.json").string()) == "through two links");

  fs::create_symlink("real/later.json", dir / "dangling.json");
  write_file_atomic((dir / "dangling.json").string(), "created");
  REQUIRE(fs::is_symlink(dir / "dangling.json"));
  REQUIRE(read_file((dir / "real" / "later.json").string()) == "created");
  REQUIRE(entries(dir / "real") == 2);

  fs::create_symlink("loop-b", dir / "loop-a");
  fs::create_symlink("loop-a", dir / "loop-b");
  REQUIRE_THROWS_WITH(write_file_atomic((dir / "loop-a").string(), "x"),
                      Contains("loop-a") && Contains("Too many levels"));
}

TEST_CASE("a FIFO is written through, not replaced", "[atomic_file]") {
  const fs::path dir = fresh_dir("fifo");
  const fs::path fifo = dir / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // A reader opened without blocking: the writer's open finds it, and a FIFO replaced by a file
  // would leave this reader with nothing instead of hanging the test.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(reader >= 0);
  write_file_atomic(fifo.string(), "through the pipe");
  char buffer[64] = {};
  const ssize_t n = ::read(reader, buffer, sizeof buffer);
  ::close(reader);
  REQUIRE(std::string(buffer, n > 0 ? static_cast<std::size_t>(n) : 0) == "through the pipe");
  REQUIRE(fs::is_fifo(fifo));
  REQUIRE(entries(dir) == 1);
}

TEST_CASE("/dev/fd/N and /proc/self/fd/N are written where the descriptor stands", "[atomic_file]") {
  const fs::path dir = fresh_dir("descriptor");
  const fs::path log = dir / "log";
  write_file_atomic(log.string(), "first\n");
  const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND);  // as the shell's >> opens it
  REQUIRE(fd >= 0);
  write_file_atomic("/dev/fd/" + std::to_string(fd), "second\n");
  write_file_atomic("/proc/self/fd/" + std::to_string(fd), "third\n");
  ::close(fd);
  REQUIRE(read_file(log.string()) == "first\nsecond\nthird\n");
  REQUIRE(entries(dir) == 1);
  REQUIRE_THROWS_WITH(write_file_atomic("/dev/fd/" + std::to_string(fd), "x"), Contains("Bad file descriptor"));
}

TEST_CASE("a directory or a missing folder is refused, naming the path", "[atomic_file]") {
  const fs::path dir = fresh_dir("refused");
  fs::create_directories(dir / "out");
  REQUIRE_THROWS_WITH(write_file_atomic((dir / "out").string(), "x"),
                      Contains((dir / "out").string() + " is a directory"));
  REQUIRE(fs::is_directory(dir / "out"));
  REQUIRE(fs::is_empty(dir / "out"));
  REQUIRE_THROWS_WITH(
      write_file_atomic((dir / "nowhere" / "x.json").string(), "x"),
      Contains("cannot write " + (dir / "nowhere" / "x.json").string() + ": No such file or directory"));
  REQUIRE_THROWS_WITH(write_file_atomic("", "x"), Contains("empty file name"));
  REQUIRE(entries(dir) == 1);
}

TEST_CASE("a write cut short leaves the old file as it was", "[atomic_file]") {
  const fs::path dir = fresh_dir("cut");
  const fs::path file = dir / "trace.json";
  write_file_atomic(file.string(), "the old content");
  // A file size limit makes write() fail with EFBIG part-way, as a full disk fails with ENOSPC.
  struct rlimit old_limit {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string error;
  try {
    write_file_atomic(file.string(), std::string(100000, 'x'));
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  REQUIRE(error == "cannot write " + file.string() + ": File too large");
  REQUIRE(read_file(file.string()) == "the old content");
  REQUIRE(entries(dir) == 1);
}

TEST_CASE("a read-only file is refused as the shell's > would refuse it", "[atomic_file]") {
  const fs::path dir = fresh_dir("read-only");
  const fs::path file = dir / "kept.json";
  write_file_atomic(file.string(), "kept");
  REQUIRE(::chmod(file.c_str(), 0444) == 0);
  const bool shell_could_write = ::access(file.c_str(), W_OK) == 0;  // root may write anything
  if (shell_could_write) {
    write_file_atomic(file.string(), "replaced");
    REQUIRE(read_file(file.string()) == "replaced");
    REQUIRE(mode_of(file) == 0444);
  } else {
    REQUIRE_THROWS_WITH(write_file_atomic(file.string(), "replaced"), Contains("kept.json: Permission denied"));
    REQUIRE(read_file(file.string()) == "kept");
  }
}

TEST_CASE("a failed write to stdout turns success into one error line", "[atomic_file]") {
  // stdout and stderr are pointed at files of this test for the duration, then restored.
  const fs::path dir = fresh_dir("stdout");
  std::fflush(stdout);
  std::fflush(stderr);
  const int saved_out = ::dup(STDOUT_FILENO), saved_err = ::dup(STDERR_FILENO);
  const int full = ::open("/dev/full", O_WRONLY);
  const int err_file = ::open((dir / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE((saved_out >= 0 && saved_err >= 0 && full >= 0 && err_file >= 0));
  ::dup2(full, STDOUT_FILENO);
  ::dup2(err_file, STDERR_FILENO);

  std::fputs("a result nobody will see\n", stdout);
  const int succeeded = pipescope::finish_standard_output("prog", 0);
  __fpurge(stdout);  // what /dev/full refused must not reach the real stdout later
  std::clearerr(stdout);
  std::cout << std::string(100000, 'x');  // past the buffer: fails inside the write, not at the end
  const int succeeded_big = pipescope::finish_standard_output("prog", 0);
  __fpurge(stdout);
  std::clearerr(stdout);
  std::cout.clear();
  std::fputs("another\n", stdout);
  const int failed = pipescope::finish_standard_output("prog", 2);
  __fpurge(stdout);
  std::clearerr(stdout);
  std::fputs("fine\n", stderr);

  std::fflush(stderr);
  ::dup2(saved_out, STDOUT_FILENO);
  ::dup2(saved_err, STDERR_FILENO);
  for (int fd : {saved_out, saved_err, full, err_file}) ::close(fd);
  std::cout.clear();

  REQUIRE(succeeded == 1);
  REQUIRE(succeeded_big == 1);
  REQUIRE(failed == 2);
  const std::string no_space = "prog: error: cannot write to standard output: No space left on device\n";
  REQUIRE(read_file((dir / "err").string()) == no_space + no_space + "fine\n");
  REQUIRE(pipescope::finish_standard_output("prog", 0) == 0);
}
