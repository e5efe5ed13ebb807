// The engine as pprun drives it: the built-in mlp (4 layers, hidden 16) on 2 in-process ranks
// with 1F1B and 2 micro-batches. Scenario: 3 steps of train_synthetic_batch straight through;
// then 2 steps, save_checkpoint, a fresh engine that load_checkpoint's and runs the third.
// Expected: global_steps() 3 and data_position() 6 (3 steps x 2 micro-batches) either way, the
// checkpointed engine resumes at step 2, position 4, its third step's loss sum on the last
// stage's rank is the uninterrupted run's, bit for bit, and the manifest carries the identity
// given. Also make_world on a device that has no transport is refused naming the device.
// pprun's front door: given the schedule and a partition built beforehand (an uneven split,
// one layer then the rest), the engine keeps that split and trains on it; a partition for
// another number of stages, or one that leaves layers out, is refused naming its bounds.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "in_process_ranks.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/exec/engine.hpp"
#include "small_engine_models.hpp"

using namespace pipescope;
using namespace pipescope::exec;

namespace {

struct SyntheticRun {
  std::string error;
  std::vector<double> loss_sums;
  int global_steps = 0;
  std::int64_t data_position = 0;
  int resumed_at_step = -1;
  std::int64_t resumed_at_position = -1;
  nlohmann::json identity;  // the manifest's, as save_checkpoint was given it
  std::vector<int> bounds;  // the engine's partition
};

using testing::small_mlp;
using testing::two_micro_batches;

}  // namespace

TEST_CASE("train_synthetic_batch steps the built-in data and checkpoints resume it exactly", "[engine]") {
  const auto straight = testing::run_in_process_ranks<SyntheticRun>(2, [](int, Transport& world, SyntheticRun& run) {
    PipelineEngine engine(PipelineModule(small_mlp()), "1f1b", world, two_micro_batches());
    for (int step = 0; step < 3; ++step) run.loss_sums.push_back(engine.train_synthetic_batch().loss_sum);
    run.global_steps = engine.global_steps();
    run.data_position = engine.data_position();
  });

  const std::string dir = (std::filesystem::temp_directory_path() / "pipescope_test_engine_synthetic").string();
  std::filesystem::remove_all(dir);
  const auto resumed = testing::run_in_process_ranks<SyntheticRun>(2, [&dir](int, Transport& world, SyntheticRun& run) {
    {
      PipelineEngine engine(PipelineModule(small_mlp()), "1f1b", world, two_micro_batches());
      for (int step = 0; step < 2; ++step) run.loss_sums.push_back(engine.train_synthetic_batch().loss_sum);
      engine.save_checkpoint(dir, {{"test", "engine_synthetic"}});
    }
    // Rank 0 names the checkpoint in the manifest after the others have returned: wait for it.
    auto committed = at::zeros({1});
    world.all_reduce_sum(committed)->wait(std::chrono::milliseconds(10000));
    PipelineEngine engine(PipelineModule(small_mlp()), "1f1b", world, two_micro_batches());
    auto manifest = read_manifest(dir);
    if (!manifest) throw std::runtime_error("no manifest after save_checkpoint");
    run.identity = manifest->config;
    engine.load_checkpoint(dir, *manifest);
    run.resumed_at_step = engine.global_steps();
    run.resumed_at_position = engine.data_position();
    run.loss_sums.push_back(engine.train_synthetic_batch().loss_sum);
    run.global_steps = engine.global_steps();
    run.data_position = engine.data_position();
  });
  std::filesystem::remove_all(dir);

  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(straight[r].error.empty());
    REQUIRE(resumed[r].error.empty());
    CHECK(straight[r].global_steps == 3);
    CHECK(straight[r].data_position == 6);
    CHECK(resumed[r].identity == nlohmann::json{{"test", "engine_synthetic"}});
    CHECK(resumed[r].resumed_at_step == 2);
    CHECK(resumed[r].resumed_at_position == 4);
    CHECK(resumed[r].global_steps == 3);
    CHECK(resumed[r].data_position == 6);
    CHECK(resumed[r].loss_sums == straight[r].loss_sums);
  }
  CHECK(straight[1].loss_sums[2] > 0);  // the last stage's rank has the loss
}

TEST_CASE("an engine given its schedule and partition keeps them and refuses a partition that does not fit",
          "[engine]") {
  ScheduleParams params;
  params.num_ranks = 2;
  params.num_micro_batches = 2;
  const Schedule schedule = make_schedule("1f1b", params);
  const int layers = static_cast<int>(small_mlp().layers.size());
  REQUIRE(layers > 2);
  const auto given = testing::run_in_process_ranks<SyntheticRun>(2, [&](int, Transport& world, SyntheticRun& run) {
    PipelineEngine engine(PipelineModule(small_mlp()), schedule, Partition{{0, 1, layers}, {}, {}}, world,
                          two_micro_batches());
    run.bounds = engine.partition().bounds;
    run.loss_sums.push_back(engine.train_synthetic_batch().loss_sum);
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(given[r].error.empty());
    CHECK(given[r].bounds == std::vector<int>{0, 1, layers});
  }
  CHECK(given[1].loss_sums.at(0) > 0);

  for (const std::vector<int>& bounds : {std::vector<int>{0, layers}, std::vector<int>{0, 1, layers - 1}}) {
    const auto refused = testing::run_in_process_ranks<SyntheticRun>(2, [&](int, Transport& world, SyntheticRun&) {
      PipelineEngine engine(PipelineModule(small_mlp()), schedule, Partition{bounds, {}, {}}, world,
                            two_micro_batches());
    });
    for (int r = 0; r < 2; ++r) CHECK_THAT(refused[r].error, Catch::Contains("the partition with bounds [0, "));
  }
}

TEST_CASE("make_world refuses a device without a transport, naming it", "[engine]") {
  CHECK_THROWS_WITH(make_world(at::Device(at::kMeta), WorldOptions{}), Catch::Contains("meta"));
}
