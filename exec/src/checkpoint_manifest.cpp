// The checkpoint manifest, DIR/manifest.json: read (formats 1, 2 and 3) and written in one place, and
// the commit that makes a new checkpoint the newest and prunes the old ones in a crash-safe order.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/json_limits.hpp"
#include "pipescope/exec/checkpoint.hpp"

namespace pipescope::exec {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat1 = "pipescope.checkpoint/1";
constexpr const char* kFormat2 = "pipescope.checkpoint/2";
constexpr const char* kFormat3 = "pipescope.checkpoint/3";

std::string manifest_path(const std::string& dir) { return (fs::path(dir) / "manifest.json").string(); }

// A rename or a new file is durable only once its folder is synced: done before the manifest
// names a checkpoint, and before anything the manifest no longer lists is removed.
void sync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw RuntimeError(fmt::format("cannot sync folder {}: {}", path, why));
  }
  ::close(fd);
}

// Numbers as written, never wrapped: a step of 2^32 + 5 is a broken manifest, not step 5.
CheckpointPosition position_of(const nlohmann::json& j) {
  return {static_cast<int>(integer_field(j, "step", 0, INT_MAX)), integer_field(j, "data_position", 0, INT64_MAX)};
}

// The number of rank files of a checkpoint: its layout's world, or the manifest's for an entry of
// format 1 or 2 (which has no layout of its own).
int world_size_of(const CheckpointRecord& checkpoint, int manifest_world_size) {
  return checkpoint.layout ? checkpoint.layout->world_size : manifest_world_size;
}

// One entry of the list of formats 2 and 3; a malformed one keeps its step (when it has one) and
// says why.
CheckpointRecord record_of(const nlohmann::json& entry, std::size_t index, int manifest_world_size) {
  CheckpointRecord record;
  try {
    record.position = position_of(entry);
    if (entry.contains("layout")) record.layout = CheckpointLayout::from_json(entry.at("layout"));
    const int world_size = world_size_of(record, manifest_world_size);
    if (entry.contains("directory") && entry.at("directory").get<std::string>() != checkpoint_subdir(record.position.step))
      throw UsageError(fmt::format("directory '{}' is not {}", entry.at("directory").get<std::string>(),
                                   checkpoint_subdir(record.position.step)));
    if (!entry.contains("files")) return record;  // checked by loading, as format 1
    std::vector<RankFileRecord> files;
    for (const auto& f : entry.at("files"))
      files.push_back({integer_field(f, "bytes", 0, INT64_MAX), static_cast<std::uint32_t>(integer_field(f, "crc32", 0, UINT32_MAX))});
    if (static_cast<int>(files.size()) != world_size)
      throw UsageError(fmt::format("{} rank files for world size {}", files.size(), world_size));
    record.rank_files = std::move(files);
  } catch (const std::exception& e) {
    record.problem = fmt::format("entry {} of the manifest is malformed: {}", index, e.what());
  }
  return record;
}

}  // namespace

nlohmann::json manifest_json(const Manifest& manifest) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& c : manifest.checkpoints) {
    nlohmann::json entry = {{"step", c.position.step},
                            {"data_position", c.position.data_position},
                            {"directory", checkpoint_subdir(c.position.step)}};
    if (c.layout) entry["layout"] = c.layout->to_json();
    if (c.rank_files) {
      entry["files"] = nlohmann::json::array();
      for (std::size_t r = 0; r < c.rank_files->size(); ++r)
        entry["files"].push_back(
            {{"name", fmt::format("rank-{:05d}.pt", r)}, {"bytes", (*c.rank_files)[r].bytes}, {"crc32", (*c.rank_files)[r].crc32}});
    }
    list.push_back(std::move(entry));
  }
  return {{"format", kFormat3},
          {"step", manifest.position.step},
          {"data_position", manifest.position.data_position},
          {"world_size", manifest.world_size},
          {"directory", checkpoint_subdir(manifest.position.step)},
          {"config", manifest.config},
          {"checkpoints", list}};
}

std::optional<Manifest> read_manifest(const std::string& dir) {
  const std::string path = manifest_path(dir);
  std::error_code error;
  if (!fs::exists(fs::symlink_status(path, error))) return std::nullopt;
  try {
    if (fs::is_directory(path)) throw UsageError("is a folder");
    const std::string text = read_file(path);
    if (auto problem = json_depth_problem(text)) throw UsageError(*problem);
    const auto j = nlohmann::json::parse(text);
    const std::string format = j.value("format", kFormat1);
    if (format != kFormat1 && format != kFormat2 && format != kFormat3) throw UsageError(fmt::format("unknown format '{}'", format));
    Manifest m;
    m.format = format == kFormat1 ? 1 : format == kFormat2 ? 2 : 3;
    m.world_size = static_cast<int>(integer_field(j, "world_size", 1, INT_MAX));
    m.config = j.at("config");
    if (format == kFormat1) {
      m.checkpoints.push_back({position_of(j), std::nullopt, std::nullopt, ""});
    } else {
      const auto& list = j.at("checkpoints");
      if (!list.is_array() || list.empty()) throw UsageError("it lists no checkpoint");
      for (std::size_t i = 0; i < list.size(); ++i) m.checkpoints.push_back(record_of(list[i], i, m.world_size));
    }
    m.position = m.checkpoints.back().problem.empty() ? m.checkpoints.back().position : position_of(j);
    return m;
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("{}: unreadable checkpoint manifest: {}", path, e.what()));
  }
}

std::optional<CheckpointRecord> newest_present_checkpoint(const std::string& dir, const Manifest& manifest) {
  for (auto it = manifest.checkpoints.rbegin(); it != manifest.checkpoints.rend(); ++it) {
    bool present = true;
    const int world_size = world_size_of(*it, manifest.world_size);
    for (int r = 0; present && r < world_size; ++r) present = !rank_file_problem(dir, *it, r, false);
    if (present) return *it;
  }
  return std::nullopt;
}

void commit_checkpoint(const std::string& dir, const CheckpointRecord& saved, int world_size, const nlohmann::json& config) {
  const std::optional<Manifest> previous = read_manifest(dir);
  Manifest next;
  next.position = saved.position;
  next.world_size = world_size;
  next.config = config;
  // The one to fall back on: the newest earlier checkpoint with all its files there.
  std::optional<CheckpointRecord> kept;
  if (previous) {
    // An entry without a layout counts its files by the manifest's world size: it stays only
    // while that is the same.
    Manifest earlier = *previous;
    std::erase_if(earlier.checkpoints, [&](const CheckpointRecord& c) {
      return c.position.step >= saved.position.step || (!c.layout && previous->world_size != world_size);
    });
    if (!earlier.checkpoints.empty()) kept = newest_present_checkpoint(dir, earlier);
  }
  if (kept) next.checkpoints.push_back(*kept);
  next.checkpoints.push_back(saved);

  // The new folder and its files' names reach the disk before the manifest names them, and the
  // manifest before anything it no longer lists goes: a crash at any point leaves a manifest
  // whose checkpoints are all there.
  sync_directory((fs::path(dir) / checkpoint_subdir(saved.position.step)).string());
  sync_directory(dir);
  write_file_atomic(manifest_path(dir), manifest_json(next).dump(2) + "\n");
  sync_directory(dir);

  // Only checkpoints older than the new one that the previous manifest listed are removed.
  if (!previous) return;
  for (const auto& old : previous->checkpoints) {
    if (!old.problem.empty() || old.position.step >= saved.position.step) continue;
    if (kept && old.position.step == kept->position.step) continue;
    std::error_code ignored;
    fs::remove_all(fs::path(dir) / checkpoint_subdir(old.position.step), ignored);
  }
}

}  // namespace pipescope::exec
