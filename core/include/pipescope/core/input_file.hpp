// Every file input (schedules, traces, profiles, models) is checked here before it is read, so
// that a directory given as a file is refused as such instead of failing deep in a reader.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pipescope {

// "PATH is a directory, expected EXPECTED" (EXPECTED: "a schedule file", "a trace file", ...),
// or nothing when PATH is not a directory (a missing file is left to the reader's own message).
std::optional<std::string> input_file_problem(const std::string& path, std::string_view expected);

}  // namespace pipescope
