// Checkpoints that resume on another layout (issue 17 item 4).
// pprun, real worker processes over loopback: tiny-gpt, 2 blocks, hidden 32, vocab 64, seq 8,
// micro-batch size 2 (5 layers, the embedding tied to the head), fp32, one thread per rank, the
// synthetic data. ReshardRun A goes 4 steps straight on layout L2; run B goes 2 steps on layout L1 with
// a checkpoint, then resumes on L2 to step 4.
// Expected:
// - 2 stages (1f1b, 2 ranks) -> 4 stages (1f1b, 4 ranks), and 1f1b -> interleaved-1f1b with
//   --chunks 2 (2 ranks, 2 -> 4 stages, V = 1 -> 2): B's steps 2 and 3 are A's, bit for bit (each
//   sample's arithmetic is the same on every split); the manifest then lists B's step 2 (its
//   layout, world 2) and step 4 (the new layout).
// - 1f1b -> zbv (V placement, 4 stages on 2 ranks): within 1e-6 relative, the bound zbv keeps
//   against 1f1b uninterrupted (its split backward adds weight gradients in another order; at
//   these sizes the losses happen to be bitwise equal).
// - --dp 1 (2 ranks, 4 micro-batches) -> --dp 2 (4 ranks, 2 micro-batches per replica: the same
//   4 micro-batches a step): B's steps 2 and 3 are A's within 1e-5 relative. Not bitwise: A's
//   first two steps summed each gradient over 2 replicas (2 + 2 micro-batches, then an
//   all-reduce), B's over 4 micro-batches in one rank, so their weights at step 2 differ in the
//   last bits.
// - another model (--layers 3) or another micro-batch size: refused in one line naming the
//   checkpoint, its step and what differs, exit 2, no step run.
// In process (2 ranks as threads, the built-in mlp of 4 layers, hidden 16): a checkpoint of
// 1 stage on 1 rank loaded by 2 stages on 2 ranks gives every parameter its weights and AdamW
// state (step, exp_avg, exp_avg_sq) bit for bit; a format 2 checkpoint (tensors by stage, no
// layout in the manifest) still resumes on its own layout with the uninterrupted losses.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/wait.h>
#include <torch/optim/adamw.h>
#include <torch/serialize/output-archive.h>

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "adamw_state_key.hpp"
#include "in_process_ranks.hpp"
#include "pipescope/core/atomic_file.hpp"
#include "pipescope/exec/checkpoint.hpp"
#include "pipescope/exec/engine.hpp"
#include "pprun_run.hpp"
#include "small_engine_models.hpp"

using namespace pipescope;
using namespace pipescope::exec;
namespace fs = std::filesystem;

namespace {

const std::string kReshardModel =
    "--model tiny-gpt --data synthetic --layers 2 --hidden 32 --seq-len 8 --vocab 64 --micro-batch-size 2 --quiet --timeout 30";

using pprun_test::PprunRun;
using pprun_test::work_dir;

// kReshardModel first: an option given again in `args` overrides it (the last one counts).
PprunRun run_pprun(const std::string& name, const std::string& args) {
  return pprun_test::run_pprun("reshard-" + name, kReshardModel + " " + args);
}

struct Resumed {
  PprunRun straight, before, after;
  fs::path dir;
};

// A: `layout_after` for 4 steps. B: `layout_before` for 2 steps with a checkpoint, then
// `layout_after` from it to step 4.
Resumed straight_and_resumed(const std::string& name, const std::string& layout_before, const std::string& layout_after) {
  Resumed r;
  r.dir = work_dir() / ("reshard-" + name + "-checkpoints");
  fs::remove_all(r.dir);
  r.straight = run_pprun(name + "-straight", layout_after + " --steps 4");
  const std::string checkpointed = " --checkpoint-dir " + r.dir.string();
  r.before = run_pprun(name + "-before", layout_before + " --steps 2" + checkpointed);
  r.after = run_pprun(name + "-after", layout_after + " --steps 4 --resume" + checkpointed);
  return r;
}

void check_ran(const Resumed& r) {
  INFO(r.straight.err << r.before.err << r.after.err);
  REQUIRE(r.straight.status == 0);
  REQUIRE(r.before.status == 0);
  REQUIRE(r.after.status == 0);
  REQUIRE(r.straight.losses.size() == 4);
  REQUIRE(r.after.steps == std::vector<int>{2, 3});
}

// The manifest lists the checkpoint B wrote before the change (its layout) and the one after.
void check_manifest_layouts(const fs::path& dir, int world_before, int world_after) {
  const auto manifest = read_manifest(dir.string());
  REQUIRE(manifest);
  CHECK(manifest->format == 3);
  REQUIRE(manifest->checkpoints.size() == 2);
  REQUIRE(manifest->checkpoints[0].layout);
  REQUIRE(manifest->checkpoints[1].layout);
  CHECK(manifest->checkpoints[0].position.step == 2);
  CHECK(manifest->checkpoints[0].layout->world_size == world_before);
  CHECK(manifest->checkpoints[1].position.step == 4);
  CHECK(manifest->checkpoints[1].layout->world_size == world_after);
  CHECK(manifest->checkpoints[1].position.data_position == 16);  // 4 steps x 4 micro-batches
}

}  // namespace

TEST_CASE("a checkpoint of 2 stages resumes on 4 with the uninterrupted losses, bitwise", "[checkpoint][reshard]") {
  const Resumed r = straight_and_resumed("2to4", "--nproc-per-node 2 --schedule 1f1b --micro-batches 4",
                                         "--nproc-per-node 4 --schedule 1f1b --micro-batches 4");
  check_ran(r);
  CHECK(r.after.losses[0] == r.straight.losses[2]);
  CHECK(r.after.losses[1] == r.straight.losses[3]);
  check_manifest_layouts(r.dir, 2, 4);
}

TEST_CASE("a checkpoint of 2 stages on text resumes on 4 where the text left off, bitwise", "[checkpoint][reshard]") {
  // The data position is global: the 4-stage run reads on from the window the 2-stage run
  // stopped at, so its losses are an uninterrupted run's (the README as the text).
  const std::string text = " --data " + (fs::path(PIPESCOPE_SOURCE_DIR) / "README.md").string() + " --vocab 256 --lr 0.01";
  const Resumed r = straight_and_resumed("text-2to4", "--nproc-per-node 2 --schedule 1f1b --micro-batches 4" + text,
                                         "--nproc-per-node 4 --schedule 1f1b --micro-batches 4" + text);
  check_ran(r);
  CHECK(r.after.losses[0] == r.straight.losses[2]);
  CHECK(r.after.losses[1] == r.straight.losses[3]);
  CHECK(r.straight.losses[3] < r.straight.losses[0]);  // it learns the text
}

TEST_CASE("a checkpoint of 1f1b resumes on interleaved-1f1b with 2 chunks, bitwise", "[checkpoint][reshard]") {
  const Resumed r = straight_and_resumed("chunks", "--nproc-per-node 2 --schedule 1f1b --micro-batches 4",
                                         "--nproc-per-node 2 --schedule interleaved-1f1b --chunks 2 --micro-batches 4");
  check_ran(r);
  CHECK(r.after.losses[0] == r.straight.losses[2]);
  CHECK(r.after.losses[1] == r.straight.losses[3]);
  check_manifest_layouts(r.dir, 2, 2);
  const auto manifest = read_manifest(r.dir.string());
  CHECK(manifest->checkpoints[0].layout->partition.size() == 3);  // 2 stages
  CHECK(manifest->checkpoints[1].layout->partition.size() == 5);  // 4 stages
}

TEST_CASE("a checkpoint of 1f1b resumes on zbv within the split backward's rounding", "[checkpoint][reshard]") {
  const Resumed r = straight_and_resumed("zbv", "--nproc-per-node 2 --schedule 1f1b --micro-batches 4",
                                         "--nproc-per-node 2 --schedule zbv --micro-batches 4");
  check_ran(r);
  CHECK(r.after.losses[0] == Approx(r.straight.losses[2]).epsilon(1e-6));
  CHECK(r.after.losses[1] == Approx(r.straight.losses[3]).epsilon(1e-6));
  check_manifest_layouts(r.dir, 2, 2);
}

TEST_CASE("a checkpoint of one replica resumes on two with the same global batch, within rounding",
          "[checkpoint][reshard]") {
  const Resumed r = straight_and_resumed("dp", "--nproc-per-node 2 --schedule 1f1b --micro-batches 4",
                                         "--nproc-per-node 4 --dp 2 --schedule 1f1b --micro-batches 2");
  check_ran(r);
  CHECK(r.after.losses[0] == Approx(r.straight.losses[2]).epsilon(1e-5));
  CHECK(r.after.losses[1] == Approx(r.straight.losses[3]).epsilon(1e-5));
  // The same 2 steps on other data would be far off: the data position carried over.
  CHECK(std::abs(r.straight.losses[2] - r.straight.losses[0]) > 1e-4);
  check_manifest_layouts(r.dir, 2, 4);
}

TEST_CASE("a checkpoint of another model or micro-batch size is refused in one line", "[checkpoint][reshard]") {
  const fs::path dir = work_dir() / "reshard-refused-checkpoints";
  fs::remove_all(dir);
  const std::string checkpointed = " --checkpoint-dir " + dir.string();
  const PprunRun first = run_pprun("refused-first", "--nproc-per-node 2 --schedule 1f1b --micro-batches 4 --steps 2" + checkpointed);
  INFO(first.err);
  REQUIRE(first.status == 0);

  const PprunRun deeper = run_pprun("refused-layers", "--nproc-per-node 2 --schedule 1f1b --micro-batches 4 --steps 4 --resume" +
                                                           checkpointed + " --layers 3");
  INFO(deeper.err);
  CHECK(deeper.status == 2);
  CHECK(deeper.losses.empty());
  CHECK(deeper.err == fmt::format("pprun: error: checkpoint {} step 2: written for tiny-gpt with layers 2, this run has 3\n", dir.string()));

  const PprunRun wider = run_pprun("refused-mbs", "--nproc-per-node 4 --schedule 1f1b --micro-batches 4 --steps 4 --resume" +
                                                       checkpointed + " --micro-batch-size 4");
  INFO(wider.err);
  CHECK(wider.status == 2);
  CHECK(wider.err ==
        fmt::format("pprun: error: checkpoint {} step 2: written for tiny-gpt with micro_batch_size 2, this run has 4\n", dir.string()));
}

// ---- in process ------------------------------------------------------------------------------

namespace {

using testing::small_mlp;
using testing::two_micro_batches;

struct Tensors {
  std::map<std::string, at::Tensor> weights, exp_avg, exp_avg_sq;
  std::map<std::string, std::int64_t> adam_step;
};

// Every parameter of the engine's stages with its AdamW state, by model-wide name.
Tensors tensors_of(PipelineEngine& engine) {
  Tensors t;
  for (int s : engine.stages()) {
    auto& adamw = dynamic_cast<torch::optim::AdamW&>(engine.runtime().optimizer(s));
    for (const auto& p : engine.runtime().stage_module(s).parameters()) {
      t.weights[p.name] = p.tensor.detach().clone();
      using Key = std::remove_cvref_t<decltype(adamw.state())>::key_type;
      const auto& state = static_cast<const torch::optim::AdamWParamState&>(*adamw.state().at(adamw_state_key<Key>(p.tensor)));
      t.exp_avg[p.name] = state.exp_avg().clone();
      t.exp_avg_sq[p.name] = state.exp_avg_sq().clone();
      t.adam_step[p.name] = state.step();
    }
  }
  return t;
}

struct ReshardRun {
  std::string error;
  Tensors tensors;
  std::vector<double> loss_sums;
  CheckpointPosition resumed_at;
};

void wait_for_everyone(Transport& world) {
  auto token = at::zeros({1});
  world.all_reduce_sum(token)->wait(std::chrono::milliseconds(10000));
}

bool equal(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a)
    if (!b.count(name) || !at::equal(t, b.at(name))) return false;
  return true;
}

}  // namespace

TEST_CASE("weights and AdamW state are re-split by layer from 1 stage to 2", "[checkpoint][reshard]") {
  const std::string dir = (fs::temp_directory_path() / "pipescope_test_reshard_in_process").string();
  fs::remove_all(dir);
  const auto one = testing::run_in_process_ranks<ReshardRun>(1, [&](int, Transport& world, ReshardRun& run) {
    PipelineEngine engine(PipelineModule(small_mlp()), "gpipe", world, two_micro_batches());
    for (int step = 0; step < 2; ++step) engine.train_synthetic_batch();
    engine.save_checkpoint(dir, {{"test", "reshard"}});
    run.tensors = tensors_of(engine);
  });
  REQUIRE(one[0].error.empty());
  const auto two = testing::run_in_process_ranks<ReshardRun>(2, [&](int, Transport& world, ReshardRun& run) {
    PipelineEngine engine(PipelineModule(small_mlp()), "1f1b", world, two_micro_batches());
    const auto manifest = read_manifest(dir);
    if (!manifest) throw std::runtime_error("no manifest");
    run.resumed_at = engine.load_checkpoint(dir, *manifest).loaded;
    run.tensors = tensors_of(engine);
  });
  fs::remove_all(dir);

  Tensors joined;
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(two[r].error.empty());
    CHECK(two[r].resumed_at.step == 2);
    CHECK(two[r].resumed_at.data_position == 4);
    CHECK_FALSE(two[r].tensors.weights.empty());
    joined.weights.insert(two[r].tensors.weights.begin(), two[r].tensors.weights.end());
    joined.exp_avg.insert(two[r].tensors.exp_avg.begin(), two[r].tensors.exp_avg.end());
    joined.exp_avg_sq.insert(two[r].tensors.exp_avg_sq.begin(), two[r].tensors.exp_avg_sq.end());
    joined.adam_step.insert(two[r].tensors.adam_step.begin(), two[r].tensors.adam_step.end());
  }
  CHECK(equal(joined.weights, one[0].tensors.weights));
  CHECK(equal(joined.exp_avg, one[0].tensors.exp_avg));
  CHECK(equal(joined.exp_avg_sq, one[0].tensors.exp_avg_sq));
  CHECK(joined.adam_step == one[0].tensors.adam_step);
  for (const auto& [name, step] : joined.adam_step) CHECK(step == 2);
}

namespace {

// This rank's file as format 2 wrote it: each stage's tensors and torch's optimizer archive under
// "stage<s>", no "format" entry.
RankFileRecord save_format2_rank_file(const std::string& dir, PipelineEngine& engine, int rank) {
  auto int_tensor = [](std::int64_t v) { return at::full({1}, v, at::TensorOptions().dtype(at::kLong)); };
  torch::serialize::OutputArchive archive;
  archive.write("step", int_tensor(engine.global_steps()));
  archive.write("data_position", int_tensor(engine.data_position()));
  archive.write("rank", int_tensor(rank));
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.write("rng_state", gen.get_state());
  }
  for (int s : engine.stages()) {
    torch::serialize::OutputArchive stage_archive, optimizer_archive;
    for (const auto& p : engine.runtime().stage_module(s).parameters()) {
      std::string key;
      for (char c : p.name) key += c == '.' ? std::string("__") : std::string(1, c);
      stage_archive.write(key, p.tensor.detach());
    }
    engine.runtime().optimizer(s).save(optimizer_archive);
    stage_archive.write("optimizer", optimizer_archive);
    archive.write(fmt::format("stage{}", s), stage_archive);
  }
  std::ostringstream bytes;
  archive.save_to(bytes);
  const std::string path = rank_checkpoint_path(dir, engine.global_steps(), rank);
  fs::create_directories(fs::path(path).parent_path());
  write_file_atomic(path, bytes.str());
  return {static_cast<std::int64_t>(bytes.str().size()), checkpoint_crc32(bytes.str())};
}

}  // namespace

TEST_CASE("a format 2 checkpoint resumes on its own layout and is refused on another", "[checkpoint][reshard]") {
  const std::string dir = (fs::temp_directory_path() / "pipescope_test_reshard_format2").string();
  fs::remove_all(dir);
  const auto straight = testing::run_in_process_ranks<ReshardRun>(2, [](int, Transport& world, ReshardRun& run) {
    PipelineEngine engine(PipelineModule(small_mlp()), "1f1b", world, two_micro_batches());
    for (int step = 0; step < 3; ++step) run.loss_sums.push_back(engine.train_synthetic_batch().loss_sum);
  });
  const auto resumed = testing::run_in_process_ranks<ReshardRun>(2, [&](int rank, Transport& world, ReshardRun& run) {
    {
      PipelineEngine engine(PipelineModule(small_mlp()), "1f1b", world, two_micro_batches());
      for (int step = 0; step < 2; ++step) run.loss_sums.push_back(engine.train_synthetic_batch().loss_sum);
      const RankFileRecord mine = save_format2_rank_file(dir, engine, rank);
      // Rank 0 lists both files: the other's record travels through the transport.
      auto records = at::tensor(std::vector<double>{rank == 1 ? double(mine.bytes) : 0, rank == 1 ? double(mine.crc32) : 0},
                                at::TensorOptions().dtype(at::kDouble));
      world.all_reduce_sum(records)->wait(std::chrono::milliseconds(10000));
      if (rank == 0) {
        CheckpointRecord saved;  // no layout: an entry of format 2
        saved.position = {engine.global_steps(), engine.data_position()};
        saved.rank_files = std::vector<RankFileRecord>{
            mine, {static_cast<std::int64_t>(records[0].item<double>()), static_cast<std::uint32_t>(records[1].item<double>())}};
        commit_checkpoint(dir, saved, 2, {{"test", "format2"}});
      }
      wait_for_everyone(world);
    }
    PipelineEngine engine(PipelineModule(small_mlp()), "1f1b", world, two_micro_batches());
    const auto manifest = read_manifest(dir);
    if (!manifest || manifest->checkpoints.back().layout) throw std::runtime_error("no format 2 entry in the manifest");
    run.resumed_at = engine.load_checkpoint(dir, *manifest).loaded;
    run.loss_sums.push_back(engine.train_synthetic_batch().loss_sum);
  });
  REQUIRE(straight[0].error.empty());
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(resumed[r].error.empty());
    CHECK(resumed[r].resumed_at.step == 2);
    CHECK(resumed[r].loss_sums == straight[r].loss_sums);
  }

  // On one rank (another world) the format 2 checkpoint cannot be re-split.
  const auto other = testing::run_in_process_ranks<ReshardRun>(1, [&](int, Transport& world, ReshardRun&) {
    PipelineEngine engine(PipelineModule(small_mlp()), "gpipe", world, two_micro_batches());
    engine.load_checkpoint(dir, *read_manifest(dir));
  });
  fs::remove_all(dir);
  CHECK(other[0].error == fmt::format("checkpoint {} step 2: format 2 holds its tensors by stage, so it resumes only on the layout "
                                      "that wrote it: written by 2 ranks, this run has 1",
                                      dir));
}
