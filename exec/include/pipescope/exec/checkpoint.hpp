// Checkpoints of a run: per rank, the weights and AdamW state of its stages, the step, the data
// position and the random state, in DIR/step-NNNNNNNN/rank-NNNNN.pt. Every file is written
// atomically (temporary file + rename); the manifest DIR/manifest.json, naming the last complete
// checkpoint, is written last by rank 0 once every rank has written its file, so a run killed at
// any moment resumes from the last complete checkpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "pipescope/exec/runtime.hpp"

namespace pipescope::exec {

struct CheckpointPosition {
  int step = 0;                 // completed steps
  std::int64_t data_position = 0;  // index of the next micro-batch sample of replica 0
};

// The directory of the checkpoint after `step` completed steps, relative to the checkpoint dir.
std::string checkpoint_subdir(int step);

// Writes this rank's file of the checkpoint `position`.
void save_rank_checkpoint(const std::string& dir, const CheckpointPosition& position, int world_rank,
                          PipelineRuntime& runtime);

// Written by rank 0 after every rank saved: makes the checkpoint the one to resume from, and
// removes checkpoints older than the previous one. `config` identifies the run (model, grid,
// schedule) and is checked on resume.
void commit_checkpoint(const std::string& dir, const CheckpointPosition& position, int world_size,
                       const nlohmann::json& config);

struct Manifest {
  CheckpointPosition position;
  int world_size = 0;
  nlohmann::json config;
};
// The last complete checkpoint, or nothing when DIR has none. Throws UsageError naming the
// manifest when it is unreadable.
std::optional<Manifest> read_manifest(const std::string& dir);

// Loads this rank's file into the runtime (weights, optimizer state, random state) and returns
// its position. Throws UsageError naming the file when it is missing or does not match.
CheckpointPosition load_rank_checkpoint(const std::string& dir, const Manifest& manifest, int world_rank,
                                        PipelineRuntime& runtime);

}  // namespace pipescope::exec
