// A trace file's text, mapped or decompressed (file_text.hpp).
#include "file_text.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gzip.hpp"
#include "pipescope/core/input_file.hpp"
#include "pipescope/traces/trace.hpp"

namespace pipescope::traces::detail {
namespace {

constexpr std::string_view kFileTextByteOrderMark = "\xEF\xBB\xBF";

// Reads the rest of `fd` into `bytes` (a file whose mapping failed).
void read_all(int fd, const std::string& path, std::string& bytes) {
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n == 0) return;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw TraceError(path + ": cannot read the file: " + std::strerror(errno));
    }
    bytes.append(chunk, static_cast<std::size_t>(n));
  }
}

std::size_t page_size() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

}  // namespace

FileText::FileText(const std::string& path, std::string_view expected) {
  if (auto problem = input_file_problem(path, expected)) throw TraceError(*problem);
  std::string problem;
  const int fd = open_regular_file(path, problem);
  if (fd < 0) throw TraceError(path + ": cannot open the file: " + problem);
  try {
    map(fd, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  std::string_view bytes = mapping_ ? std::string_view(mapping_, file_bytes_) : std::string_view(owned_);
  if (looks_gzipped(bytes)) {
    std::string plain = gunzip(bytes, path);
    if (mapping_) ::munmap(mapping_, mapping_bytes_), mapping_ = nullptr;
    owned_ = std::move(plain);
    gzipped_ = true;
    bytes = owned_;
  }
  if (!mapping_) {
    owned_.reserve(owned_.size() + kTextPadding);
    bytes = owned_;
  }
  if (bytes.starts_with(kFileTextByteOrderMark)) bytes.remove_prefix(kFileTextByteOrderMark.size());
  text_ = bytes;
}

// The file mapped with anonymous zero pages after it for the padding (reserve the whole range,
// then map the file over its start); read into owned_ when it cannot be mapped.
void FileText::map(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw TraceError(path + ": cannot read the file: " + std::strerror(errno));
  file_bytes_ = static_cast<std::uint64_t>(st.st_size);
  if (file_bytes_ > 0) {
    const std::size_t page = page_size();
    const std::size_t bytes = (static_cast<std::size_t>(file_bytes_) + kTextPadding + page - 1) / page * page;
    void* range = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (range != MAP_FAILED) {
      void* file = ::mmap(range, static_cast<std::size_t>(file_bytes_), PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
      if (file != MAP_FAILED) {
        mapping_ = static_cast<char*>(file);
        mapping_bytes_ = bytes;
        ::madvise(mapping_, static_cast<std::size_t>(file_bytes_), MADV_SEQUENTIAL);
        return;
      }
      ::munmap(range, bytes);
    }
  }
  read_all(fd, path, owned_);
  file_bytes_ = owned_.size();
}

FileText::~FileText() {
  if (mapping_) ::munmap(mapping_, mapping_bytes_);
}

void FileText::release_before(const char* at) {
  if (!mapping_ || at < mapping_ || at > mapping_ + file_bytes_) return;
  const std::size_t page = page_size();
  const std::size_t upto = static_cast<std::size_t>(at - mapping_) / page * page;
  if (upto <= released_bytes_) return;
  ::madvise(mapping_ + released_bytes_, upto - released_bytes_, MADV_DONTNEED);
  released_bytes_ = upto;
}

}  // namespace pipescope::traces::detail
