#include "pipescope/core/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace pipescope {
namespace {

std::string errno_text() { return std::strerror(errno); }

std::string temp_path_beside(const std::string& path) {
  std::random_device rd;
  std::ostringstream out;
  out << path << ".tmp." << ::getpid() << "." << std::hex << rd();
  return out.str();
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view content) {
  const std::string temp = temp_path_beside(path);
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write " + path + ": " + errno_text());
  const char* data = content.data();
  std::size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string why = errno_text();
      ::close(fd);
      ::unlink(temp.c_str());
      throw std::runtime_error("cannot write " + path + ": " + why);
    }
    data += n;
    left -= static_cast<std::size_t>(n);
  }
  // fsync before rename: otherwise a crash can leave the renamed file empty.
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    std::string why = errno_text();
    ::unlink(temp.c_str());
    throw std::runtime_error("cannot write " + path + ": " + why);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    std::string why = errno_text();
    ::unlink(temp.c_str());
    throw std::runtime_error("cannot write " + path + ": " + why);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path + ": " + errno_text());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read " + path + ": read error");
  return buffer.str();
}

}  // namespace pipescope
