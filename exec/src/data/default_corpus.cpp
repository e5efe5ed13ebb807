#include "data/default_corpus.hpp"

#include <filesystem>

namespace pipescope::exec {

std::string default_corpus_path() {
  std::error_code error;
  const std::filesystem::path executable = std::filesystem::read_symlink("/proc/self/exe", error);
  return (executable.parent_path().parent_path() / "share" / "pipescope" / "corpus").string();
}

}  // namespace pipescope::exec
