// A trace file's text, mapped, inflated by chunks or decompressed (file_text.hpp).
#include "file_text.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

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

GzipChunks::GzipChunks(std::string_view compressed, std::string source)
    : compressed_(compressed), source_(std::move(source)) {
  // 15 + 32: gzip and zlib headers alike.
  if (inflateInit2(&stream_, 15 + 32) != Z_OK) throw TraceError(source_ + ": cannot start gzip decompression");
  stream_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed_.data()));
}

GzipChunks::~GzipChunks() { inflateEnd(&stream_); }

bool GzipChunks::append_to(std::string& window) {
  const std::size_t before = window.size();
  while (!ended_ && window.size() == before) {
    const std::size_t consumed = stream_.total_in;
    stream_.avail_in = static_cast<uInt>(std::min<std::size_t>(compressed_.size() - consumed, UINT_MAX));
    window.resize(before + kChunkBytes);
    stream_.next_out = reinterpret_cast<Bytef*>(window.data() + before);
    stream_.avail_out = static_cast<uInt>(kChunkBytes);
    const int status = inflate(&stream_, Z_NO_FLUSH);
    window.resize(before + kChunkBytes - stream_.avail_out);
    if (status == Z_STREAM_END) {
      ended_ = true;
    } else if (status == Z_BUF_ERROR && stream_.avail_in == 0) {
      // No input left and the stream has not ended.
      throw TraceError(source_ + ": gzip data is truncated after " + std::to_string(stream_.total_in) + " bytes");
    } else if (status != Z_OK && status != Z_BUF_ERROR) {
      const std::string why = stream_.msg ? stream_.msg : "corrupt data";
      throw TraceError(source_ + ": gzip data is corrupt after byte " + std::to_string(stream_.total_in) + " (" + why +
                       ")");
    }
  }
  return window.size() > before;
}

FileText::FileText(const std::string& path, std::string_view expected) : path_(path) {
  if (auto problem = input_file_problem(path, expected)) throw TraceError(*problem);
  std::string problem;
  const int fd = open_regular_file(path, problem);
  if (fd < 0) throw TraceError(path + ": cannot open the file: " + problem);
  try {
    map(fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  raw_ = mapping_ ? std::string_view(mapping_, file_bytes_) : std::string_view(owned_);
  gzipped_ = looks_gzipped(raw_);
}

std::string_view FileText::text() {
  if (text_ready_) return text_;
  std::string_view bytes = raw_;
  if (gzipped_) {
    std::string plain = gunzip(raw_, path_);
    if (mapping_) ::munmap(mapping_, mapping_bytes_), mapping_ = nullptr;
    owned_ = std::move(plain);
    raw_ = {};
  }
  if (!mapping_) {
    owned_.reserve(owned_.size() + kTextPadding);
    bytes = owned_;
  }
  if (bytes.starts_with(kFileTextByteOrderMark)) bytes.remove_prefix(kFileTextByteOrderMark.size());
  text_ = bytes;
  text_ready_ = true;
  return text_;
}

// The file mapped with anonymous zero pages after it for the padding (reserve the whole range,
// then map the file over its start); read into owned_ when it cannot be mapped.
void FileText::map(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw TraceError(path_ + ": cannot read the file: " + std::strerror(errno));
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
  read_all(fd, path_, owned_);
  file_bytes_ = owned_.size();
}

FileText::~FileText() {
  if (mapping_) ::munmap(mapping_, mapping_bytes_);
}

void FileText::release_before(std::uint64_t offset) {
  if (!mapping_ || !text_ready_ || gzipped_) return;
  const char* at = text_.data() + std::min<std::uint64_t>(offset, text_.size());
  const std::size_t page = page_size();
  const std::size_t upto = static_cast<std::size_t>(at - mapping_) / page * page;
  if (upto <= released_bytes_) return;
  ::madvise(mapping_ + released_bytes_, upto - released_bytes_, MADV_DONTNEED);
  released_bytes_ = upto;
}

}  // namespace pipescope::traces::detail
