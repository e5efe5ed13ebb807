// A text corpus read in place: every file memory-mapped (never read whole into memory), taken in
// a fixed order and seen as one stream of bytes, so the same corpus gives the same stream on
// every machine and every rank. No LibTorch here: the launcher opens it to check it before any
// worker starts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pipescope::exec {

// Text is read as bytes, one token each: no tokenizer file to ship or to match.
inline constexpr int kByteVocabularySize = 256;

class TextCorpus {
 public:
  // `path`: a file, or a folder whose regular files (in its subfolders too) are taken in the
  // order of their paths sorted bytewise. `option` names where the path came from in errors.
  // Throws UsageError in one line naming the file that is missing, unreadable, empty or binary
  // (holds a NUL byte), or a folder without files.
  static TextCorpus open(const std::string& path, const std::string& option = "--data");

  std::int64_t size_bytes() const { return total_bytes_; }
  const std::vector<std::string>& files() const { return paths_; }
  // Copies bytes [offset, offset + count) of the stream into `out`, across file ends (a file's
  // last byte is followed by the next file's first). Asserts the range is inside the stream.
  void copy(std::int64_t offset, std::int64_t count, std::uint8_t* out) const;

 private:
  struct Mapping;  // one mapped file, unmapped when the last corpus holding it goes
  std::vector<std::shared_ptr<const Mapping>> mappings_;
  std::vector<std::string> paths_;
  std::vector<std::int64_t> starts_;  // offset of each file in the stream
  std::int64_t total_bytes_ = 0;
};

}  // namespace pipescope::exec
