// The built-in schedule generators of SPEC.md section 2 (all but zb-auto, which needs the
// simulator's costs and is registered by sim/). Each returns a full Schedule; most build a
// compute-only ComputeOrder and lower it (passes.hpp); the DeepSpeed ones are step-exact.
#pragma once

#include "pipescope/core/passes.hpp"
#include "pipescope/core/registry.hpp"

namespace pipescope {

ComputeOrder gpipe_order(const ScheduleParams& params);
ComputeOrder one_f_one_b_order(const ScheduleParams& params);
ComputeOrder interleaved_1f1b_order(const ScheduleParams& params);
ComputeOrder looped_bfs_order(const ScheduleParams& params);
ComputeOrder zb_h1_order(const ScheduleParams& params);
ComputeOrder zb_h2_order(const ScheduleParams& params);
ComputeOrder zbv_order(const ScheduleParams& params);
ComputeOrder dualpipev_order(const ScheduleParams& params);

// Step-exact reproductions of DeepSpeed's schedule.py.
Schedule deepspeed_train_schedule(const ScheduleParams& params);
Schedule deepspeed_inference_schedule(const ScheduleParams& params);
Schedule data_parallel_schedule(const ScheduleParams& params);

// Adds every generator above to `registry` under its SPEC.md name.
void register_builtin_generators(ScheduleRegistry& registry);

}  // namespace pipescope
