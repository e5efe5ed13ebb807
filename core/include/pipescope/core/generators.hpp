// The built-in schedule generators of SPEC.md section 2 (all but zb-auto, which needs the
// simulator's costs and is registered by sim/). Each returns a full Schedule; most build a
// compute-only ComputeOrder and lower it (passes.hpp); the DeepSpeed ones are step-exact.
#pragma once

#include "pipescope/core/passes.hpp"
#include "pipescope/core/registry.hpp"

namespace pipescope {

// Compute orders (lower them with `lower`). Each throws ScheduleError starting with the
// schedule's name and giving the reason when it cannot honour `params`.
ComputeOrder gpipe_order(const ScheduleParams& params);        // 1 stage per rank
// Megatron-Core's 1F1B: warm-up min(p - r - 1, m) on rank r, so m < p runs too.
ComputeOrder one_f_one_b_order(const ScheduleParams& params);
// The megatron-core releases whose interleaved 1F1B orders differ, each named by the first
// release that has it (tests/golden/megatron/README.md): 0.1.0 .. 0.9.x (group size p, m a
// multiple of p, every forward first when m == p: the Megatron-LM of 2021 too) and 0.10.0 ..
// 0.19.2 (`microbatch_group_size_per_vp_stage` G in [p, m], m % G = 0 or >= p).
enum class MegatronRelease { v0_1, v0_10 };
inline constexpr MegatronRelease kCurrentMegatronRelease = MegatronRelease::v0_10;
// Megatron's interleaved 1F1B as `release` runs it, loop placement, --chunks V >= 2 (2 when
// not given), params.microbatch_group_size (0: p); refuses what that release refuses, with its
// reason. `name` is what the schedule is called (and what its refusals start with).
ComputeOrder megatron_interleaved_order(const ScheduleParams& params, MegatronRelease release, const std::string& name);
// The current release's, as `interleaved-1f1b`.
ComputeOrder interleaved_1f1b_order(const ScheduleParams& params);
// torch ScheduleLoopedBFS, loop placement, --chunks V (2 when not given).
ComputeOrder looped_bfs_order(const ScheduleParams& params);
// Zero Bubble H1 / H2 (split backward), built by a unit-time list schedule: rank r holds at
// most p - r (H1) or 2(p - r) - 1 (H2) micro-batches of activations; H1 also holds at most p
// micro-batches from F to W, so its peak stays 1F1B's (rank 0's p micro-batches).
ComputeOrder zb_h1_order(const ScheduleParams& params);
ComputeOrder zb_h2_order(const ScheduleParams& params);
// V placement (rank r holds stages r and 2p-1-r); refuse --chunks other than 2.
ComputeOrder zbv_order(const ScheduleParams& params);
ComputeOrder dualpipev_order(const ScheduleParams& params);    // refuses m < 2p

// Step-exact reproductions of DeepSpeed's schedule.py: same steps, same instructions in the
// same order, same buffer ids; micro_batch names what the buffer holds. Among the releases
// 0.5.0 .. 0.19.8 the streams changed once, in 0.8.3 (tests/golden/deepspeed/README.md):
// TrainSchedule swapped the two transfers of a step and keeps one buffer fewer on most
// stages. InferenceSchedule's streams are the same in all of them. Each behaviour is named
// by the first release that has it (reference 002 is 0.5's).
enum class DeepSpeedRelease { v0_5, v0_8_3 };
inline constexpr DeepSpeedRelease kCurrentDeepSpeedRelease = DeepSpeedRelease::v0_8_3;

// TrainSchedule.num_pipe_buffers for stage `stage` of `stages`: max(2, min(p - s + 1, m)) in
// 0.5, max(2, min(p - s, m)) from 0.8.3. Buffer ids are micro_batch % this.
int deepspeed_train_buffers(DeepSpeedRelease release, int stages, int stage, int micro_batches);
// `name` is what the schedule is called (and what its refusals start with).
Schedule deepspeed_train_schedule(const ScheduleParams& params, DeepSpeedRelease release = kCurrentDeepSpeedRelease,
                                  const std::string& name = "deepspeed-train");
Schedule deepspeed_inference_schedule(const ScheduleParams& params, const std::string& name = "deepspeed-inference");
Schedule data_parallel_schedule(const ScheduleParams& params);  // --stages 1 only

// Adds every generator above to `registry` under its SPEC.md name.
void register_builtin_generators(ScheduleRegistry& registry);

}  // namespace pipescope
