// A trace file's text for a parser that reads it once from start to end: a plain file mapped
// read-only, its pages handed back behind the parse (a gigabyte file then never sits in
// memory whole); a gzip file decompressed whole. Either way kTextPadding readable bytes follow
// the text, as simdjson asks. Private to the traces library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pipescope::traces::detail {

inline constexpr std::size_t kTextPadding = 64;  // simdjson's SIMDJSON_PADDING

class FileText {
 public:
  // Opens `path`, which input_file_problem must accept as `expected` (a regular file, ...);
  // TraceError naming the file otherwise, or when it cannot be read or decompressed.
  FileText(const std::string& path, std::string_view expected);
  ~FileText();
  FileText(const FileText&) = delete;
  FileText& operator=(const FileText&) = delete;

  // The text, after a UTF-8 byte order mark if it has one; kTextPadding readable bytes follow.
  std::string_view text() const { return text_; }
  std::uint64_t file_bytes() const { return file_bytes_; }
  bool gzipped() const { return gzipped_; }
  // The parse is past `at` (inside text()): the mapped pages before it may go; they come back
  // from the file if read again.
  void release_before(const char* at);

 private:
  void map(int fd, const std::string& path);

  std::string owned_;  // a gzip file's content, or a file that could not be mapped
  char* mapping_ = nullptr;
  std::size_t mapping_bytes_ = 0;
  std::size_t released_bytes_ = 0;  // from mapping_ on
  std::string_view text_;
  std::uint64_t file_bytes_ = 0;
  bool gzipped_ = false;
};

}  // namespace pipescope::traces::detail
