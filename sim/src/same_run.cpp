// Which planner rows are one run (same_run.hpp), and folding them.
#include "same_run.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace pipescope::sim {

std::string fold_key(const PlanCandidate& c, std::uint64_t program) {
  const ParallelConfig& p = c.parallel;
  return fmt::format("{}/{}/{}/{}{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{:x}", p.tensor_parallel, p.sequence_parallel,
                     p.context_parallel, context_parallel_comm_name(p.context_parallel_comm),
                     p.context_parallel_all_to_all(), p.expert_parallel, p.expert_tp(), p.pipeline, p.data_parallel,
                     p.chunks, p.micro_batch_size, c.num_micro_batches, fp8_format_name(p.fp8), p.layout.describe(),
                     program);
}

namespace {

// How `other` differs from `kept`: the schedule and/or the recomputation it names.
std::string choice_difference(const PlanCandidate& kept, const PlanCandidate& other) {
  std::string text;
  if (other.schedule != kept.schedule) text = other.schedule;
  const Recomputation recomputation = other.parallel.recomputation;
  const bool other_modules =
      recomputation == Recomputation::selective && other.parallel.recompute_modules != kept.parallel.recompute_modules;
  if (recomputation != kept.parallel.recomputation || other_modules)
    text += (text.empty() ? "" : " with ") + std::string("recompute ") +
            std::string(recomputation_name(recomputation)) +
            (recomputation == Recomputation::selective && other.parallel.recompute_modules != kRecomputeCoreAttention
                 ? " (" + recompute_modules_text(other.parallel.recompute_modules) + ")"
                 : std::string());
  return text;
}

}  // namespace

bool same_time(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)); }

std::optional<std::size_t> RunIndex::find_or_add(const std::string& key, std::int64_t memory, double time_s,
                                                 std::size_t position) {
  auto& runs = runs_[{key, memory}];
  for (const auto& [t, at] : runs)
    if (same_time(t, time_s)) return at;
  runs.emplace_back(time_s, position);
  return std::nullopt;
}

void fold_equal_runs(PlanResult& result, const std::function<Preference(const PlanCandidate&)>& preferred) {
  RunIndex kept_at;
  std::vector<std::vector<std::size_t>> groups;  // by kept row: the rows of result.rows folded there
  for (std::size_t i = 0; i < result.rows.size(); ++i) {
    const PlanRow& row = result.rows[i];
    const std::optional<std::size_t> kept_index = kept_at.find_or_add(
        fold_key(row.candidate, row.program_signature), row.peak_memory_bytes, row.iteration_time_s, groups.size());
    if (kept_index) {
      groups[*kept_index].push_back(i);
      ++result.folded;
    } else {
      groups.push_back({i});
    }
  }
  std::vector<PlanRow> rows;
  rows.reserve(groups.size());
  for (std::vector<std::size_t>& group : groups) {
    PlanRow kept = result.rows[group.front()];
    std::stable_sort(group.begin(), group.end(), [&](std::size_t a, std::size_t b) {
      return preferred(result.rows[a].candidate) < preferred(result.rows[b].candidate);
    });
    kept.candidate = result.rows[group.front()].candidate;
    for (std::size_t k = 1; k < group.size(); ++k) {
      const std::string what = choice_difference(kept.candidate, result.rows[group[k]].candidate);
      if (!what.empty() && std::find(kept.equivalents.begin(), kept.equivalents.end(), what) == kept.equivalents.end())
        kept.equivalents.push_back(what);
    }
    rows.push_back(std::move(kept));
  }
  result.rows = std::move(rows);
}

std::uint64_t program_signature(const CompiledSchedule& schedule) {
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](std::uint64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (value >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  };
  for (std::int32_t rank = 0; rank < schedule.num_ranks; ++rank) {
    mix(0xffffffffull + static_cast<std::uint64_t>(rank));
    const std::int32_t end = schedule.rank_begin[rank + 1];
    for (std::int32_t pc = schedule.rank_begin[rank]; pc < end; ++pc) {
      const CompiledInstruction& ci = schedule.instructions[pc];
      // Where a weight gradient runs shows in the time and the memory, which fold compares too.
      if (ci.op == Op::BackwardWeight) continue;
      const Op op = ci.op == Op::BackwardInput ? Op::BackwardPass : ci.op;
      if (op != Op::ForwardPass && op != Op::BackwardPass) continue;
      mix(static_cast<std::uint64_t>(op));
      mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(ci.stage)));
      mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(ci.micro_batch)));
    }
  }
  return hash;
}

}  // namespace pipescope::sim
