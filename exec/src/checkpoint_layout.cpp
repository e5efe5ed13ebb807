// What a checkpoint was written for and by (CheckpointLayout), and the decisions a resume on
// another layout takes from it: whether it can resume at all, and which rank files each rank
// reads.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <set>
#include <string_view>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/json_limits.hpp"
#include "pipescope/exec/checkpoint.hpp"

namespace pipescope::exec {

int CheckpointLayout::rank_of_layer(int layer) const {
  for (std::size_t s = 0; s + 1 < partition.size(); ++s)
    if (layer >= partition[s] && layer < partition[s + 1]) return stage_to_rank.at(s);
  throw UsageError(fmt::format("layer {} is in no stage of the partition [{}]", layer, fmt::join(partition, ", ")));
}

bool CheckpointLayout::same_placement(const CheckpointLayout& other) const {
  return world_size == other.world_size && data_parallel == other.data_parallel && partition == other.partition &&
         stage_to_rank == other.stage_to_rank;
}

nlohmann::json CheckpointLayout::to_json() const {
  return {{"model", model},
          {"layers", layers},
          {"world_size", world_size},
          {"data_parallel", data_parallel},
          {"schedule", schedule},
          {"partition", partition},
          {"stage_to_rank", stage_to_rank},
          {"optimizer_state", optimizer_state_by_layer ? "by-layer" : "by-stage"}};
}

CheckpointLayout CheckpointLayout::from_json(const nlohmann::json& j) {
  CheckpointLayout l;
  l.model = j.at("model").get<std::string>();
  l.layers = static_cast<int>(integer_field(j, "layers", 1, INT_MAX));
  l.world_size = static_cast<int>(integer_field(j, "world_size", 1, INT_MAX));
  l.data_parallel = static_cast<int>(integer_field(j, "data_parallel", 1, INT_MAX));
  l.schedule = j.at("schedule").get<std::string>();
  for (const char* key : {"partition", "stage_to_rank"}) {
    const auto& list = j.at(key);
    if (!list.is_array()) throw UsageError(fmt::format("layout: '{}' must be a list of integers", key));
    std::vector<int>& out = std::string_view(key) == "partition" ? l.partition : l.stage_to_rank;
    for (const auto& v : list) {
      const auto value = json_integer_in(v, 0, INT_MAX);
      if (!value) throw UsageError(fmt::format("layout: '{}' holds {}, not an integer from 0 to {}", key, v.dump(), INT_MAX));
      out.push_back(static_cast<int>(*value));
    }
  }
  const std::string optimizer_state = j.at("optimizer_state").get<std::string>();
  if (optimizer_state != "by-layer" && optimizer_state != "by-stage")
    throw UsageError(fmt::format("layout: optimizer_state '{}' is neither by-layer nor by-stage", optimizer_state));
  l.optimizer_state_by_layer = optimizer_state == "by-layer";
  if (l.world_size < 1 || l.data_parallel < 1 || l.world_size % l.data_parallel != 0)
    throw UsageError(fmt::format("layout: world size {} is not a multiple of data_parallel {}", l.world_size, l.data_parallel));
  if (l.partition.size() != l.stage_to_rank.size() + 1 || l.partition.empty() || l.partition.front() != 0 ||
      l.partition.back() != l.layers || !std::is_sorted(l.partition.begin(), l.partition.end()))
    throw UsageError(fmt::format("layout: partition [{}] does not split {} layers into {} stages", fmt::join(l.partition, ", "),
                                 l.layers, l.stage_to_rank.size()));
  for (int r : l.stage_to_rank)
    if (r < 0 || r >= l.pipeline_ranks())
      throw UsageError(fmt::format("layout: stage on pipeline rank {} of {}", r, l.pipeline_ranks()));
  return l;
}

std::optional<std::string> layout_refusal(const std::string& dir, const CheckpointRecord& checkpoint,
                                          const CheckpointLayout& here) {
  const std::string where = fmt::format("checkpoint {} step {}", dir, checkpoint.position.step);
  if (!checkpoint.layout) {
    // Format 1 and 2 files hold tensors by stage index and record no layout: the world size is
    // all there is to compare here (each stage is checked as it loads).
    if (checkpoint.rank_files && static_cast<int>(checkpoint.rank_files->size()) != here.world_size)
      return fmt::format("{}: format 2 holds its tensors by stage, so it resumes only on the layout that wrote it: written by {} "
                         "ranks, this run has {}",
                         where, checkpoint.rank_files->size(), here.world_size);
    return std::nullopt;
  }
  const CheckpointLayout& there = *checkpoint.layout;
  if (there.model != here.model) return fmt::format("{}: written for {}, this run trains {}", where, there.model, here.model);
  if (there.layers != here.layers)
    return fmt::format("{}: written for {} with {} layers, this run has {}", where, there.model, there.layers, here.layers);
  if (!there.optimizer_state_by_layer && !there.same_placement(here))
    return fmt::format("{}: its optimizer state is not AdamW's and is saved per stage, so it resumes only with stages [{}] "
                       "on ranks [{}] of {}; this run has [{}] on [{}] of {}",
                       where, fmt::join(there.partition, ", "), fmt::join(there.stage_to_rank, ", "), there.world_size,
                       fmt::join(here.partition, ", "), fmt::join(here.stage_to_rank, ", "), here.world_size);
  return std::nullopt;
}

std::vector<int> checkpoint_source_ranks(const CheckpointRecord& checkpoint, const CheckpointLayout& here, int world_rank) {
  if (!checkpoint.layout || checkpoint.layout->same_placement(here)) return {world_rank};
  const int pipe_rank = world_rank % here.pipeline_ranks();
  std::set<int> ranks;
  for (std::size_t s = 0; s < here.stage_to_rank.size(); ++s) {
    if (here.stage_to_rank[s] != pipe_rank) continue;
    for (int layer = here.partition[s]; layer < here.partition[s + 1]; ++layer) ranks.insert(checkpoint.layout->rank_of_layer(layer));
  }
  return {ranks.begin(), ranks.end()};
}

std::optional<std::string> identity_refusal(const std::string& dir, const Manifest& manifest, const nlohmann::json& mine,
                                            const std::vector<std::string>& layout_keys) {
  const CheckpointRecord& newest = manifest.checkpoints.back();
  const std::string where = fmt::format("checkpoint {} step {}", dir, manifest.position.step);
  auto is_layout = [&](const std::string& key) { return std::find(layout_keys.begin(), layout_keys.end(), key) != layout_keys.end(); };
  auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  auto theirs = [&](const std::string& key) { return manifest.config.contains(key) ? text(manifest.config.at(key)) : "nothing"; };
  std::vector<std::string> model_differences, layout_differences;
  for (const auto& [key, value] : mine.items()) {
    if (manifest.config.contains(key) && manifest.config.at(key) == value) continue;
    if (key == "model") return fmt::format("{}: written for {}, this run trains {}", where, theirs(key), text(value));
    (is_layout(key) ? layout_differences : model_differences)
        .push_back(fmt::format("{} {}, this run has {}", key, theirs(key), text(value)));
  }
  const std::string model = manifest.config.contains("model") ? text(manifest.config.at("model")) : "another run";
  if (!model_differences.empty())
    return fmt::format("{}: written for {} with {}", where, model, fmt::join(model_differences, "; "));
  if (!layout_differences.empty() && !newest.layout)
    return fmt::format("{}: format {} holds its tensors by stage, so it resumes only on the layout that wrote it: {}", where,
                       manifest.format, fmt::join(layout_differences, "; "));
  return std::nullopt;
}

}  // namespace pipescope::exec
