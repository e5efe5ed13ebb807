// Every file input (schedules, traces, profiles, models, checkpoints, text) is checked here before
// it is read, so that a directory, a FIFO or a device given as a file is refused as such instead
// of failing deep in a reader, or of blocking forever on a pipe nobody writes to.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pipescope {

// What `path` is when it exists and is not a regular file: "a directory", "a FIFO (named pipe)",
// "a character device", "a block device", "a socket"; nothing for a regular file (symlinks are
// followed) or a path that does not exist.
std::optional<std::string> non_regular_kind(const std::string& path);

// "PATH is a directory, expected EXPECTED" (EXPECTED: "a schedule file", "a trace file", ...), the
// same for the other kinds of non_regular_kind, or nothing when PATH is a regular file (a missing
// file is left to the reader's own message).
std::optional<std::string> input_file_problem(const std::string& path, std::string_view expected);

// Opens `path` for reading without ever blocking (a FIFO that appeared after a check is not
// waited on) and returns its descriptor (close-on-exec, blocking reads), or -1 with `problem`
// saying why, without the path: the open's error ("No such file or directory"), or "a FIFO
// (named pipe), not a regular file".
int open_regular_file(const std::string& path, std::string& problem);

}  // namespace pipescope
