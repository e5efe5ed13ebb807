// Checkpoints of a run: per rank, the weights and AdamW state of its layers, the step, the data
// position and the random state, in DIR/step-NNNNNNNN/rank-NNNNN.pt. Every file is written
// atomically (temporary file + rename). The manifest DIR/manifest.json lists the complete
// checkpoints (the newest and the one before it), each rank file with its size and CRC-32; rank 0
// writes it once every rank's file is on disk, so a run killed at any moment resumes from a
// complete checkpoint, and a damaged newest one (a truncated or missing rank file, a bad entry)
// gives way to the one before it. DIR is one folder that every rank sees.
//
// Format 3 is layout-free: a rank file holds its tensors by parameter name ("layer3.fc.weight",
// the model-wide layer index) with each one's AdamW state, and the manifest records the layout
// that wrote it (CheckpointLayout), so a run with another pipeline size, chunk count, partition,
// schedule or number of replicas reads each of its layers from whichever file holds it. Format 2
// files hold each stage's tensors and optimizer archive by stage index: they resume only on the
// layout that wrote them.
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
  // Micro-batch samples consumed by all replicas together: the next step's replica 0 starts there,
  // so it carries over to another number of replicas.
  std::int64_t data_position = 0;
};

// What the manifest records of one rank's file, checked before the file is loaded.
struct RankFileRecord {
  std::int64_t bytes = 0;
  std::uint32_t crc32 = 0;
};

// What a checkpoint was written for and by: the model (which must match on resume) and the
// layout (which may differ). Recorded with each checkpoint of format 3.
struct CheckpointLayout {
  std::string model;                // ModelConfig::name ("tiny-gpt", "custom", ...)
  int layers = 0;                   // of the whole model
  int world_size = 1;
  int data_parallel = 1;            // replicas; world rank = replica x pipeline_ranks + pipeline rank
  std::string schedule;             // for the reader only: a schedule change needs nothing re-split
  std::vector<int> partition;       // stage s holds layers [partition[s], partition[s + 1])
  std::vector<int> stage_to_rank;   // the pipeline rank of each stage
  // False when the optimizer is not AdamW: its state is then saved per stage, in torch's own
  // form, and resumes only on the same placement.
  bool optimizer_state_by_layer = true;

  int pipeline_ranks() const { return world_size / data_parallel; }
  // The world rank of replica 0 that holds `layer`.
  int rank_of_layer(int layer) const;
  // The same ranks hold the same layers (the schedule may differ).
  bool same_placement(const CheckpointLayout& other) const;
  nlohmann::json to_json() const;
  // Throws UsageError naming the field that is missing or inconsistent.
  static CheckpointLayout from_json(const nlohmann::json& j);
};

// One checkpoint as the manifest lists it.
struct CheckpointRecord {
  CheckpointPosition position;
  // The layout that wrote it (format 3); none for an entry of format 1 or 2.
  std::optional<CheckpointLayout> layout;
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

// Writes this rank's file of the checkpoint `position` (format 3) and returns what the manifest
// records of it.
RankFileRecord save_rank_checkpoint(const std::string& dir, const CheckpointPosition& position, int world_rank,
                                    PipelineRuntime& runtime);
// Whether every optimizer of the runtime keeps AdamW state, which checkpoints save by layer.
bool optimizer_state_by_layer(PipelineRuntime& runtime);

struct Manifest {
  int format = 3;               // of the manifest file: 1, 2 or 3
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
// formats 1, 2 and 3. Throws UsageError naming the manifest when it is unreadable; an entry that
// alone is malformed is kept with its `problem`.
std::optional<Manifest> read_manifest(const std::string& dir);
// The manifest as JSON (format 3, with the newest checkpoint also at the top level, as format 1
// readers expect).
nlohmann::json manifest_json(const Manifest& manifest);

// Why `rank`'s file of `checkpoint` cannot be loaded, or nothing when it can. With
// `read_contents` false, only that the file is there with its recorded size (no reading); with
// true, also its CRC-32 (format 1: that it loads as an archive).
std::optional<std::string> rank_file_problem(const std::string& dir, const CheckpointRecord& checkpoint, int rank,
                                             bool read_contents);

// The newest listed checkpoint whose every rank file is there with its recorded size, or nothing.
std::optional<CheckpointRecord> newest_present_checkpoint(const std::string& dir, const Manifest& manifest);

// Why a run of layout `here` cannot resume `checkpoint` at all (another model, or a layout change
// that the checkpoint's form cannot follow), as one line naming DIR and the step; nothing when it
// can. A damaged file is not a refusal: it is rank_file_problem's.
std::optional<std::string> layout_refusal(const std::string& dir, const CheckpointRecord& checkpoint,
                                          const CheckpointLayout& here);

// Why a run whose identity is `mine` (the caller's JSON, as save_checkpoint was given it: pprun's
// run_identity) cannot resume the newest checkpoint of `manifest`, as one line naming DIR and the
// step; nothing when it can. Keys in `layout_keys` may differ when that checkpoint records its
// layout (format 3); every other key must be equal ("written for tiny-gpt with layers 8, this run
// has 6").
std::optional<std::string> identity_refusal(const std::string& dir, const Manifest& manifest, const nlohmann::json& mine,
                                            const std::vector<std::string>& layout_keys);

// The ranks whose files `world_rank` of layout `here` reads to resume `checkpoint`: its own on
// the same placement (or for a checkpoint without a layout), else, for each layer it holds, the
// rank of replica 0 that held it.
std::vector<int> checkpoint_source_ranks(const CheckpointRecord& checkpoint, const CheckpointLayout& here, int world_rank);

// Loads this rank's part of `checkpoint` into the runtime of layout `here`: the weights and
// optimizer state of its layers, from checkpoint_source_ranks' files, and the random state when
// the placement is the same (on another one the random state is this run's own, as a fresh run
// of this layout has it). Returns the checkpoint's position. Throws UsageError naming the file
// and the parameter when something does not match.
CheckpointPosition load_rank_checkpoint(const std::string& dir, const CheckpointRecord& checkpoint,
                                        const CheckpointLayout& here, int world_rank, PipelineRuntime& runtime);

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
