// A trace file's text for a parser that reads it once from start to end: a plain file mapped
// read-only, its pages handed back behind the parse (a gigabyte file then never sits in
// memory whole); a gzip file inflated by chunks as it is read (GzipChunks), or decompressed
// whole where a parser needs all of it. kTextPadding readable bytes follow the whole text, as
// simdjson asks. Private to the traces library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <zlib.h>

namespace pipescope::traces::detail {

inline constexpr std::size_t kTextPadding = 64;  // simdjson's SIMDJSON_PADDING

// The next bytes of a text that comes by chunks.
class TextChunks {
 public:
  virtual ~TextChunks() = default;
  // Appends at least one more byte of the text to `window`, or returns false at its end.
  // Throws TraceError where the data is broken (a parser then gives way to one that says how).
  virtual bool append_to(std::string& window) = 0;
};

// A gzip stream's content, a chunk at a time (zlib's inflate): the one inflate loop of the
// library (gunzip appends every chunk to one string). Its errors name `source` and the byte
// where the data broke.
class GzipChunks : public TextChunks {
 public:
  static constexpr std::size_t kChunkBytes = 1 << 20;

  explicit GzipChunks(std::string_view compressed, std::string source = "gzip data");
  ~GzipChunks() override;
  GzipChunks(const GzipChunks&) = delete;
  GzipChunks& operator=(const GzipChunks&) = delete;
  bool append_to(std::string& window) override;

 private:
  std::string_view compressed_;
  std::string source_;
  z_stream stream_{};
  bool ended_ = false;
};

class FileText {
 public:
  // Opens `path`, which input_file_problem must accept as `expected` (a regular file, ...);
  // TraceError naming the file otherwise, or when it cannot be read.
  FileText(const std::string& path, std::string_view expected);
  ~FileText();
  FileText(const FileText&) = delete;
  FileText& operator=(const FileText&) = delete;

  // The whole text, after a UTF-8 byte order mark if it has one; kTextPadding readable bytes
  // follow. A gzip file is decompressed on the first call (TraceError naming the file for
  // corrupt or truncated data).
  std::string_view text();
  std::uint64_t file_bytes() const { return file_bytes_; }
  bool gzipped() const { return gzipped_; }
  // A gzip file's bytes as they are on disk (GzipChunks reads them).
  std::string_view compressed() const { return raw_; }
  // The parse is past byte `offset` of text(): the mapped pages before it may go; they come
  // back from the file if read again.
  void release_before(std::uint64_t offset);

 private:
  void map(int fd);

  std::string path_;
  std::string owned_;  // a gzip file's content, or a file that could not be mapped
  char* mapping_ = nullptr;
  std::size_t mapping_bytes_ = 0;
  std::size_t released_bytes_ = 0;  // from mapping_ on
  std::string_view raw_;            // the file's bytes (mapped, or in owned_)
  std::string_view text_;
  bool text_ready_ = false;
  std::uint64_t file_bytes_ = 0;
  bool gzipped_ = false;
};

}  // namespace pipescope::traces::detail
