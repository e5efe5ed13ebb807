// pprun's plan of a run (run_plan.hpp): the schedule, the model's stages, the text and the
// checkpoint folder, checked before any worker starts.
#include "pprun/run_plan.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/option_conflicts.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/core/validator.hpp"
#include "pipescope/exec/device.hpp"
#include "pipescope/exec/transport.hpp"
#include "data/default_corpus.hpp"
#include "pprun/metrics_row.hpp"
#include "pprun/model_memory.hpp"

namespace pipescope::exec {
namespace {

ModelConfig model_config(const RunOptions& o) {
  ModelConfig c;
  c.name = o.model;
  c.layers = o.layers;
  c.hidden = o.hidden;
  c.seq_len = o.seq_len;
  c.vocab = o.vocab;
  c.micro_batch_size = o.micro_batch_size;
  c.seed = o.seed;
  c.experts = o.experts;
  c.top_k = o.top_k;
  c.moe_ffn_hidden = o.moe_ffn_hidden;
  c.shared_expert_ffn_hidden = o.shared_expert_ffn_hidden;
  c.expert_parallel = o.expert_parallel;
  return c;
}

// --recompute-layers N: a stage with fewer than N layers recomputes as one run (partitions are
// uneven, and Megatron's uniform method ends a stage's last run short too), but an N above every
// stage's layer count asks for runs no stage has: refused, naming the stage sizes.
void check_recompute_layers(const RunPlan& plan) {
  const int n = plan.options.recompute_layers;
  if (n <= 1) return;
  std::vector<int> stage_layers;
  stage_layers.reserve(static_cast<std::size_t>(plan.partition.num_stages()));
  for (int s = 0; s < plan.partition.num_stages(); ++s)
    stage_layers.push_back(plan.partition.bounds[s + 1] - plan.partition.bounds[s]);
  const int largest = *std::ranges::max_element(stage_layers);
  if (n > largest)
    throw UsageError(fmt::format(
        "option --recompute-layers {}: no stage has that many layers (layers per stage: {}, --partition {}); "
        "--recompute-layers {} already recomputes the largest stage as one run",
        n, fmt::join(stage_layers, ", "), plan.options.partition_method, largest));
}

// --resume needs a manifest of this run with a checkpoint short of --steps; a fresh run must not
// take over a folder that holds another run's checkpoints (its first checkpoint would hide them).
void check_checkpoint_dir(const RunPlan& plan) {
  const RunOptions& o = plan.options;
  if (o.checkpoint_dir.empty()) return;
  const std::optional<Manifest> manifest = read_manifest(o.checkpoint_dir);
  if (!o.resume) {
    if (manifest)
      throw UsageError(
          fmt::format("option --checkpoint-dir {}: holds the checkpoints of a run (step {}); add --resume to "
                      "continue it, or give an empty folder",
                      o.checkpoint_dir, manifest->position.step));
    return;
  }
  if (!manifest)
    throw UsageError(
        fmt::format("option --resume: {} holds no checkpoint manifest (manifest.json); nothing to resume "
                    "(leave out --resume to start from step 0)",
                    o.checkpoint_dir));
  check_resumable(plan, *manifest);
  // A look at the files (no reading): the workers check their contents and may fall back further.
  const std::optional<CheckpointRecord> newest = newest_present_checkpoint(o.checkpoint_dir, *manifest);
  if (!newest)
    throw UsageError(fmt::format(
        "option --resume: {}: every checkpoint the manifest lists has missing or truncated files", o.checkpoint_dir));
  if (newest->position.step >= o.steps) throw UsageError(nothing_to_do(o, newest->position.step));
  metrics_before(o.metrics_path, newest->position.step);  // the history to append to is readable
}

}  // namespace

TextBatches open_text_data(const RunOptions& o) {
  const std::string path = text_data_path(o);
  std::error_code error;
  if (o.data.empty() && !std::filesystem::exists(path, error))
    throw UsageError(
        fmt::format("no --data given and the default corpus is not at {} (the build copies it there, install "
                    "puts it in PREFIX/share/pipescope/corpus): give --data FILE|FOLDER, or --data synthetic",
                    path));
  return TextBatches(TextCorpus::open(path), o.seq_len, o.micro_batch_size, o.seed, path);
}

void check_resumable(const RunPlan& plan, const Manifest& manifest) {
  static const std::vector<std::string> layout_keys = {"schedule",   "micro_batches", "stages",
                                                       "world_size", "data_parallel", "partition"};
  if (const auto refusal = identity_refusal(plan.options.checkpoint_dir, manifest, run_identity(plan), layout_keys))
    throw UsageError(*refusal);
}

std::string nothing_to_do(const RunOptions& o, int checkpoint_step) {
  return fmt::format(
      "option --steps {}: the checkpoint in {} is at step {}; nothing to do (--steps is the total, "
      "not the steps to add)",
      o.steps, o.checkpoint_dir, checkpoint_step);
}

std::string metrics_before(const std::string& path, int step) {
  std::error_code error;
  if (path.empty() || !std::filesystem::exists(path, error)) return "";
  const std::string text = read_file(path);
  std::string kept;
  int line_number = 0;
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (line.empty()) continue;
    int row_step = -1;
    try {
      row_step = nlohmann::json::parse(line).get<MetricsRow>().step;
    } catch (const std::exception&) {
      throw UsageError(fmt::format(
          "option --metrics {}: line {} is not a metrics row; a resumed run appends to the file", path, line_number));
    }
    if (row_step < step) kept += line + "\n";
  }
  return kept;
}

RunPlan make_run_plan(const RunOptions& options, int world_size) {
  check_run_options(options);
  if (options.device == "cuda" && !cuda_support_built())
    throw UsageError(
        "option --device cuda: this pprun was built without the CUDA path (scripts/build-cuda.sh builds it)");
  if (options.device == "cpu" && !gloo_support_built())
    throw UsageError("option --device cpu: this pprun was built without Gloo (the CUDA build); use --device cuda");
  RunPlan plan;
  plan.options = options;
  plan.world_size = world_size;
  if (world_size % options.data_parallel != 0)
    throw UsageError(
        fmt::format("option --dp {}: does not divide the world size {}", options.data_parallel, world_size));
  plan.pipeline_ranks = world_size / options.data_parallel;
  ScheduleParams params;
  params.num_ranks = plan.pipeline_ranks;
  params.num_micro_batches = options.micro_batches;
  params.chunks = options.chunks;
  params.chunks_given = options.chunks_given;
  params.microbatch_group_size = options.microbatch_group_size;
  plan.schedule = make_schedule(options.schedule, params);
  GivenScheduleSizes given;
  if (options.was_given("--micro-batches")) given.micro_batches = options.micro_batches;
  if (options.was_given("--chunks")) given.chunks = options.chunks;
  check_sizes_agree_with_file(plan.schedule, options.schedule, given);
  if (plan.schedule.num_ranks != plan.pipeline_ranks)
    throw UsageError(fmt::format("schedule '{}' has {} pipeline ranks, but the run has {} (world size {} / --dp {})",
                                 options.schedule, plan.schedule.num_ranks, plan.pipeline_ranks, world_size,
                                 options.data_parallel));
  validate(plan.schedule);
  plan.model = make_model_spec(model_config(options));
  check_model_fits_machine(plan, physical_memory_bytes());
  try {
    plan.partition = partition_layers(plan.model.layer_infos(), plan.schedule.num_stages, options.partition_method);
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("--model {} has {} layers and cannot be split into {} stages: {}", options.model,
                                 plan.model.layers.size(), plan.schedule.num_stages, e.what()));
  }
  if (plan.partition.num_stages() != plan.schedule.num_stages)
    throw UsageError(fmt::format("--model {}: the partition has {} stages, the schedule {}", options.model,
                                 plan.partition.num_stages(), plan.schedule.num_stages));
  for (int s = 0; s < plan.partition.num_stages(); ++s)
    if (plan.partition.bounds[s] >= plan.partition.bounds[s + 1])
      throw UsageError(fmt::format("--model {} has {} layers and cannot be split into {} non-empty stages",
                                   options.model, plan.model.layers.size(), plan.schedule.num_stages));
  // The text is checked here, before any worker starts; each worker maps it again.
  plan.data_identity = kSyntheticData;
  if (!uses_synthetic_data(options)) {
    const TextBatches text = open_text_data(options);
    plan.data_identity =
        fmt::format("text: {} file(s), {} bytes", text.corpus().files().size(), text.corpus().size_bytes());
  }
  check_recompute_layers(plan);
  check_checkpoint_dir(plan);
  return plan;
}

nlohmann::json run_identity(const RunPlan& plan) {
  const RunOptions& o = plan.options;
  nlohmann::json identity = {{"model", o.model},
                             {"layers", o.layers},
                             {"hidden", o.hidden},
                             {"seq_len", o.seq_len},
                             {"vocab", o.vocab},
                             {"micro_batch_size", o.micro_batch_size},
                             {"seed", o.seed},
                             {"schedule", plan.schedule.name},
                             {"micro_batches", plan.schedule.num_micro_batches},
                             {"stages", plan.schedule.num_stages},
                             {"world_size", plan.world_size},
                             {"data_parallel", o.data_parallel},
                             {"partition", plan.partition.bounds},
                             {"data", plan.data_identity}};
  // The experts' sizes must match on resume; --expert-parallel need not (experts are stored by
  // id), so it is not part of the identity.
  if (o.model == "tiny-moe") {
    identity["experts"] = o.experts;
    identity["top_k"] = o.top_k;
    identity["moe_ffn_hidden"] = o.moe_ffn_hidden;
    identity["shared_expert_ffn_hidden"] = o.shared_expert_ffn_hidden;
  }
  return identity;
}

}  // namespace pipescope::exec
