#include "pipescope/sim/planner.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/sim/zb_auto.hpp"

namespace pipescope::sim {
namespace {

std::vector<int> chunk_choices(const PlanRequest& request, const std::string& schedule) {
  if (schedule == "interleaved-1f1b" || schedule == "looped-bfs") return request.interleave_chunks;
  if (schedule == "zbv" || schedule == "dualpipev") return {2};
  if (schedule == "zb-auto") return {1, 2};
  return {1};
}

ScheduleParams schedule_params(const PlanCandidate& c) {
  ScheduleParams params;
  params.num_ranks = c.parallel.pipeline;
  params.num_micro_batches = c.num_micro_batches;
  params.chunks = c.parallel.chunks;
  params.chunks_given = c.parallel.chunks != 1;
  return params;
}

Topology candidate_topology(const PlanRequest& request, const PlanCandidate& c) {
  return with_parallel_layout(request.topology, c.parallel);
}

std::int64_t largest_static_bytes(const CostModel& costs, const std::vector<int>& placement, int num_ranks) {
  std::vector<std::int64_t> per_rank(static_cast<std::size_t>(num_ranks), 0);
  for (std::size_t s = 0; s < placement.size(); ++s) per_rank[placement[s]] += costs.stages[s].static_bytes;
  return *std::max_element(per_rank.begin(), per_rank.end());
}

std::int64_t memory_limit(const PlanRequest& request) {
  return request.max_mem_bytes > 0 ? request.max_mem_bytes : request.device.memory_bytes;
}

// zb-auto is searched with the candidate's own costs and the memory limit; the others come
// from the registry and depend on their shape only.
Schedule build_schedule(const PlanRequest& request, const PlanCandidate& c, const CostModel& costs) {
  if (c.schedule != "zb-auto") return make_schedule(c.schedule, schedule_params(c));
  ZbAutoRequest zb;
  zb.params = schedule_params(c);
  zb.costs = costs;
  zb.topology = candidate_topology(request, c);
  zb.max_mem_bytes = memory_limit(request);
  return zb_auto_schedule(zb);
}

}  // namespace

double iteration_time_lower_bound_s(const CostModel& costs, const std::vector<int>& stage_to_rank, int num_ranks,
                                    int num_micro_batches) {
  std::vector<double> per_rank(static_cast<std::size_t>(num_ranks), 0.0);
  for (std::size_t s = 0; s < stage_to_rank.size(); ++s) {
    const StageCost& c = costs.stage(static_cast<int>(s));
    per_rank[stage_to_rank[s]] +=
        num_micro_batches * (c.f_s + c.b_s + c.w_s) + c.reduce_grads_s + c.reduce_tied_s + c.optimizer_s;
  }
  // A hair below: the simulation adds the same costs one by one and may round lower.
  return *std::max_element(per_rank.begin(), per_rank.end()) * (1 - 1e-9);
}

double model_flops_per_sample(const ModelSpec& model) {
  const LayerFigures layer = layer_figures(model, 1);
  const double head = 2.0 * model.seq * model.hidden * static_cast<double>(model.vocab);
  return model.layers * (layer.f_flops + layer.b_flops + layer.w_flops) + 3.0 * head;
}

std::vector<PlanCandidate> enumerate_candidates(const PlanRequest& request) {
  if (request.num_gpus < 1) throw UsageError("--gpus must be at least 1");
  if (request.global_batch < 1) throw UsageError("--global-batch must be at least 1");
  std::vector<PlanCandidate> out;
  const int max_pipeline = request.max_pipeline > 0 ? request.max_pipeline : request.model.layers;
  for (int pp = 1; pp <= std::min(request.num_gpus, max_pipeline); ++pp) {
    if (request.num_gpus % pp != 0) continue;
    const int dp = request.num_gpus / pp;
    for (int mbs : request.micro_batch_sizes) {
      if (mbs < 1 || request.global_batch % (dp * mbs) != 0) continue;
      const int m = request.global_batch / (dp * mbs);
      for (const std::string& schedule : request.schedules) {
        for (int chunks : chunk_choices(request, schedule)) {
          if (pp * chunks > request.model.layers) continue;
          for (bool recompute : request.recompute_options) {
            PlanCandidate c;
            c.schedule = schedule;
            c.parallel.pipeline = pp;
            c.parallel.chunks = chunks;
            c.parallel.data_parallel = dp;
            c.parallel.micro_batch_size = mbs;
            c.parallel.recompute = recompute;
            c.parallel.zero1 = request.zero1 && dp > 1;
            c.num_micro_batches = m;
            out.push_back(c);
          }
        }
      }
    }
  }
  return out;
}

SimResult simulate_candidate(const PlanRequest& request, const PlanCandidate& candidate, bool build_trace) {
  const CostModel costs = derive_costs(request.model, request.device, request.topology, candidate.parallel);
  const Schedule schedule = build_schedule(request, candidate, costs);
  SimOptions options;
  options.build_trace = build_trace;
  return simulate(schedule, costs, candidate_topology(request, candidate), options);
}

PlanResult plan(const PlanRequest& request, const std::function<void(std::size_t, std::size_t)>& progress) {
  PlanResult result;
  result.limit_bytes = memory_limit(request);
  const std::vector<PlanCandidate> candidates = enumerate_candidates(request);
  result.considered = static_cast<int>(candidates.size());
  const double flops_per_sample = model_flops_per_sample(request.model);
  const double cluster_flops_per_s = request.device.peak_flops_per_s * request.num_gpus;

  // A schedule's shape depends on (name, p, m, chunks) only: compile it once.
  using ShapeKey = std::tuple<std::string, int, int, int>;
  std::map<ShapeKey, std::shared_ptr<const CompiledSchedule>> compiled;
  std::map<ShapeKey, std::string> refused_shapes;
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
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const PlanCandidate& c = candidates[i];
    Pending p{i, {}, 0.0};
    try {
      p.costs = derive_costs(request.model, request.device, request.topology, c.parallel);
    } catch (const UsageError&) {
      ++result.refused;
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
  if (request.keep_best > 0)
    std::stable_sort(pending.begin(), pending.end(),
                     [](const Pending& a, const Pending& b) { return a.lower_bound_s < b.lower_bound_s; });

  // The K best simulated times so far (a max-heap: front is the K-th best).
  std::vector<double> best_times;
  std::size_t done = candidates.size() - pending.size();
  for (std::size_t n = 0; n < pending.size(); ++n, ++done) {
    if (progress && (n % 16 == 0)) progress(done, candidates.size());
    const Pending& p = pending[n];
    if (request.keep_best > 0 && best_times.size() == request.keep_best && p.lower_bound_s > best_times.front()) {
      result.pruned += static_cast<int>(pending.size() - n);
      break;
    }
    const PlanCandidate& c = candidates[p.index];
    const CostModel& costs = p.costs;
    const int num_stages = c.parallel.pipeline * c.parallel.chunks;
    const ShapeKey key{c.schedule, c.parallel.pipeline, c.num_micro_batches, c.parallel.chunks};
    if (refused_shapes.count(key)) {
      ++result.refused;
      continue;
    }
    const bool cost_dependent = c.schedule == "zb-auto";
    auto it = cost_dependent ? compiled.end() : compiled.find(key);
    std::shared_ptr<const CompiledSchedule> own;
    if (it == compiled.end()) {
      try {
        own = std::make_shared<const CompiledSchedule>(compile(build_schedule(request, c, costs)));
      } catch (const ScheduleError& e) {
        if (!cost_dependent) refused_shapes.emplace(key, e.what());
        ++result.refused;
        continue;
      }
      if (!cost_dependent) compiled.emplace(key, own);
    } else {
      own = it->second;
    }
    const CompiledSchedule& schedule = *own;
    if (schedule.num_stages != num_stages) {
      ++result.refused;
      continue;
    }
    const Summary summary = simulate(schedule, costs, candidate_topology(request, c), options).summary;
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
    row.tokens_per_s = summary.throughput_samples_per_s * request.model.seq;
    row.mfu = summary.throughput_samples_per_s * flops_per_sample / cluster_flops_per_s;
    row.bubble_fraction = summary.bubble_fraction;
    row.peak_memory_bytes = peak;
    result.rows.push_back(row);
    if (request.keep_best > 0) {
      best_times.push_back(row.iteration_time_s);
      std::push_heap(best_times.begin(), best_times.end());
      if (best_times.size() > request.keep_best) {
        std::pop_heap(best_times.begin(), best_times.end());
        best_times.pop_back();
      }
    }
  }
  if (progress) progress(candidates.size(), candidates.size());
  std::stable_sort(result.rows.begin(), result.rows.end(), [](const PlanRow& a, const PlanRow& b) {
    if (a.throughput_samples_per_s != b.throughput_samples_per_s) return a.throughput_samples_per_s > b.throughput_samples_per_s;
    return a.peak_memory_bytes < b.peak_memory_bytes;
  });
  return result;
}

}  // namespace pipescope::sim
