// Reading with a ReadProgress (read_progress.hpp, traces/src/file_progress.hpp): the count
// reaches the files' bytes on disk (plain, gzip, torch.profiler runs), the trace is the one
// read without it, and a read asked to stop throws ReadCancelled (not a TraceError, which the
// fast parser would take for a file to read again) at its next report.
#include <catch2/catch.hpp>

#include <filesystem>
#include <unistd.h>

#include "file_progress.hpp"
#include "pipescope/traces/read_progress.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "pipescope/traces/torch_profiler.hpp"
#include "pipescope/traces/trace_io.hpp"

using namespace pipescope::traces;
namespace fs = std::filesystem;

namespace {

// A trace of some 8,000 events: the fast parser reports every 4,096.
fs::path written_progress_trace(const std::string& name) {
  fs::path path = fs::temp_directory_path() / ("pipescope_test_read_progress_" + std::to_string(::getpid()) + name);
  SyntheticPipeline pipeline;
  pipeline.num_micro_batches = 500;
  write_trace(make_1f1b_trace(pipeline), path.string());
  return path;
}

const fs::path kProgressTorchRun = fs::path(PIPESCOPE_SOURCE_DIR) / "tests/golden/torch/traces/gpipe";

}  // namespace

TEST_CASE("read progress: a trace read with a progress counts its file's bytes", "[read_progress]") {
  for (const std::string name : {".json", ".json.gz"}) {
    INFO(name);
    const fs::path path = written_progress_trace(name);
    ReadProgress progress;
    const Trace watched = read_trace(path.string(), &progress);
    const Trace plain = read_trace(path.string());
    REQUIRE(progress.file_bytes_done.load() == fs::file_size(path));
    REQUIRE(watched.events.size() == plain.events.size());
    REQUIRE(watched.events.size() > 4096);
    REQUIRE(watched.end_us() == plain.end_us());
    fs::remove(path);
  }
}

TEST_CASE("read progress: a read asked to stop throws ReadCancelled", "[read_progress]") {
  const fs::path path = written_progress_trace(".json");
  ReadProgress progress;
  progress.cancel_requested = true;
  REQUIRE_THROWS_AS(read_trace(path.string(), &progress), ReadCancelled);
  fs::remove(path);

  TorchReadOptions options;
  options.progress = &progress;
  REQUIRE_THROWS_AS(read_torch_profiler_run({kProgressTorchRun.string()}, options), ReadCancelled);
}

TEST_CASE("read progress: a torch.profiler run counts the bytes of its files", "[read_progress]") {
  ReadProgress progress;
  TorchReadOptions options;
  options.progress = &progress;
  const TorchRun watched = read_torch_profiler_run({kProgressTorchRun.string()}, options);
  const TorchRun plain = read_torch_profiler_run({kProgressTorchRun.string()});
  std::uintmax_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(kProgressTorchRun)) bytes += entry.file_size();
  REQUIRE(progress.file_bytes_done.load() == bytes);
  REQUIRE(watched.trace.events.size() == plain.trace.events.size());
  REQUIRE(watched.trace.args.size() == plain.trace.args.size());
}

TEST_CASE("read progress: a file's positions count as its bytes on disk", "[read_progress]") {
  ReadProgress shared;
  pipescope::traces::detail::FileProgress file(&shared, 1000);  // 1000 bytes of gzip ...
  file.set_text_bytes(4000);                                    // ... for 4000 of JSON
  file.at(2000);
  REQUIRE(shared.file_bytes_done.load() == 500);
  file.at(1000);  // never backwards
  REQUIRE(shared.file_bytes_done.load() == 500);
  file.finish();
  REQUIRE(shared.file_bytes_done.load() == 1000);
  shared.cancel_requested = true;
  REQUIRE_THROWS_AS(file.at(4000), ReadCancelled);
  REQUIRE_THROWS_AS(pipescope::traces::detail::FileProgress(&shared, 10), ReadCancelled);

  pipescope::traces::detail::FileProgress unwatched(nullptr, 10);  // nobody watches: nothing happens
  unwatched.at(5);
  unwatched.finish();
  REQUIRE_FALSE(unwatched.watched());
}
