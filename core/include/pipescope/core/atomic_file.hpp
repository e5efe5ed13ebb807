// Writes that never leave a partial file behind: content goes to a temporary file in the
// same directory, is flushed to disk, and is renamed over the target.
#pragma once

#include <string>
#include <string_view>

namespace pipescope {

// Throws std::runtime_error naming the path when the write or the rename fails; on failure
// the temporary file is removed and the target is left as it was.
void write_file_atomic(const std::string& path, std::string_view content);

// Reads a whole file; throws std::runtime_error naming the path when it cannot be read.
std::string read_file(const std::string& path);

}  // namespace pipescope
