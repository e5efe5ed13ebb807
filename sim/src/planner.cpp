#include "pipescope/sim/planner.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"

namespace pipescope::sim {
namespace {

std::vector<int> chunk_choices(const PlanRequest& request, const std::string& schedule) {
  if (schedule == "interleaved-1f1b" || schedule == "looped-bfs") return request.interleave_chunks;
  if (schedule == "zbv" || schedule == "dualpipev") return {2};
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

}  // namespace

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
  const Schedule schedule = make_schedule(candidate.schedule, schedule_params(candidate));
  const CostModel costs = derive_costs(request.model, request.device, request.topology, candidate.parallel);
  SimOptions options;
  options.build_trace = build_trace;
  return simulate(schedule, costs, candidate_topology(request, candidate), options);
}

PlanResult plan(const PlanRequest& request, const std::function<void(std::size_t, std::size_t)>& progress) {
  PlanResult result;
  result.limit_bytes = request.max_mem_bytes > 0 ? request.max_mem_bytes : request.device.memory_bytes;
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

  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (progress && (i % 16 == 0)) progress(i, candidates.size());
    const PlanCandidate& c = candidates[i];
    CostModel costs;
    try {
      costs = derive_costs(request.model, request.device, request.topology, c.parallel);
    } catch (const UsageError&) {
      ++result.refused;
      continue;
    }
    const int num_stages = c.parallel.pipeline * c.parallel.chunks;
    const ShapeKey key{c.schedule, c.parallel.pipeline, c.num_micro_batches, c.parallel.chunks};
    if (refused_shapes.count(key)) {
      ++result.refused;
      continue;
    }
    auto it = compiled.find(key);
    if (it == compiled.end()) {
      try {
        auto schedule = std::make_shared<const CompiledSchedule>(compile(make_schedule(c.schedule, schedule_params(c))));
        it = compiled.emplace(key, std::move(schedule)).first;
      } catch (const ScheduleError& e) {
        refused_shapes.emplace(key, e.what());
        ++result.refused;
        continue;
      }
    }
    const CompiledSchedule& schedule = *it->second;
    if (schedule.num_stages != num_stages) {
      ++result.refused;
      continue;
    }
    // Weights and optimizer state alone over the limit: no need to simulate.
    if (largest_static_bytes(costs, schedule.stage_to_rank, schedule.num_ranks) > result.limit_bytes) {
      ++result.dropped_for_memory;
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
  }
  if (progress) progress(candidates.size(), candidates.size());
  std::stable_sort(result.rows.begin(), result.rows.end(), [](const PlanRow& a, const PlanRow& b) {
    if (a.throughput_samples_per_s != b.throughput_samples_per_s) return a.throughput_samples_per_s > b.throughput_samples_per_s;
    return a.peak_memory_bytes < b.peak_memory_bytes;
  });
  return result;
}

}  // namespace pipescope::sim
