// Lowering passes: from a generator's compute-only per-rank order to a full Schedule.
// Each pass is a separate, separately tested function; `lower` runs the usual sequence.
#pragma once

#include <cstddef>
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

// One instruction per step, no communication yet. Throws ScheduleError naming rank, step
// and instruction for anything but F/B/I/W, a stage on another rank, or a micro-batch out
// of range.
Schedule from_compute_order(const ComputeOrder& order);

// Adds LoadMicroBatch before each forward of the first stage (inputs) and of the last stage
// (labels), as DeepSpeed does, in the forward's step. Loads already present (per stage and
// micro-batch) are not added again.
void add_data_loads(Schedule& schedule);

// Adds a send after every compute whose result another rank needs and the matching receive
// before the compute that needs it, in the same steps; in a step with several computes (torch's
// OVERLAP_F_B) the sends follow the last of them, as torch's own lowering places them. Stages on the same rank hand over in
// memory. Transfers already present are kept; added ones carry the buffer of their compute
// and the default peer (the neighbour stage).
void add_send_recv(Schedule& schedule);

// Groups each compute with the receives just before it and the sends just after it into one
// step, and aligns steps across ranks on a unit-time dry run, inserting idle steps, so that
// step t of every rank is the same time slot and the text grid shows the bubbles.
// Unit-time dry run: every compute takes one slot; F runs after the previous stage's F of
// its micro-batch, B/I after its own F and the next stage's B/I, W after its own I; a rank
// keeps its order and never waits when its next compute is ready. Every program gets the
// same number of steps (the unit-time makespan). Throws ScheduleError naming the rank and
// the instruction when the orders deadlock; the schedule then holds its instructions in
// order, one compute (with its transfers) per step.
void group_steps(Schedule& schedule);

// Gives every per-micro-batch instruction a buffer id: the lowest id free on that stage when
// the micro-batch arrives, released when its last backward (or, for inference, its forward
// and send) is done: the last instruction naming (stage, micro-batch) on the rank. Ranks
// that already carry buffer ids (from a file) are left as they are.
void assign_buffers(Schedule& schedule);

// Appends ReduceTiedGrads, ReduceGrads and OptimizerStep for every stage of every rank to
// the last step of training schedules that lack them (the tied reductions of the rank's
// stages first, then the reductions, then the optimizer steps). Inference is untouched.
void add_optimizer_step(Schedule& schedule);

// Replaces a BackwardInput whose next compute on the rank is its own BackwardWeight by one
// BackwardPass (useful when a split backward buys nothing). A step left empty by the
// removed weight pass disappears; idle steps stay. Run group_steps again to re-align.
void merge_backward(Schedule& schedule);

// The usual sequence: what from_compute_order, add_data_loads, add_send_recv, group_steps,
// assign_buffers, add_optimizer_step give run one after the other, built in one walk.
Schedule lower(const ComputeOrder& order);

// One rank's program as `lower` writes it, flat: its instructions in program order, the step
// of each (non-decreasing), and the program's length in steps (idle steps included).
struct FlatProgram {
  int rank = 0;
  std::vector<Instruction> instructions;
  std::vector<int> step_of;
  int num_steps = 0;
};

// Takes `lower_streamed`'s programs.
class FlatProgramConsumer {
 public:
  virtual ~FlatProgramConsumer() = default;
  // Called first, once: the schedule's name, sizes and placement (programs empty), and the
  // number of instructions of all its programs together.
  virtual void begin(const Schedule& shell, std::size_t total_instructions) = 0;
  // Then once per rank, rank 0 first. `program` is reused from one call to the next.
  virtual void program(const FlatProgram& program) = 0;
  // False when the consumer ignores buffer ids: they are then left as the order has them.
  virtual bool wants_buffers() const { return true; }
};

// `lower` without the Schedule: the same programs, with the same checks and errors, handed over
// one rank at a time, so that a consumer that keeps its own form of them (the simulator's
// compile) never holds a per-step copy of a large schedule. `lower` is built on it.
void lower_streamed(const ComputeOrder& order, FlatProgramConsumer& consumer);
// The same, releasing each rank's order once its program is handed over.
void lower_streamed(ComputeOrder&& order, FlatProgramConsumer& consumer);

// Completes a schedule read from a compute-only or partial file (torch CSV): adds loads,
// communication, buffer ids and the optimizer step where they are missing, keeping the step
// structure (idle steps included).
void complete_schedule(Schedule& schedule);

}  // namespace pipescope
