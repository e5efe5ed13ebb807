// Schedule files on disk. tests/core/data/invalid/NAME.{json,csv} are malformed or invalid
// schedules, each paired with NAME.expected holding a fragment of the one-line error that
// reading or validating it must give (a ScheduleError from the reader, or the validator's
// first problem). tests/core/data/valid/ holds files that must read and validate cleanly:
// idle steps, two stages on a rank, a skip connection, extra top-level fields, compute-only
// and full torch CSVs.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "pipescope/core/validator.hpp"

using namespace pipescope;
namespace fs = std::filesystem;

namespace {

const fs::path kData = fs::path(PIPESCOPE_SOURCE_DIR) / "tests" / "core" / "data";

std::string first_line_of(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The reader's error, or else the validator's first problem, or "" when the file is fine.
std::string error_of(const fs::path& path) {
  try {
    const Schedule schedule = read_schedule_file(path.string());
    const auto problem = find_problem(schedule);
    return problem ? problem->message : std::string();
  } catch (const ScheduleError& e) {
    return e.what();
  }
}

std::vector<fs::path> schedule_files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".json" || entry.path().extension() == ".csv") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("every invalid schedule file is refused with its expected message") {
  const auto files = schedule_files_in(kData / "invalid");
  REQUIRE(files.size() >= 40);
  for (const fs::path& file : files) {
    fs::path expected_path = file;
    expected_path.replace_extension(".expected");
    REQUIRE(fs::exists(expected_path));
    const std::string expected = first_line_of(expected_path);
    const std::string message = error_of(file);
    INFO(file.filename().string() << "\n  expected: " << expected << "\n  got:      " << message);
    CHECK_FALSE(expected.empty());
    CHECK(message.find(expected) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("every valid schedule file reads and validates") {
  const auto files = schedule_files_in(kData / "valid");
  REQUIRE(files.size() >= 7);
  for (const fs::path& file : files) {
    INFO(file.filename().string());
    CHECK(error_of(file) == "");
  }
}

TEST_CASE("an unreadable file is named") {
  try {
    read_schedule_file((kData / "no_such_file.json").string());
    FAIL("read a missing file");
  } catch (const ScheduleError& e) {
    CHECK(std::string(e.what()).find("no_such_file.json") != std::string::npos);
  }
}
