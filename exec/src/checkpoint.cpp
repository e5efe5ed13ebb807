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
#include <map>
#include <mutex>
#include <sstream>

#include "checkpoint_adamw.hpp"
#include "error_text.hpp"
#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/exec/expert_parallel.hpp"

namespace pipescope::exec {
namespace {

namespace fs = std::filesystem;

// Rank files of format 3 say so in their first entry; those of formats 1 and 2 have none.
constexpr std::int64_t kRankFileFormat = 3;

// Archive keys are attribute names: no dots.
std::string archive_key(const std::string& name) {
  std::string key;
  for (char c : name) key += c == '.' ? std::string("__") : std::string(1, c);
  return key;
}

at::Tensor int_tensor(std::int64_t v) { return at::full({1}, v, at::TensorOptions().dtype(at::kLong)); }

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

bool optimizer_state_by_layer(PipelineRuntime& runtime) {
  for (int s : runtime.stages())
    if (!runtime.stage_module(s).parameters().empty() && !checkpoint_detail::as_adamw(runtime.optimizer(s))) return false;
  return true;
}

RankFileRecord save_rank_checkpoint(const std::string& dir, const CheckpointPosition& position, int world_rank,
                                    PipelineRuntime& runtime) {
  torch::serialize::OutputArchive archive;
  archive.write("format", int_tensor(kRankFileFormat));
  archive.write("step", int_tensor(position.step));
  archive.write("data_position", int_tensor(position.data_position));
  archive.write("rank", int_tensor(world_rank));
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.write("rng_state", gen.get_state());
  }
  // Tensors by their model-wide names, so that any layout finds its layers; a custom optimizer's
  // state, which only it can read, by stage.
  torch::serialize::OutputArchive parameters, adamw;
  for (int s : runtime.stages()) {
    const auto& stage_parameters = runtime.stage_module(s).parameters();
    if (stage_parameters.empty()) continue;
    torch::optim::Optimizer& optimizer = runtime.optimizer(s);
    torch::optim::AdamW* by_layer = checkpoint_detail::as_adamw(optimizer);
    for (const auto& p : stage_parameters) {
      parameters.write(archive_key(p.name), p.tensor.detach().cpu());
      torch::serialize::OutputArchive state;
      if (by_layer && checkpoint_detail::save_adamw_state(*by_layer, p.tensor, state)) adamw.write(archive_key(p.name), state);
    }
    if (!by_layer) {
      torch::serialize::OutputArchive stage_archive, optimizer_archive;
      optimizer.save(optimizer_archive);
      stage_archive.write("optimizer", optimizer_archive);
      archive.write(fmt::format("stage{}", s), stage_archive);
    }
  }
  archive.write("parameters", parameters);
  archive.write("adamw", adamw);
  std::ostringstream bytes;
  archive.save_to(bytes);
  const std::string content = bytes.str();
  const std::string path = rank_checkpoint_path(dir, position.step, world_rank);
  fs::create_directories(fs::path(path).parent_path());
  // The folder of a checkpoint a resume passed over may hold anything at this name: a FIFO would
  // block the write (outputs are written through FIFOs), a link would send it elsewhere. A rank
  // file is pprun's own: whatever is not a regular file there is removed, and the file replaced.
  std::error_code error;
  const auto status = fs::symlink_status(path, error);
  if (!error && fs::exists(status) && !fs::is_regular_file(status) && !fs::is_directory(status)) fs::remove(path, error);
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

namespace {

// A rank file loaded, with its header checked against the manifest.
struct RankFile {
  std::string path;
  torch::serialize::InputArchive archive;
  CheckpointPosition position;
  at::Tensor rng_state;
};

// A fresh tensor for every read: reading into a defined tensor resizes it in place.
at::Tensor read_tensor(torch::serialize::InputArchive& archive, const std::string& key) {
  at::Tensor value;
  archive.read(key, value);
  return value;
}

void open_rank_file(RankFile& file, const std::string& dir, const CheckpointRecord& checkpoint, int rank) {
  file.path = rank_checkpoint_path(dir, checkpoint.position.step, rank);
  if (!fs::exists(file.path)) throw UsageError(fmt::format("{}: checkpoint file of rank {} is missing", file.path, rank));
  try {
    file.archive.load_from(file.path);
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("{}: cannot load checkpoint: {}", file.path, first_line(e.what())));
  }
  at::Tensor format;
  const std::int64_t written_in = file.archive.try_read("format", format) ? format.item<std::int64_t>() : 2;
  if (written_in != (checkpoint.layout ? kRankFileFormat : 2))
    throw UsageError(fmt::format("{}: a rank file of format {} in a checkpoint the manifest lists as format {}", file.path, written_in,
                                 checkpoint.layout ? kRankFileFormat : 2));
  const std::int64_t step = read_tensor(file.archive, "step").item<std::int64_t>();
  if (step != checkpoint.position.step)
    throw UsageError(fmt::format("{}: step {} does not match the manifest's {}", file.path, step, checkpoint.position.step));
  const std::int64_t written_by = read_tensor(file.archive, "rank").item<std::int64_t>();
  if (written_by != rank) throw UsageError(fmt::format("{}: written by rank {}", file.path, written_by));
  file.position = checkpoint.position;
  file.position.data_position = read_tensor(file.archive, "data_position").item<std::int64_t>();
  file.rng_state = read_tensor(file.archive, "rng_state");
}

void restore_random_state(const at::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

void copy_into_parameter(const StageModule::Parameter& p, const at::Tensor& value, const std::string& path) {
  if (!value.sizes().equals(p.tensor.sizes()))
    throw UsageError(fmt::format("{}: parameter {} has shape {} in the checkpoint, {} in the model", path, p.name,
                                 fmt::join(value.sizes(), "x"), fmt::join(p.tensor.sizes(), "x")));
  at::NoGradGuard no_grad;
  const_cast<at::Tensor&>(p.tensor).copy_(value);
}

// Format 1 and 2: this rank's own file, each stage's tensors and torch's optimizer archive under
// the stage's index.
CheckpointPosition load_by_stage(const std::string& dir, const CheckpointRecord& checkpoint, int world_rank,
                                 PipelineRuntime& runtime) {
  RankFile file;
  open_rank_file(file, dir, checkpoint, world_rank);
  restore_random_state(file.rng_state);
  for (int s : runtime.stages()) {
    torch::serialize::InputArchive stage_archive;
    if (!file.archive.try_read(fmt::format("stage{}", s), stage_archive))
      throw UsageError(fmt::format("{}: holds no stage {}: a checkpoint of format 2 resumes only on the layout that wrote it",
                                   file.path, s));
    for (const auto& p : runtime.stage_module(s).parameters()) {
      at::Tensor value;
      if (!stage_archive.try_read(archive_key(p.name), value))
        throw UsageError(fmt::format("{}: stage {} holds no parameter {}: a checkpoint of format 2 resumes only on the layout "
                                     "that wrote it",
                                     file.path, s, p.name));
      copy_into_parameter(p, value, file.path);
    }
    if (!runtime.stage_module(s).parameters().empty()) {
      torch::serialize::InputArchive optimizer_archive;
      stage_archive.read("optimizer", optimizer_archive);
      runtime.optimizer(s).load(optimizer_archive);
    }
  }
  return file.position;
}

// Format 3: each parameter, with its AdamW state, from the file of the rank that held its layer.
CheckpointPosition load_by_layer(const std::string& dir, const CheckpointRecord& checkpoint, const CheckpointLayout& here,
                                 int world_rank, PipelineRuntime& runtime) {
  const CheckpointLayout& there = *checkpoint.layout;
  const bool same_placement = there.same_placement(here);
  std::map<int, RankFile> files;
  auto file_of = [&](int rank) -> RankFile& {
    auto [it, added] = files.try_emplace(rank);
    if (added) open_rank_file(it->second, dir, checkpoint, rank);
    return it->second;
  };
  auto source_of = [&](int layer) { return same_placement ? world_rank : there.rank_of_layer(layer); };
  // The data position and step are every file's; the random state is the rank's own only where
  // the rank is the same (elsewhere this run's fresh state stands).
  RankFile& first = file_of(checkpoint_source_ranks(checkpoint, here, world_rank).front());
  const CheckpointPosition position = first.position;
  if (same_placement) restore_random_state(first.rng_state);

  for (int s : runtime.stages()) {
    const auto& stage_parameters = runtime.stage_module(s).parameters();
    if (stage_parameters.empty()) continue;
    torch::optim::Optimizer& optimizer = runtime.optimizer(s);
    torch::optim::AdamW* adamw = checkpoint_detail::as_adamw(optimizer);
    if (there.optimizer_state_by_layer && !adamw)
      throw UsageError(fmt::format("checkpoint {} step {}: holds AdamW state; this run's optimizer of stage {} is not AdamW", dir,
                                   checkpoint.position.step, s));
    for (const auto& p : stage_parameters) {
      torch::serialize::InputArchive states, state;
      at::Tensor value;
      auto holds = [&](RankFile& candidate) {
        torch::serialize::InputArchive parameters;
        return candidate.archive.try_read("parameters", parameters) && parameters.try_read(archive_key(p.name), value);
      };
      RankFile* found = &file_of(source_of(p.layer));
      if (!holds(*found) && is_expert_parameter(p.name)) {
        // Experts are stored by expert id on the replicas that held them (expert parallelism):
        // another expert-parallel size finds each one in the file of its replica.
        found = nullptr;
        for (int d = 0; d < there.data_parallel && !found; ++d) {
          RankFile& candidate = file_of(d * there.pipeline_ranks() + there.rank_of_layer(p.layer));
          if (holds(candidate)) found = &candidate;
        }
        if (!found)
          throw UsageError(fmt::format("checkpoint {} step {}: no replica's file holds the expert parameter {} (layer {})", dir,
                                       checkpoint.position.step, p.name, p.layer));
      } else if (!value.defined()) {
        throw UsageError(fmt::format("{}: holds no parameter {} (layer {})", found->path, p.name, p.layer));
      }
      RankFile& file = *found;
      copy_into_parameter(p, value, file.path);
      if (!there.optimizer_state_by_layer) continue;
      if (file.archive.try_read("adamw", states) && states.try_read(archive_key(p.name), state))
        checkpoint_detail::load_adamw_state(*adamw, p.tensor, fmt::format("{} in {}", p.name, file.path), state);
      else
        checkpoint_detail::clear_adamw_state(*adamw, p.tensor);  // written before the first step
    }
    if (!there.optimizer_state_by_layer) {
      // layout_refusal let it through: the placement is the same, so the stage is in this file.
      torch::serialize::InputArchive stage_archive, optimizer_archive;
      file_of(world_rank).archive.read(fmt::format("stage{}", s), stage_archive);
      stage_archive.read("optimizer", optimizer_archive);
      optimizer.load(optimizer_archive);
    }
  }
  return position;
}

}  // namespace

CheckpointPosition load_rank_checkpoint(const std::string& dir, const CheckpointRecord& checkpoint,
                                        const CheckpointLayout& here, int world_rank, PipelineRuntime& runtime) {
  if (const auto refusal = layout_refusal(dir, checkpoint, here)) throw UsageError(*refusal);
  try {
    return checkpoint.layout ? load_by_layer(dir, checkpoint, here, world_rank, runtime)
                             : load_by_stage(dir, checkpoint, world_rank, runtime);
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("{}: cannot load checkpoint: {}", rank_checkpoint_path(dir, checkpoint.position.step, world_rank),
                                 first_line(e.what())));
  }
}

}  // namespace pipescope::exec
