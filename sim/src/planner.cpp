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

// The registry's traits of a schedule the request names (cmd_plan checked the names; a name
// the registry lost since is a usage error, not a crash).
const ScheduleTraits& traits_of(const std::string& schedule) {
  const ScheduleTraits* traits = schedule_traits(schedule);
  if (!traits) throw UsageError("--schedules: " + ScheduleRegistry::instance().why_unknown(schedule));
  return *traits;
}

// The chunk counts tried for a schedule: those it runs, or the request's list where it takes any.
std::vector<int> chunk_choices(const PlanRequest& request, const std::string& name) {
  const ScheduleTraits& traits = traits_of(name);
  return traits.chunks.empty() ? request.interleave_chunks : traits.chunks;
}

ScheduleParams schedule_params(const PlanRequest& request, const PlanCandidate& c) {
  ScheduleParams params;
  params.num_ranks = c.parallel.pipeline;
  params.num_micro_batches = c.num_micro_batches;
  params.chunks = c.parallel.chunks;
  params.chunks_given = c.parallel.chunks != 1;
  // The group size goes to the schedules that group micro-batches; the others run as they are.
  if (traits_of(c.schedule).takes_microbatch_group_size) params.microbatch_group_size = request.microbatch_group_size;
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
  if (const auto& layers = request.profile->layers) return static_cast<int>(layers->size());
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

// The candidate's schedule, compiled. A cost-dependent schedule (zb-auto) is searched with the
// candidate's own costs and the memory limit; the others come from the registry and depend on
// their shape only, and those made from a compute order are compiled straight from it.
CompiledSchedule compiled_candidate(const PlanRequest& request, const PlanCandidate& c, const CostModel& costs) {
  if (!traits_of(c.schedule).cost_dependent) {
    if (std::optional<ComputeOrder> order = make_compute_order(c.schedule, schedule_params(request, c)))
      return compile(std::move(*order));
    return compile(make_schedule(c.schedule, schedule_params(request, c)));
  }
  ZbAutoRequest zb;
  zb.params = schedule_params(request, c);
  zb.costs = costs;
  zb.topology = candidate_topology(request, c);
  zb.max_mem_bytes = memory_limit(request);
  return compile(make_cost_dependent_schedule(c.schedule, zb));
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
    per_rank[stage_to_rank[s]] += num_micro_batches * (c.f_s + std::min(c.b_s + c.w_s, c.backward_pass_s())) +
                                  (c.reduce_grads_overlapped() ? 0.0 : c.reduce_grads_s) + c.reduce_tied_s +
                                  c.optimizer_s;
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

namespace {

// A candidate past the cheap checks: its costs, and a lower bound on its iteration time that
// orders the expensive part.
struct PendingCandidate {
  std::size_t index;
  CostModel costs;
  double lower_bound_s;
};

// One run of `plan`: the counts, refusals and caches its phases share. A schedule's shape
// depends on (name, p, m, chunks) only, so each shape is compiled once, unless its traits say
// it depends on the costs.
class PlanSearch {
 public:
  PlanSearch(const PlanRequest& request, const std::function<void(std::size_t, std::size_t)>& progress)
      : request_(request), progress_(progress), candidates_(enumerate_candidates(request)) {
    result_.limit_bytes = memory_limit(request);
    options_.build_trace = false;
    // A profile knows neither the model's FLOPs nor its sequence length: no MFU, no tokens/s.
    flops_per_sample_ = request.profile ? 0.0 : model_flops_per_sample(request.model);
    tokens_per_sample_ = request.profile ? 0.0 : request.model.seq;
    cluster_flops_per_s_ = request.device.peak_flops_per_s * request.num_gpus;
  }

  PlanResult run() {
    const int layoutless = count_layoutless();
    result_.considered = static_cast<int>(candidates_.size()) + layoutless;
    result_.refused = layoutless;
    total_ = static_cast<std::size_t>(result_.considered);
    std::vector<PendingCandidate> pending = screen_all();
    check_all_shapes_fit(pending);
    if (request_.keep_best > 0)
      std::stable_sort(pending.begin(), pending.end(), [](const PendingCandidate& a, const PendingCandidate& b) {
        return a.lower_bound_s < b.lower_bound_s;
      });
    simulate_all(pending);
    if (progress_) progress_(total_, total_);
    result_.refusals.assign(refusals_.begin(), refusals_.end());
    result_.refusals_by_cause = std::move(by_cause_);
    rank_rows();
    return std::move(result_);
  }

 private:
  using ShapeKey = std::tuple<std::string, int, int, int>;

  void refuse_as(const char* cause, const PlanCandidate& c, const std::string& why) {
    ++result_.refused;
    ++by_cause_[cause];
    refusals_.insert(fmt::format("{} (pipeline {}, chunks {}, {} micro-batches): {}", c.schedule, c.parallel.pipeline,
                                 c.parallel.chunks, c.num_micro_batches, why));
  }
  void refuse(const PlanCandidate& c, const std::string& why) { refuse_as("the schedule", c, why); }
  // A refusal whose line names the option itself (tensor, context or expert parallelism, ...).
  void refuse_with_line(const char* cause, const std::string& line) {
    ++result_.refused;
    ++by_cause_[cause];
    refusals_.insert(line);
  }

  // A tensor-parallel size that does not divide the GPUs has no layout at all: it is one
  // configuration considered and refused.
  int count_layoutless() {
    int layoutless = 0;
    for (int tp : request_.tensor_parallel_sizes) {
      for (int cp : request_.context_parallel_sizes) {
        if (tp >= 1 && cp >= 1 && request_.num_gpus % (static_cast<std::int64_t>(tp) * cp) == 0) continue;
        ++layoutless;
        refuse_with_line("the GPU count",
                         cp == 1 ? fmt::format("tensor parallel {}: does not divide the {} GPUs (tp x pp x dp = GPUs)",
                                               tp, request_.num_gpus)
                                 : fmt::format("tensor parallel {} x context parallel {}: does not divide the {} GPUs "
                                               "(tp x cp x pp x dp = GPUs)",
                                               tp, cp, request_.num_gpus));
      }
    }
    return layoutless;
  }

  // Why the model, the node or the device cannot take the candidate's parallelism, with what
  // refused it; nothing with a profile (it measured its own layout).
  std::optional<std::pair<const char*, std::string>> parallelism_problem(const PlanCandidate& c) const {
    if (request_.profile) return std::nullopt;
    if (auto problem = tensor_parallel_problem(request_.model, c.parallel, request_.topology.gpus_per_node))
      return std::make_pair("tensor parallelism", *problem);
    if (auto problem = context_parallel_problem(request_.model, c.parallel))
      return std::make_pair("context parallelism", *problem);
    if (auto problem = precision_problem(request_.device, c.parallel))
      return std::make_pair("the device's precision", *problem);
    if (auto problem = expert_parallel_problem(request_.model, c.parallel, request_.topology.gpus_per_node))
      return std::make_pair("expert parallelism", *problem);
    return std::nullopt;
  }

  // Costs, the static-memory check and the lower bound of candidate i: cheap, and they decide the
  // order of the expensive part. Nothing when it is refused or dropped.
  std::optional<PendingCandidate> screen(std::size_t i) {
    const PlanCandidate& c = candidates_[i];
    if (auto problem = parallelism_problem(c)) {
      refuse_with_line(problem->first, problem->second);
      return std::nullopt;
    }
    PendingCandidate p{i, {}, 0.0};
    try {
      p.costs = candidate_costs(request_, c);
    } catch (const UsageError& e) {
      refuse_as("the layer split", c, e.what());
      return std::nullopt;
    }
    // The placement only matters for which stages share a rank: loop for one stage or
    // interleaving, V for the two-chunk schedules whose trait says so.
    const bool v = c.parallel.chunks == 2 && traits_of(c.schedule).placement == StagePlacement::v;
    const std::vector<int> placement =
        v ? v_placement(c.parallel.pipeline) : loop_placement(c.parallel.pipeline, c.parallel.chunks);
    // Weights and optimizer state alone over the limit: no need to simulate.
    if (largest_static_bytes(p.costs, placement, c.parallel.pipeline) > result_.limit_bytes) {
      ++result_.dropped_for_memory;
      return std::nullopt;
    }
    p.lower_bound_s = iteration_time_lower_bound_s(p.costs, placement, c.parallel.pipeline, c.num_micro_batches);
    return p;
  }

  // Every candidate screened. Schedules too large for this machine are refused before one is
  // built; when none fits, the option that asked for them is named.
  std::vector<PendingCandidate> screen_all() {
    std::vector<PendingCandidate> pending;
    pending.reserve(candidates_.size());
    int too_large = 0;
    std::int64_t smallest_instructions = std::numeric_limits<std::int64_t>::max();
    std::string smallest_problem;
    for (std::size_t i = 0; i < candidates_.size(); ++i) {
      const PlanCandidate& c = candidates_[i];
      const ScheduleSize size =
          estimated_size(c.parallel.pipeline, c.parallel.pipeline * c.parallel.chunks, c.num_micro_batches);
      if (auto problem = size_problem(size)) {
        ++too_large;
        refuse_as("this machine's memory", c, *problem);
        if (size.instructions < smallest_instructions) {
          smallest_instructions = size.instructions;
          smallest_problem = fmt::format("the smallest, {} on pipeline {} with {} micro-batches, needs {}", c.schedule,
                                         c.parallel.pipeline, c.num_micro_batches, *problem);
        }
        continue;
      }
      if (std::optional<PendingCandidate> p = screen(i)) pending.push_back(std::move(*p));
    }
    if (too_large > 0 && too_large == static_cast<int>(candidates_.size()))
      throw UsageError(fmt::format("--global-batch {}: no configuration fits in this machine's memory: {}",
                                   request_.global_batch, smallest_problem));
    return pending;
  }

  // The compiled schedules are kept for every shape the search meets: all of them together
  // must fit, not only each one.
  void check_all_shapes_fit(const std::vector<PendingCandidate>& pending) const {
    std::set<ShapeKey> shapes;
    ScheduleSize all_shapes;
    for (const PendingCandidate& p : pending) {
      const PlanCandidate& c = candidates_[p.index];
      if (!shapes.emplace(c.schedule, c.parallel.pipeline, c.num_micro_batches, c.parallel.chunks).second) continue;
      const ScheduleSize size =
          estimated_size(c.parallel.pipeline, c.parallel.pipeline * c.parallel.chunks, c.num_micro_batches);
      all_shapes.instructions = std::min(kMaxInstructions, all_shapes.instructions + size.instructions);
      all_shapes.pairs = std::min(kMaxInstructions, all_shapes.pairs + size.pairs);
      all_shapes.step_slots = std::min(kMaxInstructions, all_shapes.step_slots + size.step_slots);
    }
    if (auto problem = size_problem(all_shapes))
      throw UsageError(fmt::format("--global-batch {}: the {} schedules the plan would build need, in all, {}",
                                   request_.global_batch, shapes.size(), *problem));
  }

  // The candidate's compiled schedule, from the cache where its shape was compiled before;
  // nothing when the schedule (or the profile) refuses it.
  std::shared_ptr<const CompiledSchedule> compiled_for(const PlanCandidate& c, const CostModel& costs) {
    const ShapeKey key{c.schedule, c.parallel.pipeline, c.num_micro_batches, c.parallel.chunks};
    if (auto refused = refused_shapes_.find(key); refused != refused_shapes_.end()) {
      refuse(c, refused->second);
      return nullptr;
    }
    const bool cost_dependent = traits_of(c.schedule).cost_dependent;
    if (!cost_dependent)
      if (auto it = compiled_.find(key); it != compiled_.end()) return it->second;
    std::shared_ptr<const CompiledSchedule> own;
    try {
      own = std::make_shared<const CompiledSchedule>(compiled_candidate(request_, c, costs));
      if (request_.profile) check_profile_fits(*request_.profile, *own, request_.profile_source);
    } catch (const ScheduleError& e) {
      if (!cost_dependent) refused_shapes_.emplace(key, e.what());
      refuse(c, e.what());
      return nullptr;
    } catch (const UsageError& e) {  // the profile cannot describe the schedule
      if (!cost_dependent) refused_shapes_.emplace(key, e.what());
      refuse(c, e.what());
      return nullptr;
    }
    if (!cost_dependent) compiled_.emplace(key, own);
    return own;
  }

  std::uint64_t signature_of(const std::shared_ptr<const CompiledSchedule>& schedule, bool cost_dependent) {
    if (auto known = signatures_.find(schedule.get()); known != signatures_.end()) return known->second;
    const std::uint64_t signature = program_signature(*schedule);
    if (!cost_dependent) signatures_.emplace(schedule.get(), signature);
    return signature;
  }

  // Simulates one pending candidate; its row, or nothing when it is refused or does not fit.
  std::optional<PlanRow> simulate_one(const PendingCandidate& p) {
    const PlanCandidate& c = candidates_[p.index];
    const CostModel& costs = p.costs;
    const int num_stages = c.parallel.pipeline * c.parallel.chunks;
    const std::shared_ptr<const CompiledSchedule> own = compiled_for(c, costs);
    if (!own) return std::nullopt;
    const CompiledSchedule& schedule = *own;
    const std::uint64_t signature = signature_of(own, traits_of(c.schedule).cost_dependent);
    if (schedule.num_stages != num_stages) {
      refuse(c, fmt::format("the schedule has {} stages, not {}", schedule.num_stages, num_stages));
      return std::nullopt;
    }
    // A rank's memory follows its own program, not the timing: what cannot fit is dropped
    // without simulating (a fifth of the default plan's configurations).
    if (walked_peak_memory_bytes(schedule, costs) > result_.limit_bytes) {
      ++result_.dropped_for_memory;
      return std::nullopt;
    }
    const Summary summary = request_.steady_state
                                ? simulate_steady_state(schedule, costs, candidate_topology(request_, c), options_)
                                : simulate(schedule, costs, candidate_topology(request_, c), options_).summary;
    ++result_.simulated;
    const std::int64_t peak = summary.max_peak_memory_bytes();
    if (peak > result_.limit_bytes) {
      ++result_.dropped_for_memory;
      return std::nullopt;
    }
    PlanRow row;
    row.candidate = c;
    row.iteration_time_s = summary.iteration_time_s;
    row.throughput_samples_per_s = summary.throughput_samples_per_s;
    row.tokens_per_s = summary.throughput_samples_per_s * tokens_per_sample_;
    row.mfu = flops_per_sample_ > 0 ? summary.throughput_samples_per_s * flops_per_sample_ / cluster_flops_per_s_ : 0.0;
    row.bubble_fraction = summary.bubble_fraction;
    row.peak_memory_bytes = peak;
    row.program_signature = signature;
    return row;
  }

  // The K best simulated times so far (a max-heap: front is the K-th best), one per distinct run:
  // a configuration that runs exactly as one already simulated folds into it (fold_key) and does
  // not count again.
  void simulate_all(const std::vector<PendingCandidate>& pending) {
    std::vector<double> best_times;
    RunIndex simulated_runs;
    std::size_t done = total_ - pending.size();
    for (std::size_t n = 0; n < pending.size(); ++n, ++done) {
      if (progress_ && (n % 16 == 0)) progress_(done, total_);
      const PendingCandidate& p = pending[n];
      if (request_.keep_best > 0 && best_times.size() == request_.keep_best && p.lower_bound_s > best_times.front()) {
        result_.pruned += static_cast<int>(pending.size() - n);
        break;
      }
      std::optional<PlanRow> row = simulate_one(p);
      if (!row) continue;
      result_.rows.push_back(*row);
      if (simulated_runs.find_or_add(fold_key(row->candidate, row->program_signature), row->peak_memory_bytes,
                                     row->iteration_time_s, 0))
        continue;
      if (request_.keep_best > 0) {
        best_times.push_back(row->iteration_time_s);
        std::push_heap(best_times.begin(), best_times.end());
        if (best_times.size() > request_.keep_best) {
          std::pop_heap(best_times.begin(), best_times.end());
          best_times.pop_back();
        }
      }
    }
  }

  // Best first; among equal times the smaller memory, then the order of the request's schedules
  // and recomputations. Rows that are one run fold into the best placed, named by the simplest
  // choice (the request's order) with the others as its equivalents.
  void rank_rows() {
    auto order_of = [](const auto& list, const auto& value) {
      return static_cast<std::size_t>(std::find(list.begin(), list.end(), value) - list.begin());
    };
    const PlanRequest& request = request_;
    auto preferred = [&](const PlanCandidate& c) {
      return std::make_pair(order_of(request.schedules, c.schedule),
                            order_of(request.recomputations, c.parallel.recomputation));
    };
    std::stable_sort(result_.rows.begin(), result_.rows.end(), [&](const PlanRow& a, const PlanRow& b) {
      if (a.throughput_samples_per_s != b.throughput_samples_per_s)
        return a.throughput_samples_per_s > b.throughput_samples_per_s;
      if (a.peak_memory_bytes != b.peak_memory_bytes) return a.peak_memory_bytes < b.peak_memory_bytes;
      return preferred(a.candidate) < preferred(b.candidate);
    });
    fold_equal_runs(result_, preferred);
  }

  const PlanRequest& request_;
  const std::function<void(std::size_t, std::size_t)>& progress_;
  const std::vector<PlanCandidate> candidates_;
  PlanResult result_;
  std::size_t total_ = 0;
  double flops_per_sample_ = 0, tokens_per_sample_ = 0, cluster_flops_per_s_ = 0;
  SimOptions options_;
  std::set<std::string> refusals_;
  std::map<std::string, int> by_cause_;
  std::map<ShapeKey, std::shared_ptr<const CompiledSchedule>> compiled_;
  std::map<ShapeKey, std::string> refused_shapes_;
  std::map<const CompiledSchedule*, std::uint64_t> signatures_;
};

}  // namespace

PlanResult plan(const PlanRequest& request, const std::function<void(std::size_t, std::size_t)>& progress) {
  return PlanSearch(request, progress).run();
}

}  // namespace pipescope::sim
