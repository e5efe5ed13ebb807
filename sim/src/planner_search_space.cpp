// The planner's search space: what a profile allows, the layouts tried, and every candidate
// configuration the request describes.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/pipeline_layout.hpp"
#include "pipescope/sim/planner.hpp"
#include "planner_candidate.hpp"

namespace pipescope::sim {
namespace {

// The chunk counts tried for a schedule: those it runs, or the request's list where it takes any.
std::vector<int> chunk_choices(const PlanRequest& request, const std::string& name) {
  const ScheduleTraits& traits = planning::traits_of(name);
  return traits.chunks.empty() ? request.interleave_chunks : traits.chunks;
}

// Layers the candidate may split into stages: the model's, or those the profile recorded
// (none recorded: profile_for_stages decides).
int layer_count(const PlanRequest& request) {
  if (!request.profile) return request.model.layers;
  if (const auto& layers = request.profile->layers) return static_cast<int>(layers->size());
  return std::numeric_limits<int>::max();
}

// Each recomputation with the modules it recomputes: the selective rows once per module set.
std::vector<std::pair<Recomputation, std::uint8_t>> recomputation_choices(const PlanRequest& request) {
  const std::vector<std::uint8_t> sets = request.recompute_module_sets.empty()
                                             ? std::vector<std::uint8_t>{request.options.recompute_modules}
                                             : request.recompute_module_sets;
  std::vector<std::pair<Recomputation, std::uint8_t>> choices;
  for (Recomputation recomputation : request.recomputations) {
    if (recomputation != Recomputation::selective) {
      choices.emplace_back(recomputation, request.options.recompute_modules);
      continue;
    }
    for (std::uint8_t modules : sets) choices.emplace_back(recomputation, modules);
  }
  return choices;
}

// a2a+p2p's all-to-all group for T x C where the request names none: the largest A below C that
// divides C and a tensor-parallel rank's heads (all_to_all_splits_heads), with T x A in a node
// (the all-to-all on NVLink, the ring across); 0 where none does (the row is refused with the
// reason).
int all_to_all_group(const PlanRequest& request, int tp, int cp) {
  if (request.options.context_parallel_a2a > 0) return request.options.context_parallel_a2a;
  for (int a = cp / 2; a >= 2; --a)
    if (cp % a == 0 && tp * a <= request.topology.gpus_per_node && all_to_all_splits_heads(request.model, tp, a))
      return a;
  return 0;
}

}  // namespace

int profile_pipeline_ranks(const Profile& profile) {
  if (profile.calibration && profile.calibration->num_ranks) {
    const int ranks = *profile.calibration->num_ranks;
    if (ranks >= 1 && static_cast<int>(profile.stages.size()) % ranks == 0) return ranks;
  }
  return static_cast<int>(profile.stages.size());
}

int plan_profile_world_size(const Profile& profile) { return profile_pipeline_ranks(profile) * profile.data_parallel; }

int profile_measured_micro_batches(const Profile& profile) {
  if (!profile.calibration || !profile.calibration->micro_batches || profile.calibration->micro_batches->empty())
    return 0;
  return std::max(0, profile.calibration->micro_batches->front());
}

std::string profile_model_name(const Profile& profile) { return profile.model.value_or("profiled model"); }

void check_profile_request(const PlanRequest& request) {
  if (!request.profile) return;
  const Profile& profile = *request.profile;
  const std::string& source = request.profile_source;
  const int ranks = profile_pipeline_ranks(profile);
  const int world = ranks * profile.data_parallel;
  if (request.num_gpus != world)
    throw UsageError(
        fmt::format("--gpus {}: the profile {} was measured on {} pipeline rank(s) x {} data-parallel "
                    "replica(s) = {} processes; it cannot predict another world size (measure one there)",
                    request.num_gpus, source, ranks, profile.data_parallel, world));
  for (int mbs : request.micro_batch_sizes)
    if (mbs != profile.micro_batch_size)
      throw UsageError(
          fmt::format("--micro-batch-sizes {}: the profile {} measured micro-batches of {} sample(s); "
                      "costs of other sizes are not in it",
                      mbs, source, profile.micro_batch_size));
  for (Recomputation recomputation : request.recomputations)
    if (recomputation != Recomputation::none)
      throw UsageError(fmt::format("--recompute {}: the profile {} measured runs without activation recomputation",
                                   recomputation_name(recomputation), source));
  for (int t : request.tensor_parallel_sizes)
    if (t != 1)
      throw UsageError(
          fmt::format("--tensor-parallel-sizes {}: the profile {} measured stages without tensor "
                      "parallelism",
                      t, source));
  const int per_micro_batch = profile.data_parallel * profile.micro_batch_size;
  if (request.global_batch < 1 || request.global_batch % per_micro_batch != 0)
    throw UsageError(
        fmt::format("--global-batch {}: with the profile {} it must be a positive multiple of {} "
                    "(data-parallel {} x micro-batch size {})",
                    request.global_batch, source, per_micro_batch, profile.data_parallel, profile.micro_batch_size));
}

std::vector<LayoutOptions> layout_choices(const PlanRequest& request, int layers, int pipeline, int chunks) {
  std::vector<LayoutOptions> choices{request.options.layout};
  if (!request.search_layouts || request.profile || !request.options.layout.is_default()) return choices;
  std::vector<std::vector<int>> counts;
  try {
    counts.push_back(split_layers(layers, pipeline * chunks));
  } catch (const UsageError&) {
    return choices;  // the split itself is refused, with its reason, when the candidate is built
  }
  auto offer = [&](const LayoutOptions& layout) {
    try {
      std::vector<int> stage_counts = stage_layer_counts(layout, layers, pipeline, chunks);
      if (std::find(counts.begin(), counts.end(), stage_counts) != counts.end()) return;
      counts.push_back(std::move(stage_counts));
      choices.push_back(layout);
    } catch (const UsageError&) {
      // Megatron refuses this layout for these sizes: not a choice here.
    }
  };
  LayoutOptions counted;
  counted.account_for_embedding = counted.account_for_loss = true;
  offer(counted);
  // The first and the last rank one layer per chunk lighter: the others hold m each, with
  // (pipeline - 2) m + 2 (m - chunks) = layers.
  if (pipeline >= 3 && (layers + 2 * chunks) % pipeline == 0) {
    const int middle = (layers + 2 * chunks) / pipeline;
    LayoutOptions lighter_ends;
    lighter_ends.first_stage_layers = lighter_ends.last_stage_layers = middle - chunks;
    offer(lighter_ends);
  }
  return choices;
}

std::vector<PlanCandidate> enumerate_candidates(const PlanRequest& request) {
  if (request.num_gpus < 1) throw UsageError("--gpus must be at least 1");
  if (request.global_batch < 1) throw UsageError("--global-batch must be at least 1");
  // 0 is "up to the number of layers"; a negative size is a mistake, never "no limit".
  if (request.max_pipeline < 0)
    throw UsageError(fmt::format("--max-pipeline {}: must be 0 (up to the number of layers) or a pipeline size",
                                 request.max_pipeline));
  check_profile_request(request);
  std::vector<PlanCandidate> out;
  const int layers = layer_count(request);
  // A profile fixes the pipeline size: other sizes change the data-parallel size it measured.
  const int fixed_pipeline = request.profile ? profile_pipeline_ranks(*request.profile) : 0;
  const int max_pipeline = request.max_pipeline > 0 ? request.max_pipeline : layers;
  const std::vector<int> expert_parallel_sizes = request.expert_parallel_sizes.empty()
                                                     ? std::vector<int>{request.options.expert_parallel}
                                                     : request.expert_parallel_sizes;
  const std::vector<int> expert_tensor_parallel_sizes = request.expert_tensor_parallel_sizes.empty()
                                                            ? std::vector<int>{request.options.expert_tensor_parallel}
                                                            : request.expert_tensor_parallel_sizes;
  // The exchange matters only where the sequence is split.
  const auto exchanges = [&request](int cp) {
    return cp > 1 && !request.context_parallel_comms.empty()
               ? request.context_parallel_comms
               : std::vector<ContextParallelComm>{request.options.context_parallel_comm};
  };
  for (int tp : request.tensor_parallel_sizes) {
    for (int cp : request.context_parallel_sizes) {
      if (tp < 1 || cp < 1 || request.num_gpus % (static_cast<std::int64_t>(tp) * cp) != 0) continue;  // no layout
      const int gpus = request.num_gpus / (tp * cp);
      // Sequence parallelism splits what tensor parallelism replicates: nothing at T = 1.
      const std::vector<bool> sequence_parallel = tp > 1 ? request.sequence_parallel_options : std::vector<bool>{false};
      for (int pp = 1; pp <= std::min(gpus, max_pipeline); ++pp) {
        if (gpus % pp != 0) continue;
        if (fixed_pipeline > 0 && pp != fixed_pipeline) continue;
        const int dp = gpus / pp;
        for (int mbs : request.micro_batch_sizes) {
          const std::int64_t samples_per_micro_batch = static_cast<std::int64_t>(dp) * mbs;
          if (mbs < 1 || request.global_batch % samples_per_micro_batch != 0) continue;
          const int m = static_cast<int>(request.global_batch / samples_per_micro_batch);
          for (const std::string& schedule : request.schedules) {
            for (int chunks : chunk_choices(request, schedule)) {
              if (pp * chunks > layers) continue;
              for (const LayoutOptions& layout : layout_choices(request, layers, pp, chunks)) {
                for (const auto& [recomputation, modules] : recomputation_choices(request)) {
                  for (bool sp : sequence_parallel) {
                    for (Fp8Format precision : request.precisions) {
                      for (int ep : expert_parallel_sizes) {
                        for (int etp : expert_tensor_parallel_sizes) {
                          for (ContextParallelComm exchange : exchanges(cp)) {
                            PlanCandidate c;
                            c.schedule = schedule;
                            c.parallel = request.options;
                            c.parallel.pipeline = pp;
                            c.parallel.chunks = chunks;
                            c.parallel.layout = layout;
                            c.parallel.data_parallel = dp;
                            c.parallel.tensor_parallel = tp;
                            c.parallel.context_parallel = cp;
                            c.parallel.sequence_parallel = sp;
                            c.parallel.micro_batch_size = mbs;
                            c.parallel.recomputation = recomputation;
                            c.parallel.recompute_modules = modules;
                            c.parallel.fp8 = precision;
                            // The distributed optimizer shards over DP x CP: nothing to shard over one GPU.
                            c.parallel.zero1 = request.zero1 && dp * cp > 1;
                            c.parallel.overlap_param_gather = c.parallel.zero1 && request.options.overlap_param_gather;
                            // Megatron's recipes set it where interleaving runs (its only schedule for it).
                            c.parallel.overlap_param_gather_with_optimizer_step =
                                c.parallel.overlap_param_gather && chunks > 1 &&
                                schedule.rfind("interleaved-1f1b", 0) == 0 &&
                                request.options.overlap_param_gather_with_optimizer_step;
                            // TE's userbuffers overlap sequence parallelism's collectives: without it, none.
                            c.parallel.tp_comm_overlap = sp && request.options.tp_comm_overlap;
                            c.parallel.overlap_grad_reduce = request.overlap_grad_reduce;
                            c.parallel.async_tensor_parallel_backward = request.async_tensor_parallel_backward;
                            c.parallel.expert_parallel = ep;
                            c.parallel.expert_tensor_parallel = etp;
                            c.parallel.context_parallel_comm = exchange;
                            if (exchange == ContextParallelComm::a2a_p2p)
                              c.parallel.context_parallel_a2a = all_to_all_group(request, tp, cp);
                            c.num_micro_batches = m;
                            out.push_back(c);
                          }
                        }
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace pipescope::sim
