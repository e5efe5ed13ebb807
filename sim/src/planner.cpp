#include "pipescope/sim/planner.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/core/size_limits.hpp"
#include "pipescope/sim/calibration.hpp"
#include "pipescope/sim/pipeline_layout.hpp"
#include "pipescope/sim/steady_state.hpp"
#include "pipescope/sim/zb_auto.hpp"
#include "memory_rules.hpp"
#include "same_run.hpp"

namespace pipescope::sim {
namespace {

std::vector<int> chunk_choices(const PlanRequest& request, const std::string& name) {
  const std::string schedule = name.substr(0, name.find('@'));  // interleaved-1f1b@0.1 is interleaved too
  if (schedule == "interleaved-1f1b" || schedule == "looped-bfs") return request.interleave_chunks;
  if (schedule == "zbv" || schedule == "dualpipev") return {2};
  if (schedule == "zb-auto") return {1, 2};
  return {1};
}

ScheduleParams schedule_params(const PlanRequest& request, const PlanCandidate& c) {
  ScheduleParams params;
  params.num_ranks = c.parallel.pipeline;
  params.num_micro_batches = c.num_micro_batches;
  params.chunks = c.parallel.chunks;
  params.chunks_given = c.parallel.chunks != 1;
  // The group size goes to the schedules that group micro-batches; the others run as they are.
  const GeneratorInfo* info = ScheduleRegistry::instance().find(c.schedule);
  if (info && info->takes_microbatch_group_size) params.microbatch_group_size = request.microbatch_group_size;
  return params;
}

Topology candidate_topology(const PlanRequest& request, const PlanCandidate& c) {
  // Every link of a profile is the one link it measured.
  if (request.profile) return topology_from_profile(*request.profile);
  return with_parallel_layout(request.topology, c.parallel);
}

// The candidate's per-stage costs: derived from the model on the device, or the profile's
// measured stages re-split to the candidate's stage count. Throws UsageError when the profile
// cannot describe the candidate.
CostModel candidate_costs(const PlanRequest& request, const PlanCandidate& c) {
  if (!request.profile) return derive_costs(request.model, request.device, request.topology, c.parallel);
  const int num_stages = c.parallel.pipeline * c.parallel.chunks;
  return cost_model_from_profile(profile_for_stages(*request.profile, num_stages, request.profile_source));
}

// Layers the candidate may split into stages: the model's, or those the profile recorded
// (none recorded: profile_for_stages decides).
int layer_count(const PlanRequest& request) {
  if (!request.profile) return request.model.layers;
  const auto& extra = request.profile->extra;
  if (extra.is_object() && extra.contains("layers") && extra["layers"].is_array())
    return static_cast<int>(extra["layers"].size());
  return std::numeric_limits<int>::max();
}

std::int64_t largest_static_bytes(const CostModel& costs, const std::vector<int>& placement, int num_ranks) {
  std::vector<std::int64_t> per_rank(static_cast<std::size_t>(num_ranks), 0);
  for (std::size_t s = 0; s < placement.size(); ++s) per_rank[placement[s]] += costs.stages[s].static_bytes;
  return *std::max_element(per_rank.begin(), per_rank.end());
}

std::int64_t memory_limit(const PlanRequest& request) {
  if (request.max_mem_bytes > 0) return request.max_mem_bytes;
  return request.profile ? std::numeric_limits<std::int64_t>::max() : request.device.memory_bytes;
}

// The candidate's schedule, compiled. zb-auto is searched with the candidate's own costs and
// the memory limit; the others come from the registry and depend on their shape only, and
// those made from a compute order are compiled straight from it.
CompiledSchedule compiled_candidate(const PlanRequest& request, const PlanCandidate& c, const CostModel& costs) {
  if (c.schedule != "zb-auto") {
    if (std::optional<ComputeOrder> order = make_compute_order(c.schedule, schedule_params(request, c)))
      return compile(std::move(*order));
    return compile(make_schedule(c.schedule, schedule_params(request, c)));
  }
  ZbAutoRequest zb;
  zb.params = schedule_params(request, c);
  zb.costs = costs;
  zb.topology = candidate_topology(request, c);
  zb.max_mem_bytes = memory_limit(request);
  return compile(zb_auto_schedule(zb));
}

}  // namespace

std::string refusal_summary(const PlanResult& result) {
  if (result.refused == 0) return "";
  std::vector<std::pair<int, std::string>> causes;
  for (const auto& [cause, count] : result.refusals_by_cause) causes.emplace_back(count, cause);
  std::stable_sort(causes.begin(), causes.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string text = fmt::format("refused {}:", result.refused);
  for (std::size_t i = 0; i < causes.size(); ++i)
    text += fmt::format("{} {} by {}", i == 0 ? "" : ",", causes[i].first, causes[i].second);
  return text;
}

double iteration_time_lower_bound_s(const CostModel& costs, const std::vector<int>& stage_to_rank, int num_ranks,
                                    int num_micro_batches) {
  // A micro-batch's backward: split or fused, whichever is shorter. An overlapped gradient
  // reduction may hide entirely behind the backward: it counts 0 here.
  std::vector<double> per_rank(static_cast<std::size_t>(num_ranks), 0.0);
  for (std::size_t s = 0; s < stage_to_rank.size(); ++s) {
    const StageCost& c = costs.stage(static_cast<int>(s));
    per_rank[stage_to_rank[s]] +=
        num_micro_batches * (c.f_s + std::min(c.b_s + c.w_s, c.backward_pass_s())) +
        (c.reduce_grads_overlapped() ? 0.0 : c.reduce_grads_s) +
        c.reduce_tied_s + c.optimizer_s;
  }
  // A hair below: the simulation adds the same costs one by one and may round lower.
  return *std::max_element(per_rank.begin(), per_rank.end()) * (1 - 1e-9);
}

double model_flops_per_sample(const ModelSpec& model) {
  const LayerFigures layer = layer_figures(model, 1);
  const double head = 2.0 * model.seq * model.hidden * static_cast<double>(model.vocab);
  return model.layers * (layer.f_flops + layer.b_flops + layer.w_flops) + 3.0 * head;
}

int profile_pipeline_ranks(const Profile& profile) {
  const auto& extra = profile.extra;
  if (extra.is_object() && extra.contains("calibration") && extra["calibration"].is_object() &&
      extra["calibration"].contains("num_ranks") && extra["calibration"]["num_ranks"].is_number_integer()) {
    const int ranks = extra["calibration"]["num_ranks"].get<int>();
    if (ranks >= 1 && static_cast<int>(profile.stages.size()) % ranks == 0) return ranks;
  }
  return static_cast<int>(profile.stages.size());
}

int plan_profile_world_size(const Profile& profile) { return profile_pipeline_ranks(profile) * profile.data_parallel; }

int profile_measured_micro_batches(const Profile& profile) {
  const auto& extra = profile.extra;
  if (!extra.is_object() || !extra.contains("calibration") || !extra["calibration"].is_object()) return 0;
  const auto& info = extra["calibration"];
  if (!info.contains("micro_batches") || !info["micro_batches"].is_array() || info["micro_batches"].empty()) return 0;
  const auto& first = info["micro_batches"].front();
  return first.is_number_integer() ? std::max(0, first.get<int>()) : 0;
}

std::string profile_model_name(const Profile& profile) {
  const auto& extra = profile.extra;
  if (extra.is_object() && extra.contains("model") && extra["model"].is_string()) return extra["model"].get<std::string>();
  return "profiled model";
}

void check_profile_request(const PlanRequest& request) {
  if (!request.profile) return;
  const Profile& profile = *request.profile;
  const std::string& source = request.profile_source;
  const int ranks = profile_pipeline_ranks(profile);
  const int world = ranks * profile.data_parallel;
  if (request.num_gpus != world)
    throw UsageError(fmt::format("--gpus {}: the profile {} was measured on {} pipeline rank(s) x {} data-parallel "
                                 "replica(s) = {} processes; it cannot predict another world size (measure one there)",
                                 request.num_gpus, source, ranks, profile.data_parallel, world));
  for (int mbs : request.micro_batch_sizes)
    if (mbs != profile.micro_batch_size)
      throw UsageError(fmt::format("--micro-batch-sizes {}: the profile {} measured micro-batches of {} sample(s); "
                                   "costs of other sizes are not in it",
                                   mbs, source, profile.micro_batch_size));
  for (Recomputation recomputation : request.recomputations)
    if (recomputation != Recomputation::none)
      throw UsageError(fmt::format("--recompute {}: the profile {} measured runs without activation recomputation",
                                   recomputation_name(recomputation), source));
  for (int t : request.tensor_parallel_sizes)
    if (t != 1)
      throw UsageError(fmt::format("--tensor-parallel-sizes {}: the profile {} measured stages without tensor "
                                   "parallelism",
                                   t, source));
  const int per_micro_batch = profile.data_parallel * profile.micro_batch_size;
  if (request.global_batch < 1 || request.global_batch % per_micro_batch != 0)
    throw UsageError(fmt::format("--global-batch {}: with the profile {} it must be a positive multiple of {} "
                                 "(data-parallel {} x micro-batch size {})",
                                 request.global_batch, source, per_micro_batch, profile.data_parallel,
                                 profile.micro_batch_size));
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
    throw UsageError(fmt::format("--max-pipeline {}: must be 0 (up to the number of layers) or a pipeline size", request.max_pipeline));
  check_profile_request(request);
  std::vector<PlanCandidate> out;
  const int layers = layer_count(request);
  // A profile fixes the pipeline size: other sizes change the data-parallel size it measured.
  const int fixed_pipeline = request.profile ? profile_pipeline_ranks(*request.profile) : 0;
  const int max_pipeline = request.max_pipeline > 0 ? request.max_pipeline : layers;
  const std::vector<int> expert_parallel_sizes =
      request.expert_parallel_sizes.empty() ? std::vector<int>{request.options.expert_parallel} : request.expert_parallel_sizes;
  const std::vector<int> expert_tensor_parallel_sizes = request.expert_tensor_parallel_sizes.empty()
                                                            ? std::vector<int>{request.options.expert_tensor_parallel}
                                                            : request.expert_tensor_parallel_sizes;
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
            for (Recomputation recomputation : request.recomputations) {
              for (bool sp : sequence_parallel) {
               for (Fp8Format precision : request.precisions) {
               for (int ep : expert_parallel_sizes) {
               for (int etp : expert_tensor_parallel_sizes) {
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
                c.parallel.fp8 = precision;
                // The distributed optimizer shards over DP x CP: nothing to shard over one GPU.
                c.parallel.zero1 = request.zero1 && dp * cp > 1;
                c.parallel.overlap_param_gather = c.parallel.zero1 && request.options.overlap_param_gather;
                // TE's userbuffers overlap sequence parallelism's collectives: without it, none.
                c.parallel.tp_comm_overlap = sp && request.options.tp_comm_overlap;
                c.parallel.overlap_grad_reduce = request.overlap_grad_reduce;
                c.parallel.async_tensor_parallel_backward = request.async_tensor_parallel_backward;
                c.parallel.expert_parallel = ep;
                c.parallel.expert_tensor_parallel = etp;
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
  return out;
}

SimResult simulate_candidate(const PlanRequest& request, const PlanCandidate& candidate, bool build_trace) {
  const CostModel costs = candidate_costs(request, candidate);
  const CompiledSchedule schedule = compiled_candidate(request, candidate, costs);
  if (request.profile) check_profile_fits(*request.profile, schedule, request.profile_source);
  SimOptions options;
  options.build_trace = build_trace;
  return simulate(schedule, costs, candidate_topology(request, candidate), options);
}

PlanResult plan(const PlanRequest& request, const std::function<void(std::size_t, std::size_t)>& progress) {
  PlanResult result;
  result.limit_bytes = memory_limit(request);
  const std::vector<PlanCandidate> candidates = enumerate_candidates(request);
  std::set<std::string> refusals;
  // A tensor-parallel size that does not divide the GPUs has no layout at all: it is one
  // configuration considered and refused.
  int layoutless = 0;
  std::map<std::string, int> by_cause;
  for (int tp : request.tensor_parallel_sizes) {
    for (int cp : request.context_parallel_sizes) {
      if (tp >= 1 && cp >= 1 && request.num_gpus % (static_cast<std::int64_t>(tp) * cp) == 0) continue;
      ++layoutless;
      ++by_cause["the GPU count"];
      refusals.insert(cp == 1 ? fmt::format("tensor parallel {}: does not divide the {} GPUs (tp x pp x dp = GPUs)", tp,
                                            request.num_gpus)
                              : fmt::format("tensor parallel {} x context parallel {}: does not divide the {} GPUs "
                                            "(tp x cp x pp x dp = GPUs)",
                                            tp, cp, request.num_gpus));
    }
  }
  result.considered = static_cast<int>(candidates.size()) + layoutless;
  result.refused = layoutless;
  const std::size_t total = static_cast<std::size_t>(result.considered);
  // A profile knows neither the model's FLOPs nor its sequence length: no MFU, no tokens/s.
  const double flops_per_sample = request.profile ? 0.0 : model_flops_per_sample(request.model);
  const double tokens_per_sample = request.profile ? 0.0 : request.model.seq;
  const double cluster_flops_per_s = request.device.peak_flops_per_s * request.num_gpus;
  auto refuse_as = [&](const char* cause, const PlanCandidate& c, const std::string& why) {
    ++result.refused;
    ++by_cause[cause];
    refusals.insert(fmt::format("{} (pipeline {}, chunks {}, {} micro-batches): {}", c.schedule, c.parallel.pipeline,
                                c.parallel.chunks, c.num_micro_batches, why));
  };
  auto refuse = [&](const PlanCandidate& c, const std::string& why) { refuse_as("the schedule", c, why); };

  // A schedule's shape depends on (name, p, m, chunks) only: compile it once.
  using ShapeKey = std::tuple<std::string, int, int, int>;
  std::map<ShapeKey, std::shared_ptr<const CompiledSchedule>> compiled;
  std::map<ShapeKey, std::string> refused_shapes;
  std::map<const CompiledSchedule*, std::uint64_t> signatures;
  SimOptions options;
  options.build_trace = false;

  // Costs, the static-memory check and the lower bound for every candidate first: cheap, and
  // they decide the order of the expensive part.
  struct Pending {
    std::size_t index;
    CostModel costs;
    double lower_bound_s;
  };
  std::vector<Pending> pending;
  pending.reserve(candidates.size());
  // Schedules too large for this machine are refused before one is built; when none fits,
  // the option that asked for them is named.
  int too_large = 0;
  std::int64_t smallest_instructions = std::numeric_limits<std::int64_t>::max();
  std::string smallest_problem;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const PlanCandidate& c = candidates[i];
    const int stages = c.parallel.pipeline * c.parallel.chunks;
    const ScheduleSize size = estimated_size(c.parallel.pipeline, stages, c.num_micro_batches);
    const std::int64_t instructions = size.instructions;
    if (auto problem = size_problem(size)) {
      ++too_large;
      refuse_as("this machine's memory", c, *problem);
      if (instructions < smallest_instructions) {
        smallest_instructions = instructions;
        smallest_problem = fmt::format("the smallest, {} on pipeline {} with {} micro-batches, needs {}", c.schedule,
                                       c.parallel.pipeline, c.num_micro_batches, *problem);
      }
      continue;
    }
    // Tensor parallelism the model or the node cannot take: one line per reason, which names T.
    if (!request.profile) {
      if (auto problem = tensor_parallel_problem(request.model, c.parallel, request.topology.gpus_per_node)) {
        ++result.refused;
        ++by_cause["tensor parallelism"];
        refusals.insert(*problem);
        continue;
      }
      std::optional<std::string> problem = context_parallel_problem(request.model, c.parallel);
      const char* cause = "context parallelism";
      if (!problem) {
        problem = precision_problem(request.device, c.parallel);
        cause = "the device's precision";
      }
      if (!problem) {
        problem = expert_parallel_problem(request.model, c.parallel, request.topology.gpus_per_node);
        cause = "expert parallelism";
      }
      if (problem) {
        ++result.refused;
        ++by_cause[cause];
        refusals.insert(*problem);
        continue;
      }
    }
    Pending p{i, {}, 0.0};
    try {
      p.costs = candidate_costs(request, c);
    } catch (const UsageError& e) {
      refuse_as("the layer split", c, e.what());
      continue;
    }
    // The placement only matters for which stages share a rank: loop for one stage or
    // interleaving, V for the two-chunk zero-bubble family.
    const bool v = c.parallel.chunks == 2 && (c.schedule == "zbv" || c.schedule == "dualpipev" || c.schedule == "zb-auto");
    const std::vector<int> placement = v ? v_placement(c.parallel.pipeline) : loop_placement(c.parallel.pipeline, c.parallel.chunks);
    // Weights and optimizer state alone over the limit: no need to simulate.
    if (largest_static_bytes(p.costs, placement, c.parallel.pipeline) > result.limit_bytes) {
      ++result.dropped_for_memory;
      continue;
    }
    p.lower_bound_s = iteration_time_lower_bound_s(p.costs, placement, c.parallel.pipeline, c.num_micro_batches);
    pending.push_back(std::move(p));
  }
  if (too_large > 0 && too_large == static_cast<int>(candidates.size()))
    throw UsageError(fmt::format("--global-batch {}: no configuration fits in this machine's memory: {}",
                                 request.global_batch, smallest_problem));
  // The compiled schedules are kept for every shape the search meets: all of them together
  // must fit, not only each one.
  std::set<std::tuple<std::string, int, int, int>> shapes;
  ScheduleSize all_shapes;
  for (const Pending& p : pending) {
    const PlanCandidate& c = candidates[p.index];
    if (!shapes.emplace(c.schedule, c.parallel.pipeline, c.num_micro_batches, c.parallel.chunks).second) continue;
    const ScheduleSize size = estimated_size(c.parallel.pipeline, c.parallel.pipeline * c.parallel.chunks, c.num_micro_batches);
    all_shapes.instructions = std::min(kMaxInstructions, all_shapes.instructions + size.instructions);
    all_shapes.pairs = std::min(kMaxInstructions, all_shapes.pairs + size.pairs);
    all_shapes.step_slots = std::min(kMaxInstructions, all_shapes.step_slots + size.step_slots);
  }
  if (auto problem = size_problem(all_shapes))
    throw UsageError(fmt::format("--global-batch {}: the {} schedules the plan would build need, in all, {}",
                                 request.global_batch, shapes.size(), *problem));
  if (request.keep_best > 0)
    std::stable_sort(pending.begin(), pending.end(),
                     [](const Pending& a, const Pending& b) { return a.lower_bound_s < b.lower_bound_s; });

  // The K best simulated times so far (a max-heap: front is the K-th best), one per distinct run:
  // a configuration that runs exactly as one already simulated folds into it (fold_key) and does
  // not count again.
  std::vector<double> best_times;
  RunIndex simulated_runs;
  std::size_t done = total - pending.size();
  for (std::size_t n = 0; n < pending.size(); ++n, ++done) {
    if (progress && (n % 16 == 0)) progress(done, total);
    const Pending& p = pending[n];
    if (request.keep_best > 0 && best_times.size() == request.keep_best && p.lower_bound_s > best_times.front()) {
      result.pruned += static_cast<int>(pending.size() - n);
      break;
    }
    const PlanCandidate& c = candidates[p.index];
    const CostModel& costs = p.costs;
    const int num_stages = c.parallel.pipeline * c.parallel.chunks;
    const ShapeKey key{c.schedule, c.parallel.pipeline, c.num_micro_batches, c.parallel.chunks};
    if (auto refused = refused_shapes.find(key); refused != refused_shapes.end()) {
      refuse(c, refused->second);
      continue;
    }
    const bool cost_dependent = c.schedule == "zb-auto";
    auto it = cost_dependent ? compiled.end() : compiled.find(key);
    std::shared_ptr<const CompiledSchedule> own;
    if (it == compiled.end()) {
      try {
        own = std::make_shared<const CompiledSchedule>(compiled_candidate(request, c, costs));
        if (request.profile) check_profile_fits(*request.profile, *own, request.profile_source);
      } catch (const ScheduleError& e) {
        if (!cost_dependent) refused_shapes.emplace(key, e.what());
        refuse(c, e.what());
        continue;
      } catch (const UsageError& e) {  // the profile cannot describe the schedule
        if (!cost_dependent) refused_shapes.emplace(key, e.what());
        refuse(c, e.what());
        continue;
      }
      if (!cost_dependent) compiled.emplace(key, own);
    } else {
      own = it->second;
    }
    const CompiledSchedule& schedule = *own;
    std::uint64_t signature = 0;
    if (auto known = signatures.find(own.get()); known != signatures.end()) {
      signature = known->second;
    } else {
      signature = program_signature(schedule);
      if (!cost_dependent) signatures.emplace(own.get(), signature);
    }
    if (schedule.num_stages != num_stages) {
      refuse(c, fmt::format("the schedule has {} stages, not {}", schedule.num_stages, num_stages));
      continue;
    }
    // A rank's memory follows its own program, not the timing: what cannot fit is dropped
    // without simulating (a fifth of the default plan's configurations).
    if (walked_peak_memory_bytes(schedule, costs) > result.limit_bytes) {
      ++result.dropped_for_memory;
      continue;
    }
    const Summary summary = request.steady_state
                                ? simulate_steady_state(schedule, costs, candidate_topology(request, c), options)
                                : simulate(schedule, costs, candidate_topology(request, c), options).summary;
    ++result.simulated;
    const std::int64_t peak = summary.max_peak_memory_bytes();
    if (peak > result.limit_bytes) {
      ++result.dropped_for_memory;
      continue;
    }
    PlanRow row;
    row.candidate = c;
    row.iteration_time_s = summary.iteration_time_s;
    row.throughput_samples_per_s = summary.throughput_samples_per_s;
    row.tokens_per_s = summary.throughput_samples_per_s * tokens_per_sample;
    row.mfu = flops_per_sample > 0 ? summary.throughput_samples_per_s * flops_per_sample / cluster_flops_per_s : 0.0;
    row.bubble_fraction = summary.bubble_fraction;
    row.peak_memory_bytes = peak;
    row.program_signature = signature;
    result.rows.push_back(row);
    if (simulated_runs.find_or_add(fold_key(c, signature), row.peak_memory_bytes, row.iteration_time_s, 0)) continue;
    if (request.keep_best > 0) {
      best_times.push_back(row.iteration_time_s);
      std::push_heap(best_times.begin(), best_times.end());
      if (best_times.size() > request.keep_best) {
        std::pop_heap(best_times.begin(), best_times.end());
        best_times.pop_back();
      }
    }
  }
  if (progress) progress(total, total);
  result.refusals.assign(refusals.begin(), refusals.end());
  result.refusals_by_cause = std::move(by_cause);
  // Best first; among equal times the smaller memory, then the order of the request's schedules
  // and recomputations. Rows that are one run fold into the best placed, named by the simplest
  // choice (the request's order) with the others as its equivalents.
  auto order_of = [](const auto& list, const auto& value) {
    return static_cast<std::size_t>(std::find(list.begin(), list.end(), value) - list.begin());
  };
  auto preferred = [&](const PlanCandidate& c) {
    return std::make_pair(order_of(request.schedules, c.schedule),
                          order_of(request.recomputations, c.parallel.recomputation));
  };
  std::stable_sort(result.rows.begin(), result.rows.end(), [&](const PlanRow& a, const PlanRow& b) {
    if (a.throughput_samples_per_s != b.throughput_samples_per_s) return a.throughput_samples_per_s > b.throughput_samples_per_s;
    if (a.peak_memory_bytes != b.peak_memory_bytes) return a.peak_memory_bytes < b.peak_memory_bytes;
    return preferred(a.candidate) < preferred(b.candidate);
  });
  fold_equal_runs(result, preferred);
  return result;
}

}  // namespace pipescope::sim
