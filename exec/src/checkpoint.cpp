#include "pipescope/exec/checkpoint.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/optim/adamw.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <filesystem>
#include <mutex>
#include <sstream>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"

namespace pipescope::exec {
namespace {

namespace fs = std::filesystem;

// Archive keys are attribute names: no dots.
std::string archive_key(const std::string& name) {
  std::string key;
  for (char c : name) key += c == '.' ? std::string("__") : std::string(1, c);
  return key;
}

std::string rank_file(const std::string& dir, int step, int rank) {
  return (fs::path(dir) / checkpoint_subdir(step) / fmt::format("rank-{:05d}.pt", rank)).string();
}

at::Tensor int_tensor(std::int64_t v) { return at::full({1}, v, at::TensorOptions().dtype(at::kLong)); }

}  // namespace

std::string checkpoint_subdir(int step) { return fmt::format("step-{:08d}", step); }

void save_rank_checkpoint(const std::string& dir, const CheckpointPosition& position, int world_rank,
                          PipelineRuntime& runtime) {
  torch::serialize::OutputArchive archive;
  archive.write("step", int_tensor(position.step));
  archive.write("data_position", int_tensor(position.data_position));
  archive.write("rank", int_tensor(world_rank));
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.write("rng_state", gen.get_state());
  }
  for (int s : runtime.stages()) {
    torch::serialize::OutputArchive stage_archive;
    for (const auto& p : runtime.stage_module(s).parameters()) stage_archive.write(archive_key(p.name), p.tensor.detach());
    if (!runtime.stage_module(s).parameters().empty()) {
      torch::serialize::OutputArchive optimizer_archive;
      runtime.optimizer(s).save(optimizer_archive);
      stage_archive.write("optimizer", optimizer_archive);
    }
    archive.write(fmt::format("stage{}", s), stage_archive);
  }
  std::ostringstream bytes;
  archive.save_to(bytes);
  const std::string path = rank_file(dir, position.step, world_rank);
  fs::create_directories(fs::path(path).parent_path());
  write_file_atomic(path, bytes.str());
}

void commit_checkpoint(const std::string& dir, const CheckpointPosition& position, int world_size,
                       const nlohmann::json& config) {
  std::optional<Manifest> previous = read_manifest(dir);
  nlohmann::json manifest = {{"format", "pipescope.checkpoint/1"},
                             {"step", position.step},
                             {"data_position", position.data_position},
                             {"world_size", world_size},
                             {"directory", checkpoint_subdir(position.step)},
                             {"config", config}};
  write_file_atomic((fs::path(dir) / "manifest.json").string(), manifest.dump(2) + "\n");
  // Keep the new checkpoint and the one before it; older ones are no longer referenced.
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(dir, ignored)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("step-") || name == checkpoint_subdir(position.step)) continue;
    if (previous && name == checkpoint_subdir(previous->position.step)) continue;
    fs::remove_all(entry.path(), ignored);
  }
}

std::optional<Manifest> read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "manifest.json").string();
  if (!fs::exists(path)) return std::nullopt;
  try {
    auto j = nlohmann::json::parse(read_file(path));
    Manifest m;
    m.position.step = j.at("step").get<int>();
    m.position.data_position = j.at("data_position").get<std::int64_t>();
    m.world_size = j.at("world_size").get<int>();
    m.config = j.at("config");
    return m;
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("{}: unreadable checkpoint manifest: {}", path, e.what()));
  }
}

CheckpointPosition load_rank_checkpoint(const std::string& dir, const Manifest& manifest, int world_rank,
                                        PipelineRuntime& runtime) {
  const std::string path = rank_file(dir, manifest.position.step, world_rank);
  if (!fs::exists(path)) throw UsageError(fmt::format("{}: checkpoint file of rank {} is missing", path, world_rank));
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    // A fresh tensor for every read: reading into a defined tensor resizes it in place.
    auto read_tensor = [&](const char* key) {
      at::Tensor value;
      archive.read(key, value);
      return value;
    };
    at::Tensor t = read_tensor("step");
    if (t.item<std::int64_t>() != manifest.position.step)
      throw UsageError(fmt::format("step {} does not match the manifest's {}", t.item<std::int64_t>(), manifest.position.step));
    t = read_tensor("rank");
    if (t.item<std::int64_t>() != world_rank) throw UsageError(fmt::format("written by rank {}", t.item<std::int64_t>()));
    CheckpointPosition position = manifest.position;
    t = read_tensor("data_position");
    position.data_position = t.item<std::int64_t>();
    t = read_tensor("rng_state");
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(t);
    }
    for (int s : runtime.stages()) {
      torch::serialize::InputArchive stage_archive;
      archive.read(fmt::format("stage{}", s), stage_archive);
      at::NoGradGuard no_grad;
      for (const auto& p : runtime.stage_module(s).parameters()) {
        at::Tensor value;
        stage_archive.read(archive_key(p.name), value);
        if (!value.sizes().equals(p.tensor.sizes()))
          throw UsageError(fmt::format("parameter {} has shape {} in the checkpoint, {} in the model", p.name,
                                       fmt::join(value.sizes(), "x"), fmt::join(p.tensor.sizes(), "x")));
        const_cast<at::Tensor&>(p.tensor).copy_(value);
      }
      if (!runtime.stage_module(s).parameters().empty()) {
        torch::serialize::InputArchive optimizer_archive;
        stage_archive.read("optimizer", optimizer_archive);
        runtime.optimizer(s).load(optimizer_archive);
      }
    }
    return position;
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("{}: {}", path, e.what()));
  } catch (const std::exception& e) {
    std::string message = e.what();
    if (auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl);
    throw UsageError(fmt::format("{}: cannot load checkpoint: {}", path, message));
  }
}

}  // namespace pipescope::exec
