#include "pipescope/core/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pipescope {
namespace {

std::optional<std::string> kind_of_mode(mode_t mode) {
  if (S_ISREG(mode)) return std::nullopt;
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

}  // namespace

std::optional<std::string> non_regular_kind(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return std::nullopt;  // missing: the reader says so
  return kind_of_mode(info.st_mode);
}

std::optional<std::string> input_file_problem(const std::string& path, std::string_view expected) {
  if (auto kind = non_regular_kind(path)) return path + " is " + *kind + ", expected " + std::string(expected);
  return std::nullopt;
}

int open_regular_file(const std::string& path, std::string& problem) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    problem = std::strerror(errno);
    return -1;
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    problem = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  if (auto kind = kind_of_mode(info.st_mode)) {
    problem = *kind + ", not a regular file";
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace pipescope
