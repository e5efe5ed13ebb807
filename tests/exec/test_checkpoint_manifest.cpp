// The checkpoint manifest and the checks of rank files, on plain files in a temporary folder (no
// model: the commit and the checks look at sizes and checksums, not at what the files hold).
// Scenario: 2 ranks; checkpoints at steps 1, 2, 3 committed in turn, a stray step-00000099.
// Expected: the manifest (format 2) lists the newest two with each file's size and CRC-32; a
// commit removes only older checkpoints the previous manifest listed (never the stray folder);
// a previous checkpoint with a truncated file is not kept as the fallback. A format 1 manifest
// reads as one checkpoint without sizes; a malformed entry reads with its problem; truncated,
// missing and altered files are told apart; a manifest that is not JSON is refused naming it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/exec/checkpoint.hpp"

using namespace pipescope;
using namespace pipescope::exec;
namespace fs = std::filesystem;

namespace {

struct Folder {
  fs::path path = fs::temp_directory_path() / "pipescope_test_checkpoint_manifest";
  Folder() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Folder() { fs::remove_all(path); }
  std::string dir() const { return path.string(); }
};

// The checkpoint of `step` with two rank files of `content`, as save_rank_checkpoint records it.
CheckpointRecord write_checkpoint(const std::string& dir, int step, const std::string& content) {
  CheckpointRecord record;
  record.position = {step, step * 4};
  record.rank_files.emplace();
  for (int r = 0; r < 2; ++r) {
    const std::string path = rank_checkpoint_path(dir, step, r);
    const std::string bytes = content + std::to_string(r);
    fs::create_directories(fs::path(path).parent_path());
    write_file_atomic(path, bytes);
    record.rank_files->push_back({static_cast<std::int64_t>(bytes.size()), checkpoint_crc32(bytes)});
  }
  return record;
}

}  // namespace

TEST_CASE("commits list the newest two checkpoints and prune only older listed ones", "[checkpoint]") {
  Folder folder;
  const std::string dir = folder.dir();
  fs::create_directories(folder.path / "step-00000099");
  commit_checkpoint(dir, write_checkpoint(dir, 1, "one"), 2, {{"run", "a"}});
  commit_checkpoint(dir, write_checkpoint(dir, 2, "two"), 2, {{"run", "a"}});
  auto manifest = read_manifest(dir);
  REQUIRE(manifest);
  CHECK(manifest->position.step == 2);
  CHECK(manifest->position.data_position == 8);
  CHECK(manifest->config == nlohmann::json{{"run", "a"}});
  REQUIRE(manifest->checkpoints.size() == 2);
  CHECK(manifest->checkpoints[0].position.step == 1);
  REQUIRE(manifest->checkpoints[1].rank_files);
  CHECK((*manifest->checkpoints[1].rank_files)[0].bytes == 4);
  for (const auto& c : manifest->checkpoints)
    for (int r = 0; r < 2; ++r) CHECK_FALSE(rank_file_problem(dir, c, r, true));

  commit_checkpoint(dir, write_checkpoint(dir, 3, "three"), 2, {{"run", "a"}});
  CHECK_FALSE(fs::exists(folder.path / "step-00000001"));
  CHECK(fs::exists(folder.path / "step-00000002"));
  CHECK(fs::exists(folder.path / "step-00000099"));

  // step-00000003 damaged: the next commit keeps step-00000002, the newest intact one, instead.
  fs::resize_file(rank_checkpoint_path(dir, 3, 1), 2);
  commit_checkpoint(dir, write_checkpoint(dir, 4, "four"), 2, {{"run", "a"}});
  manifest = read_manifest(dir);
  REQUIRE(manifest->checkpoints.size() == 2);
  CHECK(manifest->checkpoints[0].position.step == 2);
  CHECK(manifest->checkpoints[1].position.step == 4);
  CHECK_FALSE(fs::exists(folder.path / "step-00000003"));
  CHECK(fs::exists(folder.path / "step-00000099"));
  CHECK(newest_present_checkpoint(dir, *manifest)->position.step == 4);
}

TEST_CASE("checkpoint_crc32 is the standard CRC-32", "[checkpoint]") {
  CHECK(checkpoint_crc32("123456789") == 0xCBF43926u);
  CHECK(checkpoint_crc32("") == 0u);
}

TEST_CASE("rank file checks tell missing, truncated and altered files apart", "[checkpoint]") {
  Folder folder;
  const std::string dir = folder.dir();
  const CheckpointRecord record = write_checkpoint(dir, 5, "weights");
  CHECK_FALSE(rank_file_problem(dir, record, 0, true));
  write_file_atomic(rank_checkpoint_path(dir, 5, 0), "WEIGHTS0");  // same size, other bytes
  CHECK_FALSE(rank_file_problem(dir, record, 0, false));
  CHECK_THAT(*rank_file_problem(dir, record, 0, true), Catch::Contains("CRC-32"));
  fs::resize_file(rank_checkpoint_path(dir, 5, 1), 3);
  CHECK_THAT(*rank_file_problem(dir, record, 1, false), Catch::Contains("has 3 bytes, the manifest records 8"));
  fs::remove(rank_checkpoint_path(dir, 5, 1));
  CHECK_THAT(*rank_file_problem(dir, record, 1, false), Catch::Contains("is missing"));
}

TEST_CASE("manifests of format 1, malformed entries and non-JSON", "[checkpoint]") {
  Folder folder;
  const std::string dir = folder.dir();
  write_file_atomic((folder.path / "manifest.json").string(),
                    R"({"format": "pipescope.checkpoint/1", "step": 3, "data_position": 12, "world_size": 2,
                        "directory": "step-00000003", "config": {"run": "old"}})");
  auto manifest = read_manifest(dir);
  REQUIRE(manifest);
  REQUIRE(manifest->checkpoints.size() == 1);
  CHECK(manifest->checkpoints[0].position.step == 3);
  CHECK_FALSE(manifest->checkpoints[0].rank_files);
  CHECK_THAT(*rank_file_problem(dir, manifest->checkpoints[0], 0, true), Catch::Contains("is missing"));

  nlohmann::json j = manifest_json(*manifest);
  j["checkpoints"].push_back({{"step", 4}, {"data_position", 16}, {"files", "not a list"}});
  write_file_atomic((folder.path / "manifest.json").string(), j.dump());
  manifest = read_manifest(dir);
  REQUIRE(manifest->checkpoints.size() == 2);
  CHECK_THAT(manifest->checkpoints[1].problem, Catch::Contains("entry 1 of the manifest is malformed"));
  CHECK_THAT(*rank_file_problem(dir, manifest->checkpoints[1], 0, false), Catch::Contains("malformed"));

  write_file_atomic((folder.path / "manifest.json").string(), "{ not json");
  CHECK_THROWS_WITH(read_manifest(dir), Catch::Contains("manifest.json: unreadable checkpoint manifest"));
  fs::remove(folder.path / "manifest.json");
  CHECK_FALSE(read_manifest(dir));
}
