// Helpers shared by the built-in generators: the checks that refuse what a schedule cannot
// honour (with the reason), and the small builders every compute order uses.
#pragma once

#include <string>
#include <string_view>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/passes.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/core/size_limits.hpp"

namespace pipescope::generator_support {

inline void refuse(std::string_view schedule, const std::string& why) {
  throw ScheduleError(std::string(schedule) + ": " + why);
}

// --stages and --micro-batches must be positive for every schedule.
inline void check_sizes(std::string_view schedule, const ScheduleParams& params) {
  if (params.num_ranks < 1)
    refuse(schedule, "--stages must be at least 1 (got " + std::to_string(params.num_ranks) + ")");
  if (params.num_micro_batches < 1)
    refuse(schedule, "--micro-batches must be at least 1 (got " +
                         std::to_string(params.num_micro_batches) + ")");
  if (params.chunks < 1)
    refuse(schedule, "--chunks must be at least 1 (got " + std::to_string(params.chunks) + ")");
}

// Refuses, before anything is allocated, sizes whose schedule cannot fit in memory; the
// message names the options and the estimate (size_limits.hpp).
inline void check_fits(std::string_view schedule, const ScheduleParams& params, int stages_per_rank) {
  const std::int64_t stages = saturating_product(params.num_ranks, stages_per_rank);
  std::string what = std::string(schedule) + ": --stages " + std::to_string(params.num_ranks);
  if (stages_per_rank != 1) what += " x --chunks " + std::to_string(stages_per_rank);
  what += " x --micro-batches " + std::to_string(params.num_micro_batches);
  check_schedule_size(what, estimated_size(params.num_ranks, stages, params.num_micro_batches));
}

// Schedules with one stage per rank refuse any other --chunks rather than ignore it.
inline void require_one_chunk(std::string_view schedule, const ScheduleParams& params) {
  check_sizes(schedule, params);
  check_fits(schedule, params, 1);
  if (params.chunks_given && params.chunks != 1)
    refuse(schedule, "places one stage per rank, so --chunks " + std::to_string(params.chunks) +
                         " cannot be honoured (leave --chunks out)");
}

// Schedules in V placement hold exactly two stages per rank.
inline void require_two_chunks(std::string_view schedule, const ScheduleParams& params) {
  check_sizes(schedule, params);
  check_fits(schedule, params, 2);
  if (params.chunks_given && params.chunks != 2)
    refuse(schedule, "needs exactly 2 stages per rank in V placement, so --chunks " +
                         std::to_string(params.chunks) + " cannot be honoured (pass 2 or leave it out)");
}

// Looping schedules default to 2 chunks when --chunks is not given.
inline int loop_chunks(const ScheduleParams& params) { return params.chunks_given ? params.chunks : 2; }

inline ComputeOrder empty_order(std::string_view schedule, int num_ranks, int num_micro_batches,
                                std::vector<int> stage_to_rank) {
  ComputeOrder order;
  order.name = std::string(schedule);
  order.num_ranks = num_ranks;
  order.num_stages = static_cast<int>(stage_to_rank.size());
  order.num_micro_batches = num_micro_batches;
  order.stage_to_rank = std::move(stage_to_rank);
  order.per_rank.resize(static_cast<std::size_t>(num_ranks));
  return order;
}

inline Instruction compute(Op op, int stage, int micro_batch) { return {op, stage, micro_batch}; }

}  // namespace pipescope::generator_support
