// One file's part of a ReadProgress (read_progress.hpp): a parser says where it is in the
// file's text (decompressed, for gzip), and the shared count moves by the file's bytes on disk
// that position stands for. Private to the traces library.
#pragma once

#include <cstdint>

#include "pipescope/traces/read_progress.hpp"

namespace pipescope::traces::detail {

class FileProgress {
 public:
  // `shared` may be null (nobody watches): then every call does nothing.
  FileProgress(ReadProgress* shared, std::uint64_t file_bytes) : shared_(shared), file_bytes_(file_bytes) {
    check_cancel();
  }
  // The size of the text the parser reads (the file's, or its decompressed size).
  void set_text_bytes(std::uint64_t text_bytes) { text_bytes_ = text_bytes; }
  // The parser is at byte `position` of the text. Throws ReadCancelled when asked to stop.
  void at(std::uint64_t position) {
    if (!shared_) return;
    check_cancel();
    if (text_bytes_ == 0 || position > text_bytes_) position = text_bytes_;
    const std::uint64_t done =
        text_bytes_ == 0 ? 0
                         : static_cast<std::uint64_t>(static_cast<double>(position) / static_cast<double>(text_bytes_) *
                                                      static_cast<double>(file_bytes_));
    if (done > reported_) shared_->file_bytes_done += done - reported_, reported_ = done;
  }
  // The whole file is read: it counts in full, whatever the positions reported.
  void finish() {
    if (!shared_) return;
    check_cancel();
    if (file_bytes_ > reported_) shared_->file_bytes_done += file_bytes_ - reported_, reported_ = file_bytes_;
  }
  void check_cancel() const {
    if (shared_ && shared_->cancel_requested.load(std::memory_order_relaxed)) throw ReadCancelled();
  }
  bool watched() const { return shared_ != nullptr; }

 private:
  ReadProgress* shared_ = nullptr;
  std::uint64_t file_bytes_ = 0;
  std::uint64_t text_bytes_ = 0;
  std::uint64_t reported_ = 0;
};

}  // namespace pipescope::traces::detail
