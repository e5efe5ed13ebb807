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

namespace {

// tiny-gpt with 2 blocks (5 layers) on 2 pipeline ranks, 1 stage each, `dp` replicas.
CheckpointLayout two_stages(int dp = 1) {
  CheckpointLayout l;
  l.model = "tiny-gpt";
  l.layers = 5;
  l.world_size = 2 * dp;
  l.data_parallel = dp;
  l.schedule = "1f1b";
  l.partition = {0, 3, 5};
  l.stage_to_rank = {0, 1};
  return l;
}

// The same model on 4 ranks, 1 stage each.
CheckpointLayout four_stages() {
  CheckpointLayout l = two_stages();
  l.world_size = 4;
  l.partition = {0, 2, 3, 4, 5};
  l.stage_to_rank = {0, 1, 2, 3};
  return l;
}

}  // namespace

// Layouts: 2 stages [0,3) [3,5) on 2 ranks; 4 stages on 4 ranks; 2 x 2 with 2 replicas.
// Expected: each layer's holder on replica 0; a rank reads its own file on the same placement
// and otherwise those holding its layers (4 stages: rank 1 reads rank 0's, rank 3 rank 1's; 2
// stages from 4: rank 0 reads 0, 1, 2); the layout survives the manifest; another model is
// refused naming what differs; a commit keeps the previous checkpoint of another world size.
TEST_CASE("layouts say which rank files hold a layer and what cannot resume", "[checkpoint]") {
  const CheckpointLayout two = two_stages(), four = four_stages(), replicated = two_stages(2);
  CHECK(two.rank_of_layer(0) == 0);
  CHECK(two.rank_of_layer(2) == 0);
  CHECK(two.rank_of_layer(3) == 1);
  CHECK(replicated.pipeline_ranks() == 2);
  CHECK(two.same_placement(two_stages()));
  CHECK_FALSE(two.same_placement(four));
  CHECK_FALSE(two.same_placement(replicated));
  CheckpointLayout other_schedule = two;
  other_schedule.schedule = "gpipe";
  CHECK(two.same_placement(other_schedule));

  CheckpointRecord written_by_two;
  written_by_two.layout = two;
  CHECK(checkpoint_source_ranks(written_by_two, other_schedule, 1) == std::vector<int>{1});
  CHECK(checkpoint_source_ranks(written_by_two, four, 1) == std::vector<int>{0});
  CHECK(checkpoint_source_ranks(written_by_two, four, 3) == std::vector<int>{1});
  // Replica 1's ranks (2, 3) read what replica 0 of the old layout wrote.
  CHECK(checkpoint_source_ranks(written_by_two, replicated, 2) == std::vector<int>{0});
  CHECK(checkpoint_source_ranks(written_by_two, replicated, 3) == std::vector<int>{1});
  CheckpointRecord written_by_four;
  written_by_four.layout = four;
  CHECK(checkpoint_source_ranks(written_by_four, two, 0) == std::vector<int>{0, 1});
  CHECK(checkpoint_source_ranks(written_by_four, two, 1) == std::vector<int>{2, 3});
  CheckpointRecord format2;
  CHECK(checkpoint_source_ranks(format2, four, 3) == std::vector<int>{3});

  written_by_two.position.step = 4;
  CHECK_FALSE(layout_refusal("D", written_by_two, four));
  CheckpointLayout deeper = four;
  deeper.layers = 6;
  deeper.partition.back() = 6;
  CHECK(*layout_refusal("D", written_by_two, deeper) == "checkpoint D step 4: written for tiny-gpt with 5 layers, this run has 6");
  CheckpointLayout mlp = four;
  mlp.model = "mlp";
  CHECK(*layout_refusal("D", written_by_two, mlp) == "checkpoint D step 4: written for tiny-gpt, this run trains mlp");
  written_by_two.layout->optimizer_state_by_layer = false;
  CHECK_THAT(*layout_refusal("D", written_by_two, four), Catch::Contains("not AdamW's"));
  CHECK_FALSE(layout_refusal("D", written_by_two, other_schedule));

  CHECK(CheckpointLayout::from_json(four.to_json()).to_json() == four.to_json());
  nlohmann::json bad = four.to_json();
  bad["partition"] = {0, 2, 9};
  CHECK_THROWS_WITH(CheckpointLayout::from_json(bad), Catch::Contains("does not split 5 layers"));

  Folder folder;
  const std::string dir = folder.dir();
  CheckpointRecord first = write_checkpoint(dir, 1, "one");  // 2 rank files
  first.layout = two;
  commit_checkpoint(dir, first, 2, {{"run", "a"}});
  CheckpointRecord second;
  second.position = {2, 8};
  second.layout = four;
  second.rank_files.emplace();
  for (int r = 0; r < 4; ++r) {
    const std::string path = rank_checkpoint_path(dir, 2, r);
    fs::create_directories(fs::path(path).parent_path());
    write_file_atomic(path, "four");
    second.rank_files->push_back({4, checkpoint_crc32("four")});
  }
  commit_checkpoint(dir, second, 4, {{"run", "a"}});
  const auto manifest = read_manifest(dir);
  REQUIRE(manifest);
  CHECK(manifest->format == 3);
  REQUIRE(manifest->checkpoints.size() == 2);
  REQUIRE(manifest->checkpoints[0].layout);
  CHECK(manifest->checkpoints[0].layout->to_json() == two.to_json());
  CHECK(manifest->checkpoints[1].layout->to_json() == four.to_json());
  CHECK(manifest->checkpoints[0].problem.empty());
  CHECK(newest_present_checkpoint(dir, *manifest)->position.step == 2);
}

// Identity {model, layers, schedule} of a checkpoint at step 3; "schedule" is a layout key.
// Expected: another schedule resumes a format 3 checkpoint and is refused for a format 2 one;
// another model or layer count is refused naming both values.
TEST_CASE("identities may differ in their layout keys only", "[checkpoint]") {
  Manifest manifest;
  manifest.position = {3, 12};
  manifest.world_size = 2;
  manifest.config = {{"model", "tiny-gpt"}, {"layers", 8}, {"schedule", "1f1b"}};
  CheckpointRecord newest;
  newest.position = manifest.position;
  newest.layout = two_stages();
  manifest.checkpoints = {newest};
  const std::vector<std::string> layout_keys = {"schedule"};
  auto refusal = [&](const nlohmann::json& mine) { return identity_refusal("D", manifest, mine, layout_keys); };

  CHECK_FALSE(refusal({{"model", "tiny-gpt"}, {"layers", 8}, {"schedule", "zbv"}}));
  CHECK(*refusal({{"model", "tiny-gpt"}, {"layers", 6}, {"schedule", "1f1b"}}) ==
        "checkpoint D step 3: written for tiny-gpt with layers 8, this run has 6");
  CHECK(*refusal({{"model", "mlp"}, {"layers", 8}, {"schedule", "1f1b"}}) ==
        "checkpoint D step 3: written for tiny-gpt, this run trains mlp");

  manifest.format = 2;
  manifest.checkpoints.back().layout.reset();
  CHECK(*refusal({{"model", "tiny-gpt"}, {"layers", 8}, {"schedule", "zbv"}}) ==
        "checkpoint D step 3: format 2 holds its tensors by stage, so it resumes only on the layout that wrote it: "
        "schedule 1f1b, this run has zbv");
  CHECK_FALSE(refusal({{"model", "tiny-gpt"}, {"layers", 8}, {"schedule", "1f1b"}}));
}
