// A test process's own temporary folder, temp_directory_path()/pipescope-test-<what>-<pid>, made
// empty when first used and removed when the process ends, with a fresh subfolder per test case:
// the end-to-end suites (ppsim's command-line tests, the fault-injection suite) run real binaries
// in such folders, so a case sees only what it wrote and parallel test processes never meet.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace test_support {

class ScratchFolder {
 public:
  explicit ScratchFolder(const std::string& what)
      : path_(std::filesystem::temp_directory_path() / ("pipescope-test-" + what + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // A fresh, empty folder for one test case.
  std::filesystem::path case_dir(const std::string& name) const {
    const std::filesystem::path dir = path_ / name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace test_support
