// Whether the model pprun is asked to train can be held at all on this machine, checked before
// any tensor is allocated: a size beyond it is a typing slip, refused naming the size options,
// not an allocator failure deep in a worker.
#pragma once

#include <cstdint>

#include "pprun/run_plan.hpp"

namespace pipescope::exec {

// Bytes pprun keeps per trained parameter on the CPU: fp32 weights and gradients and AdamW's two
// fp32 moments.
inline constexpr double kStateBytesPerParameter = 16;

// The state (weights, gradients, AdamW moments) the processes on this machine hold together:
// --dp replicas of the model, each with its E-th of the experts, times the share of the world
// started here (all of it when pprun launches the workers; one rank under torchrun).
double machine_state_bytes(const RunPlan& plan);

// Throws UsageError, naming the size options given, where machine_state_bytes(plan) passes
// `memory_bytes` (the machine's physical memory; only for --device cpu, a GPU has its own).
void check_model_fits_machine(const RunPlan& plan, double memory_bytes);

// This machine's physical memory in bytes.
double physical_memory_bytes();

}  // namespace pipescope::exec
