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

#include "planner_candidate.hpp"

namespace pipescope::sim {
namespace {

using planning::candidate_costs;
using planning::candidate_topology;
using planning::compiled_candidate;
using planning::largest_static_bytes;
using planning::memory_limit;
using planning::traits_of;

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
      return Preference(order_of(request.schedules, c.schedule),
                        order_of(request.recomputations, c.parallel.recomputation),
                        order_of(request.recompute_module_sets, c.parallel.recompute_modules));
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
