// A rank's checkpoint file: written, checked against its manifest record, loaded. The manifest
// itself is checkpoint_manifest.cpp's.
#include "pipescope/exec/checkpoint.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/optim/adamw.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <zlib.h>

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

at::Tensor int_tensor(std::int64_t v) { return at::full({1}, v, at::TensorOptions().dtype(at::kLong)); }

std::string first_line(std::string text) {
  if (auto nl = text.find('\n'); nl != std::string::npos) text.resize(nl);
  return text;
}

}  // namespace

std::uint32_t checkpoint_crc32(std::string_view bytes) {
  // zlib's CRC-32 is the IEEE one the manifest records; crc32_z takes sizes past 4 GiB.
  return static_cast<std::uint32_t>(
      crc32_z(crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

std::string checkpoint_subdir(int step) { return fmt::format("step-{:08d}", step); }

std::string rank_checkpoint_path(const std::string& dir, int step, int rank) {
  return (fs::path(dir) / checkpoint_subdir(step) / fmt::format("rank-{:05d}.pt", rank)).string();
}

RankFileRecord save_rank_checkpoint(const std::string& dir, const CheckpointPosition& position, int world_rank,
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
  const std::string content = bytes.str();
  const std::string path = rank_checkpoint_path(dir, position.step, world_rank);
  fs::create_directories(fs::path(path).parent_path());
  write_file_atomic(path, content);
  return {static_cast<std::int64_t>(content.size()), checkpoint_crc32(content)};
}

std::optional<std::string> rank_file_problem(const std::string& dir, const CheckpointRecord& checkpoint, int rank,
                                             bool read_contents) {
  if (!checkpoint.problem.empty()) return checkpoint.problem;
  const std::string path = rank_checkpoint_path(dir, checkpoint.position.step, rank);
  std::error_code error;
  const auto status = fs::status(path, error);
  if (!fs::exists(status)) return fmt::format("{} is missing", path);
  if (!fs::is_regular_file(status)) return fmt::format("{} is not a regular file", path);
  const std::uintmax_t bytes = fs::file_size(path, error);
  if (error) return fmt::format("{}: {}", path, error.message());
  if (!checkpoint.rank_files) {
    // Format 1 records nothing to compare with: the file must load as an archive.
    if (!read_contents) return bytes > 0 ? std::nullopt : std::optional<std::string>(fmt::format("{} is empty", path));
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(path);
      return std::nullopt;
    } catch (const std::exception& e) {
      return fmt::format("{} does not load: {}", path, first_line(e.what()));
    }
  }
  if (rank < 0 || static_cast<std::size_t>(rank) >= checkpoint.rank_files->size())
    return fmt::format("the manifest records no file for rank {} of {}", rank, checkpoint.rank_files->size());
  const RankFileRecord& record = (*checkpoint.rank_files)[static_cast<std::size_t>(rank)];
  if (static_cast<std::int64_t>(bytes) != record.bytes)
    return fmt::format("{} has {} bytes, the manifest records {}", path, bytes, record.bytes);
  if (!read_contents) return std::nullopt;
  std::string content;
  try {
    content = read_file(path);
  } catch (const std::exception& e) {
    return first_line(e.what());
  }
  if (const std::uint32_t crc = checkpoint_crc32(content); crc != record.crc32)
    return fmt::format("{} has CRC-32 {:08x}, the manifest records {:08x}", path, crc, record.crc32);
  return std::nullopt;
}

std::string fallback_notice(const std::string& dir, const CheckpointChoice& choice) {
  if (choice.damaged.empty()) return "";
  std::vector<std::string> passed;
  for (const auto& d : choice.damaged) passed.push_back(fmt::format("{} ({})", checkpoint_subdir(d.step), d.reason));
  return fmt::format("checkpoint {} in {} is damaged: {}; resuming from {}, the previous complete one",
                     checkpoint_subdir(choice.damaged.front().step), dir, fmt::join(passed, "; "),
                     checkpoint_subdir(choice.loaded.step));
}

CheckpointPosition load_rank_checkpoint(const std::string& dir, const CheckpointRecord& checkpoint, int world_rank,
                                        PipelineRuntime& runtime) {
  const std::string path = rank_checkpoint_path(dir, checkpoint.position.step, world_rank);
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
    if (t.item<std::int64_t>() != checkpoint.position.step)
      throw UsageError(fmt::format("step {} does not match the manifest's {}", t.item<std::int64_t>(), checkpoint.position.step));
    t = read_tensor("rank");
    if (t.item<std::int64_t>() != world_rank) throw UsageError(fmt::format("written by rank {}", t.item<std::int64_t>()));
    CheckpointPosition position = checkpoint.position;
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
