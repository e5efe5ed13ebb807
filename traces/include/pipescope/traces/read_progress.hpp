// What a trace reader shares with whoever watches it while it reads (ppview's progress bar, on
// another thread): how far it is, and a request to stop. Reading a gigabyte of JSON takes
// seconds; a reader given one reports as it goes and stops when asked.
#pragma once

#include <atomic>
#include <cstdint>
#include <stdexcept>

namespace pipescope::traces {

struct ReadProgress {
  // Bytes of the files (as they are on disk, compressed or not) read and parsed so far, over
  // every file of the read: the watcher knows the files' sizes.
  std::atomic<std::uint64_t> file_bytes_done{0};
  // Set by the reader's caller once every file is read: what it does next (ppview lays the
  // events out) has no bytes to count, so the watcher shows it as a phase of its own.
  std::atomic<bool> files_read{false};
  // Set by the watcher: the reader throws ReadCancelled at its next report.
  std::atomic<bool> cancel_requested{false};
};

// A read given up because its ReadProgress asked it to: no trace comes of it. Not a TraceError,
// so nothing takes it for a problem of the file (the fast parser's fallback to the reference
// parser included).
class ReadCancelled : public std::runtime_error {
 public:
  ReadCancelled() : std::runtime_error("the read was cancelled") {}
};

}  // namespace pipescope::traces
