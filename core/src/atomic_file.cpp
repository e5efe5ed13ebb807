#include "pipescope/core/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>

#include "pipescope/core/input_file.hpp"

namespace pipescope {
namespace {

[[noreturn]] void fail(const std::string& path, int error) {
  throw std::runtime_error("cannot write " + path + ": " + std::strerror(error));
}

// The descriptor that /dev/stdout, /dev/stderr, /dev/fd/N or /proc/self/fd/N names, if `path` is
// one of them: those are the process's own open files, written as the shell's `>` left them
// (its offset, its O_APPEND), never reopened at offset 0 or replaced.
std::optional<int> descriptor_named_by(const std::string& path) {
  if (path == "/dev/stdout") return STDOUT_FILENO;
  if (path == "/dev/stderr") return STDERR_FILENO;
  for (const std::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (path.size() <= prefix.size() || path.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string_view digits = std::string_view(path).substr(prefix.size());
    if (digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
    return std::stoi(std::string(digits));
  }
  return std::nullopt;
}

// Follows symlinks in the last component of `path` to the file a write must change, so that a
// link to an output stays a link. Only the last component: a symlinked folder on the way is
// harmless, since the temporary file and the rename stay inside that same folder.
std::string final_target(const std::string& path) {
  std::string current = path;
  for (int hops = 0; hops < 40; ++hops) {  // 40: the kernel's own limit on nested links
    if (descriptor_named_by(current)) return current;
    struct stat st;
    if (::lstat(current.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return current;
    char buffer[PATH_MAX];
    const ssize_t n = ::readlink(current.c_str(), buffer, sizeof buffer);
    if (n < 0) fail(path, errno);
    if (static_cast<std::size_t>(n) == sizeof buffer) fail(path, ENAMETOOLONG);
    const std::filesystem::path link_target(std::string(buffer, static_cast<std::size_t>(n)));
    // A relative link is relative to the folder that holds the link.
    current = link_target.is_absolute() ? link_target.string()
                                        : (std::filesystem::path(current).parent_path() / link_target).string();
  }
  fail(path, ELOOP);
}

// 0 when every byte went out, else the errno of the write that failed.
int write_all(int fd, std::string_view content) {
  const char* data = content.data();
  std::size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += n;
    left -= static_cast<std::size_t>(n);
  }
  return 0;
}

// A device or a FIFO is an endpoint, not a file to replace: it is written as the shell's `>`
// would write it (no truncation, which such files ignore, and no fsync, which they refuse).
void write_through(const std::string& path, const std::string& target, std::string_view content) {
  const int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) fail(path, errno);
  if (const int error = write_all(fd, content)) {
    ::close(fd);
    fail(path, error);
  }
  if (::close(fd) != 0) fail(path, errno);
}

std::string temp_path_beside(const std::string& target) {
  std::random_device rd;
  std::ostringstream out;
  out << target << ".tmp." << ::getpid() << "." << std::hex << rd();
  return out.str();
}

void write_to_descriptor(const std::string& path, int fd, std::string_view content) {
  if (::fcntl(fd, F_GETFL) < 0) fail(path, errno);
  if (fd == STDOUT_FILENO && std::fflush(stdout) != 0) fail(path, errno);  // what was printed comes first
  if (const int error = write_all(fd, content)) fail(path, error);
}

// Writes a temporary file beside `target` and renames it over `target`. `existing` is the
// target's status when it is a regular file (its mode and owner carry over), null for a new file.
void replace_atomically(const std::string& path, const std::string& target, std::string_view content,
                        const struct stat* existing) {
  const std::string temp = temp_path_beside(target);
  // Created with the old file's bits (never wider than they were, even for a moment) or with
  // 0666 for a new file, both less the umask; the old bits are then restored exactly.
  const mode_t create_mode = existing ? (existing->st_mode & 0666) : 0666;
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, create_mode);
  if (fd < 0) fail(path, errno);
  auto give_up = [&](int error) {
    ::close(fd);
    ::unlink(temp.c_str());
    fail(path, error);
  };
  if (existing) {
    // The owner carries over only where the process may give it (root, or the same owner);
    // otherwise the replacement belongs to the writer, as any new file would.
    if (::fchown(fd, existing->st_uid, existing->st_gid) != 0 && errno != EPERM) give_up(errno);
    if (::fchmod(fd, existing->st_mode & 07777) != 0) give_up(errno);
  }
  if (const int error = write_all(fd, content)) give_up(error);
  // fsync before rename: otherwise a crash can leave the renamed file empty.
  if (::fsync(fd) != 0) give_up(errno);
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    fail(path, error);
  }
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    fail(path, error);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view content) {
  if (path.empty()) throw std::runtime_error("cannot write an output with an empty file name");
  const std::string target = final_target(path);
  if (const auto fd = descriptor_named_by(target)) {
    write_to_descriptor(path, *fd, content);
    return;
  }
  struct stat st;
  if (::stat(target.c_str(), &st) != 0) {
    if (errno != ENOENT) fail(path, errno);
    replace_atomically(path, target, content, nullptr);
    return;
  }
  if (S_ISDIR(st.st_mode)) throw std::runtime_error(path + " is a directory, not a file to write");
  if (!S_ISREG(st.st_mode)) {
    write_through(path, target, content);
    return;
  }
  // A rename would replace a file that `>` could not write; refuse it as `>` would.
  if (::access(target.c_str(), W_OK) != 0) fail(path, errno);
  replace_atomically(path, target, content, &st);
}

std::string read_file(const std::string& path) {
  // Never an open that blocks (a FIFO) or a read that never ends (a device): regular files only.
  std::string problem;
  const int fd = open_regular_file(path, problem);
  if (fd < 0) throw std::runtime_error("cannot read " + path + ": " + problem);
  struct stat st {};
  if (::fstat(fd, &st) != 0) st.st_size = 0;
  std::string content;
  content.reserve(static_cast<std::size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      throw std::runtime_error("cannot read " + path + ": " + std::strerror(error));
    }
    content.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return content;
}

int finish_standard_output(const char* program, int status) {
  // A write that failed earlier left its errno behind, unless something failed since; only an
  // errno that a write can give is taken as the reason.
  const int earlier = errno;
  // std::cout shares stdout's buffer (the streams are synchronised with stdio), so one fflush
  // sends both; its errno is the reason when the last buffer could not be written.
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int now = errno;
  std::cout.flush();
  if (status != 0 || (flushed && !std::ferror(stdout) && std::cout.good())) return status;
  const int reason = !flushed && now != 0 ? now : earlier;
  const bool write_errno = reason == ENOSPC || reason == EDQUOT || reason == EFBIG || reason == EIO ||
                           reason == EBADF || reason == EPIPE || reason == EINVAL || reason == ENXIO || reason == EPERM;
  std::fprintf(stderr, "%s: error: cannot write to standard output: %s\n", program,
               write_errno ? std::strerror(reason) : "write error");
  return 1;
}

}  // namespace pipescope
