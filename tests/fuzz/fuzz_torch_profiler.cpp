// Fuzzes the torch.profiler reader: the input is one rank's file, or two ranks' files split at a
// line "--8<--", written to a private folder and read as a run (the reader takes files: that is
// how it checks them before reading). Bad input must end in a TraceError and nothing else; a run
// that reads must compare with itself.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "pipescope/traces/compare.hpp"
#include "pipescope/traces/torch_profiler.hpp"

namespace {

// The files of the inputs, in a folder of this process removed when it exits.
struct Folder {
  std::filesystem::path path = std::filesystem::temp_directory_path() / ("pipescope-fuzz-torch-" + std::to_string(::getpid()));
  Folder() { std::filesystem::create_directories(path); }
  ~Folder() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

const std::filesystem::path& folder() {
  static const Folder dir;
  return dir.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipescope::traces;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSplit = "\n--8<--\n";
  const std::size_t split = text.find(kSplit);
  std::vector<std::string_view> files = {text.substr(0, split)};
  if (split != std::string_view::npos) files.push_back(text.substr(split + kSplit.size()));
  std::vector<std::string> paths;
  for (std::size_t i = 0; i < files.size(); ++i) {
    paths.push_back((folder() / ("rank" + std::to_string(i) + ".json")).string());
    std::ofstream(paths.back(), std::ios::binary | std::ios::trunc).write(files[i].data(), static_cast<std::streamsize>(files[i].size()));
  }
  for (const bool keep_operators : {true, false}) {
    TorchReadOptions options;
    options.keep_operators = keep_operators;
    try {
      const TorchRun run = read_torch_profiler_run(paths, options);
      (void)compare_traces(run.trace, run.trace, 5);
    } catch (const TraceError&) {
    }
  }
  return 0;
}
