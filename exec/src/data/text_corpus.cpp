#include "data/text_corpus.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/input_file.hpp"

namespace pipescope::exec {

struct TextCorpus::Mapping {
  const std::uint8_t* bytes = nullptr;
  std::int64_t size = 0;
  Mapping(const std::uint8_t* b, std::int64_t s) : bytes(b), size(s) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(const_cast<std::uint8_t*>(bytes), static_cast<std::size_t>(size)); }
};

namespace {

namespace fs = std::filesystem;

// The regular files under `folder`, sorted by path (bytewise, not by locale), so that every
// machine reads a folder in the same order whatever its file system lists first.
std::vector<std::string> files_under(const fs::path& folder, const std::string& option) {
  std::vector<std::string> files;
  std::error_code error;
  fs::recursive_directory_iterator it(folder, fs::directory_options::none, error), end;
  if (error) throw UsageError(fmt::format("option {} {}: cannot list the folder: {}", option, folder.string(), error.message()));
  for (; it != end; it.increment(error)) {
    if (error) throw UsageError(fmt::format("option {} {}: cannot list the folder: {}", option, folder.string(), error.message()));
    if (it->is_regular_file(error)) {
      files.push_back(it->path().string());
    } else if (!it->is_directory(error)) {
      // Skipped, a FIFO or a device would change the text trained on without a word.
      const std::string kind = non_regular_kind(it->path().string()).value_or("a broken link");
      throw UsageError(fmt::format("option {} {}: {} is {}, not a regular file", option, folder.string(), it->path().string(), kind));
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw UsageError(fmt::format("option {} {}: the folder holds no files", option, folder.string()));
  return files;
}

}  // namespace

TextCorpus TextCorpus::open(const std::string& path, const std::string& option) {
  std::error_code error;
  if (!fs::exists(path, error)) throw UsageError(fmt::format("option {} {}: no such file or folder", option, path));
  TextCorpus corpus;
  corpus.paths_ = fs::is_directory(path, error) ? files_under(path, option) : std::vector<std::string>{path};
  for (const std::string& file : corpus.paths_) {
    auto fail = [&](const std::string& why) { return UsageError(fmt::format("option {}: file {}: {}", option, file, why)); };
    // Never a blocking open: a FIFO given as --data would wait for a writer forever.
    std::string problem;
    const int fd = open_regular_file(file, problem);
    if (fd < 0) throw fail(problem.find("not a regular file") != std::string::npos ? "is " + problem : "cannot open it: " + problem);
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
      ::close(fd);
      throw fail(fmt::format("cannot read it: {}", std::strerror(errno)));
    }
    if (info.st_size == 0) {
      ::close(fd);
      throw fail("is empty");
    }
    void* mapped = ::mmap(nullptr, static_cast<std::size_t>(info.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_errno = errno;
    ::close(fd);  // the mapping stays valid without the descriptor
    if (mapped == MAP_FAILED) throw fail(fmt::format("cannot map it: {}", std::strerror(map_errno)));
    auto mapping = std::make_shared<const Mapping>(static_cast<const std::uint8_t*>(mapped), info.st_size);
    // Text has no NUL byte; a file that does is binary (an image, an archive) fed by mistake.
    if (const void* nul = std::memchr(mapping->bytes, 0, static_cast<std::size_t>(mapping->size)))
      throw fail(fmt::format("is binary, not text (a NUL byte at offset {})", static_cast<const std::uint8_t*>(nul) - mapping->bytes));
    corpus.starts_.push_back(corpus.total_bytes_);
    corpus.total_bytes_ += mapping->size;
    corpus.mappings_.push_back(std::move(mapping));
  }
  return corpus;
}

void TextCorpus::copy(std::int64_t offset, std::int64_t count, std::uint8_t* out) const {
  assert(offset >= 0 && count >= 0 && offset + count <= total_bytes_);
  // The file holding `offset`: the last one starting at or before it.
  std::size_t f = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin()) - 1;
  while (count > 0) {
    const Mapping& m = *mappings_[f];
    const std::int64_t within = offset - starts_[f];
    const std::int64_t n = std::min(count, m.size - within);
    std::memcpy(out, m.bytes + within, static_cast<std::size_t>(n));
    out += n;
    offset += n;
    count -= n;
    ++f;
  }
}

}  // namespace pipescope::exec
