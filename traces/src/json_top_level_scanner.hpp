// The top level of a JSON text walked value by value, finding where each value ends (strings
// skipped with memchr, brackets counted) without judging it: the torch reader's fast path
// (torch_profiler_stream.cpp) then parses each event alone. The text is whole, or comes by
// chunks into a window of which only the value being scanned is kept (a gzip file inflated as
// it is read). Anything unexpected throws ScanGivesWay. Needs simdjson (validate_utf8). Private
// to the traces library.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include <simdjson.h>

#include "file_text.hpp"

namespace pipescope::traces::detail {

// Thrown by the scanner where the text is not what it expects, or ends early.
struct ScanGivesWay {};

class JsonTopLevelScanner {
 public:
  // The whole text at once (kTextPadding readable bytes after it).
  explicit JsonTopLevelScanner(std::string_view text)
      : data_(text.data()), end_(text.size()), readable_(text.size() + kTextPadding) {}
  // A text that comes by chunks from `chunks` into `window` (a UTF-8 byte order mark skipped).
  JsonTopLevelScanner(TextChunks& chunks, std::string& window) : chunks_(&chunks), window_(&window) {
    sync();
    while (end_ < kByteOrderMark.size() && refill()) {
    }
    if (std::string_view(data_, end_).starts_with(kByteOrderMark)) p_ = kByteOrderMark.size();
  }

  char peek() {
    skip_space();
    if (p_ == end_) throw ScanGivesWay{};
    return data_[p_];
  }
  void expect(char c) {
    if (peek() != c) throw ScanGivesWay{};
    ++p_;
  }
  bool at_end() {
    skip_space();
    return p_ == end_;
  }
  // How far into the text the scanner is (bytes, from the text's start).
  std::uint64_t offset() const { return base_ + p_; }
  // Where the bytes a parser may read past a value end (simdjson's padding).
  const char* readable_end() const { return data_ + readable_; }

  // A key without escapes or control characters, in valid UTF-8 (others give way). Valid
  // until the scanner moves on.
  std::string_view key() {
    expect('"');
    mark_ = p_;
    for (;;) {
      const void* close = std::memchr(data_ + p_, '"', end_ - p_);
      if (close) {
        p_ = static_cast<std::size_t>(static_cast<const char*>(close) - data_) + 1;
        break;
      }
      p_ = end_;
      if (!refill()) throw ScanGivesWay{};
    }
    const std::string_view key(data_ + mark_, p_ - 1 - mark_);
    for (const char c : key)
      if (c == '\\' || static_cast<unsigned char>(c) < 0x20) throw ScanGivesWay{};
    if (!simdjson::validate_utf8(key.data(), key.size())) throw ScanGivesWay{};
    return key;
  }

  // The text of the value here; `depth`: how deep its brackets nest (0 for a scalar). Valid
  // until the scanner moves on.
  std::string_view value(int& depth) {
    peek();
    mark_ = p_;
    depth = 0;
    if (data_[p_] != '{' && data_[p_] != '[') {
      if (data_[p_] == '"') {
        skip_string();
      } else {
        while ((p_ < end_ || refill()) && !ends_scalar(data_[p_])) ++p_;
      }
      return {data_ + mark_, p_ - mark_};
    }
    int open = 0;
    for (;;) {
      if (p_ == end_ && !refill()) throw ScanGivesWay{};
      const char c = data_[p_];
      if (c == '"') {
        skip_string();
        continue;
      }
      ++p_;
      if (c == '{' || c == '[') {
        depth = std::max(depth, ++open);
      } else if ((c == '}' || c == ']') && --open == 0) {
        return {data_ + mark_, p_ - mark_};
      }
    }
  }

 private:
  static constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";

  static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
  static bool ends_scalar(char c) { return is_space(c) || c == ',' || c == '}' || c == ']'; }

  void skip_space() {
    for (;;) {
      while (p_ < end_ && is_space(data_[p_])) ++p_;
      if (p_ < end_) return;
      mark_ = p_;  // between values: nothing before needs keeping
      if (!refill()) return;
    }
  }

  // From an opening quote to past its closing one (a quote after an odd run of backslashes is
  // escaped; the run lies inside the string, which the window keeps).
  void skip_string() {
    ++p_;
    for (;;) {
      const void* found = std::memchr(data_ + p_, '"', end_ - p_);
      if (!found) {
        p_ = end_;
        if (!refill()) throw ScanGivesWay{};
        continue;
      }
      const auto quote = static_cast<std::size_t>(static_cast<const char*>(found) - data_);
      std::size_t backslashes = 0;
      while (quote > backslashes && data_[quote - 1 - backslashes] == '\\') ++backslashes;
      p_ = quote + 1;
      if (backslashes % 2 == 0) return;
    }
  }

  // More text into the window, dropping what lies before the mark; false at the text's end.
  bool refill() {
    if (!chunks_) return false;
    window_->erase(0, mark_);
    base_ += mark_, p_ -= mark_, mark_ = 0;
    const bool more = chunks_->append_to(*window_);
    sync();
    return more && p_ < end_;
  }
  void sync() {
    window_->reserve(window_->size() + kTextPadding);
    data_ = window_->data();
    end_ = window_->size();
    readable_ = window_->capacity();
  }

  TextChunks* chunks_ = nullptr;
  std::string* window_ = nullptr;
  const char* data_ = nullptr;
  std::size_t end_ = 0;       // the bytes of data_ that are text
  std::size_t readable_ = 0;  // the bytes of data_ that may be read
  std::size_t p_ = 0;         // where the scan is, in data_
  std::size_t mark_ = 0;      // the start of what must be kept (the value being scanned)
  std::uint64_t base_ = 0;    // the text's bytes dropped before data_
};

}  // namespace pipescope::traces::detail
