// Lowering passes: from a generator's compute-only per-rank order to a full Schedule.
// Each pass is a separate, separately tested function; `lower` runs the usual sequence.
#pragma once

#include <vector>

#include "pipescope/core/schedule.hpp"

namespace pipescope {

// What a generator returns: per rank, the compute instructions (F, B, I, W) in order.
struct ComputeOrder {
  std::string name;
  int num_ranks = 0;
  int num_stages = 0;
  int num_micro_batches = 0;
  std::vector<int> stage_to_rank;
  std::vector<std::vector<Instruction>> per_rank;
};

// One instruction per step, no communication yet.
Schedule from_compute_order(const ComputeOrder& order);

// Adds LoadMicroBatch before each forward of the first stage (inputs) and of the last stage
// (labels), as DeepSpeed does. Leaves schedules that already load untouched.
void add_data_loads(Schedule& schedule);

// Adds a send after every compute whose result another rank needs and the matching receive
// before the compute that needs it. Stages on the same rank hand over in memory.
void add_send_recv(Schedule& schedule);

// Groups each compute with the receives just before it and the sends just after it into one
// step, and aligns steps across ranks on a unit-time dry run, inserting idle steps, so that
// step t of every rank is the same time slot and the text grid shows the bubbles.
void group_steps(Schedule& schedule);

// Gives every per-micro-batch instruction a buffer id: the lowest id free on that stage when
// the micro-batch arrives, released when its last backward (or, for inference, its forward
// and send) is done.
void assign_buffers(Schedule& schedule);

// Appends ReduceTiedGrads, ReduceGrads and OptimizerStep for every stage of every rank to
// training schedules that lack them.
void add_optimizer_step(Schedule& schedule);

// Replaces a BackwardInput immediately followed by its own BackwardWeight by one
// BackwardPass (useful when a split backward buys nothing).
void merge_backward(Schedule& schedule);

// The usual sequence: from_compute_order, add_data_loads, add_send_recv, group_steps,
// assign_buffers, add_optimizer_step.
Schedule lower(const ComputeOrder& order);

// Completes a schedule read from a compute-only or partial file (torch CSV): adds loads,
// communication, and the optimizer step where they are missing, keeping the step structure.
void complete_schedule(Schedule& schedule);

}  // namespace pipescope
