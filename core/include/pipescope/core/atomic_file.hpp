// The one write path of every output (schedules, traces, profiles, metrics, checkpoints,
// screenshots) and the check of standard output at the tools' exits: a reader never sees a
// half-written file, and a write that fails is reported, never lost silently.
#pragma once

#include <string>
#include <string_view>

namespace pipescope {

// Writes `content` to `path` the way a user expects of an output file:
// - a regular file (or a new path) is replaced atomically: the content goes to a temporary file
//   beside it, is flushed to disk and renamed over it. An existing file keeps its permission bits
//   and, where the process may set it, its owner; a new file gets 0666 less the umask. A target
//   that the process may not write (a read-only file) is refused, as `>` would refuse it;
// - a symlink is followed to its final target, which is replaced; the link stays a link;
// - anything else that is not a directory (a character device such as /dev/null, a FIFO) is
//   opened and written through in place, never replaced;
// - /dev/stdout, /dev/stderr, /dev/fd/N and /proc/self/fd/N are the process's own descriptors,
//   written where the shell left them (`-o /dev/stdout >> log` appends to log);
// - a directory is refused ("PATH is a directory").
// Throws std::runtime_error naming the path and the reason when any step fails (open, write,
// fsync, close, rename); the temporary file is removed and the old file is left as it was.
void write_file_atomic(const std::string& path, std::string_view content);

// Reads a whole file; throws std::runtime_error naming the path when it cannot be read.
std::string read_file(const std::string& path);

// For a tool's single exit point: flushes standard output. When an earlier write to it or this
// flush failed (a full disk, `> /dev/full`, a closed descriptor) and `status` is 0, prints
// `PROGRAM: error: cannot write to standard output: REASON` on stderr and returns 1; otherwise
// returns `status` (a failed run has already said why on stderr, in its one line).
int finish_standard_output(const char* program, int status);

}  // namespace pipescope
