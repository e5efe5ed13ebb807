#include "pipescope/core/input_file.hpp"

#include <filesystem>

namespace pipescope {

std::optional<std::string> input_file_problem(const std::string& path, std::string_view expected) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) return path + " is a directory, expected " + std::string(expected);
  return std::nullopt;
}

}  // namespace pipescope
