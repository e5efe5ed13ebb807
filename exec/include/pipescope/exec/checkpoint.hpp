// Checkpoints of a run: per rank, the weights and AdamW state of its stages, the step, the data
// position and the random state, in DIR/step-NNNNNNNN/rank-NNNNN.pt. Every file is written
// atomically (temporary file + rename). The manifest DIR/manifest.json lists the complete
// checkpoints (the newest and the one before it), each rank file with its size and CRC-32; rank 0
// writes it once every rank's file is on disk, so a run killed at any moment resumes from a
// complete checkpoint, and a damaged newest one (a truncated or missing rank file, a bad entry)
// gives way to the one before it. DIR is one folder that every rank sees.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipescope/exec/runtime.hpp"

namespace pipescope::exec {

struct CheckpointPosition {
  int step = 0;                 // completed steps
  std::int64_t data_position = 0;  // index of the next micro-batch sample of replica 0
};

// What the manifest records of one rank's file, checked before the file is loaded.
struct RankFileRecord {
  std::int64_t bytes = 0;
  std::uint32_t crc32 = 0;
};

// One checkpoint as the manifest lists it.
struct CheckpointRecord {
  CheckpointPosition position;
  // By rank. A manifest of format 1 records none: its files are checked by loading them.
  std::optional<std::vector<RankFileRecord>> rank_files;
  // Why the manifest's entry is unusable (malformed), or empty.
  std::string problem;
};

// CRC-32 (IEEE 802.3, as zlib and the `crc32` tool compute it) of a rank file: enough to tell a
// damaged file from an intact one, and a checker is everywhere.
std::uint32_t checkpoint_crc32(std::string_view bytes);

// The directory of the checkpoint after `step` completed steps, relative to the checkpoint dir.
std::string checkpoint_subdir(int step);
// DIR/step-NNNNNNNN/rank-NNNNN.pt
std::string rank_checkpoint_path(const std::string& dir, int step, int rank);

// Writes this rank's file of the checkpoint `position` and returns what the manifest records of it.
RankFileRecord save_rank_checkpoint(const std::string& dir, const CheckpointPosition& position, int world_rank,
                                    PipelineRuntime& runtime);

struct Manifest {
  CheckpointPosition position;  // the newest listed checkpoint's
  int world_size = 0;
  nlohmann::json config;
  std::vector<CheckpointRecord> checkpoints;  // oldest first; never empty
};

// Written by rank 0 after every rank saved `saved` (its rank files in rank order): makes it the
// newest checkpoint, keeps the newest earlier one whose files are all there, and only then, once
// the new manifest is on disk, removes the older checkpoints the previous manifest listed. A
// step-* folder the manifest never listed is never touched. `config` identifies the run (model,
// grid, schedule) and is checked on resume.
void commit_checkpoint(const std::string& dir, const CheckpointRecord& saved, int world_size, const nlohmann::json& config);

// The checkpoints listed in DIR/manifest.json, or nothing when DIR has no manifest. Reads
// formats 1 and 2. Throws UsageError naming the manifest when it is unreadable; an entry that
// alone is malformed is kept with its `problem`.
std::optional<Manifest> read_manifest(const std::string& dir);
// The manifest as JSON (format 2, with the newest checkpoint also at the top level, as format 1
// readers expect).
nlohmann::json manifest_json(const Manifest& manifest);

// Why `rank`'s file of `checkpoint` cannot be loaded, or nothing when it can. With
// `read_contents` false, only that the file is there with its recorded size (no reading); with
// true, also its CRC-32 (format 1: that it loads as an archive).
std::optional<std::string> rank_file_problem(const std::string& dir, const CheckpointRecord& checkpoint, int rank,
                                             bool read_contents);

// The newest listed checkpoint whose every rank file is there with its recorded size, or nothing.
std::optional<CheckpointRecord> newest_present_checkpoint(const std::string& dir, const Manifest& manifest);

// Loads this rank's file of `checkpoint` into the runtime (weights, optimizer state, random state)
// and returns its position. Throws UsageError naming the file when it is missing or does not match.
CheckpointPosition load_rank_checkpoint(const std::string& dir, const CheckpointRecord& checkpoint, int world_rank,
                                        PipelineRuntime& runtime);

// What PipelineEngine::load_checkpoint chose: the checkpoint loaded, and the newer ones it passed
// over as damaged (newest first), each with the reason.
struct CheckpointChoice {
  CheckpointPosition loaded;
  struct Damaged {
    int step = 0;
    std::string reason;
  };
  std::vector<Damaged> damaged;
};

// One line for the user when the newest checkpoint was passed over; empty when it was loaded.
std::string fallback_notice(const std::string& dir, const CheckpointChoice& choice);

}  // namespace pipescope::exec
