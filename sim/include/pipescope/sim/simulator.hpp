// The discrete-event simulator: a pure function from a schedule, its costs and a topology to
// a predicted trace and a summary. Each rank's compute lane runs its program in order; sends
// and receives have their own lanes; transfers occupy links (shared by concurrent transfers);
// collectives and the optimizer run at the end of the batch. With uniform costs and a fixed
// transfer delay this is exactly list scheduling (SPEC.md section 6).
#pragma once

#include <cstdint>
#include <vector>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/passes.hpp"
#include "pipescope/core/schedule.hpp"
#include "pipescope/sim/costs.hpp"
#include "pipescope/sim/summary.hpp"
#include "pipescope/sim/topology.hpp"
#include "pipescope/traces/trace.hpp"

namespace pipescope::sim {

// One instruction in the flat form the event loop reads: no strings, dependencies resolved
// to indices once.
struct CompiledInstruction {
  Op op = Op::ForwardPass;
  std::int32_t stage = 0;
  std::int32_t micro_batch = -1;
  // Send and receive: the transfer they take part in. Under torch's semantics also a compute:
  // the received transfer whose data it waits for; and a WaitSend*: its send's transfer.
  std::int32_t transfer = -1;
  // Instruction::overlaps_next_backward: a ForwardPass whose pair with the rank's next backward
  // is one overlapped step. A hint, like the instruction's: equality ignores it.
  bool overlaps_next_backward = false;

  friend bool operator==(const CompiledInstruction& a, const CompiledInstruction& b) {
    return a.op == b.op && a.stage == b.stage && a.micro_batch == b.micro_batch && a.transfer == b.transfer;
  }
};

// One point-to-point transfer: a send matched with its receive.
struct CompiledTransfer {
  std::int32_t send_index = -1;  // into CompiledSchedule::instructions
  std::int32_t recv_index = -1;
  std::int32_t from_rank = -1;
  std::int32_t to_rank = -1;
  std::int32_t link = -1;        // directed link id (from_rank -> to_rank)

  friend bool operator==(const CompiledTransfer&, const CompiledTransfer&) = default;
};

// A schedule flattened for simulation: compile once, simulate many times with other costs.
struct CompiledSchedule {
  std::string name;
  int num_ranks = 0;
  int num_stages = 0;
  int num_micro_batches = 0;
  std::vector<int> stage_to_rank;
  std::vector<CompiledInstruction> instructions;  // all ranks, rank after rank, in program order
  std::vector<std::int32_t> rank_begin;           // size num_ranks + 1
  // Per rank, steps in order: the index of each step's first instruction (the next step's for
  // an empty one); rank r's steps are step_begin[rank_first_step[r] ..]. Messages only read it.
  std::vector<std::int32_t> step_begin;
  std::vector<std::int32_t> rank_first_step;      // size num_ranks + 1
  std::vector<CompiledTransfer> transfers;
  std::vector<std::pair<int, int>> links;         // directed (from rank, to rank) per link id
  // Torch: a receive only posts; the compute that needs its data waits (Schedule::communication).
  bool receives_post_only = false;

  std::int32_t rank_of_instruction(std::int32_t index) const;
  // The step of instruction `index` in its rank's program.
  std::int32_t step_of(std::int32_t index) const;
};

// Flattens `schedule`, matching sends to receives in order per (kind, from stage, to stage).
// A compute-only schedule gets its communication from the core's add_send_recv pass first.
// Throws ScheduleError naming rank, step and instruction for an unmatched send or receive,
// or for a compute whose same-rank input comes later in the program.
CompiledSchedule compile(const Schedule& schedule);
// compile(lower(order)), without building the lowered Schedule: what `ppsim simulate` and the
// planner do with a built-in schedule (make_compute_order), in a fraction of the memory.
// The order's rank programs are released as they are compiled, so that what compile allocates
// last reuses their memory.
CompiledSchedule compile(ComputeOrder&& order);

// The longest iteration the simulator takes: its times are doubles of seconds, written as
// microseconds; below this, sums, differences and the x 1e6 of the trace all stay finite.
inline constexpr double kMaxSimulatedTimeS = 1e300;

// Costs whose sum over one iteration reaches kMaxSimulatedTimeS (or is not finite): the caller
// knows which options gave them and says so.
class CostOverflowError : public UsageError {
 public:
  using UsageError::UsageError;
};

struct SimOptions {
  bool build_trace = true;   // the trace is optional: the planner and benchmarks skip it
  bool share_links = true;   // concurrent transfers on a link share its bandwidth
};

// The experts' all-to-all (StageCost::all_to_all) over one iteration, summed over the ranks:
// what it takes on the wire, and how much of that ran while the rank computed another
// micro-batch (overlapped F&B steps) instead of holding its pass up.
struct AllToAllTotals {
  double total_s = 0;
  double hidden_s = 0;
  int overlapped_pairs = 0;  // F&B steps run overlapped
};

struct SimResult {
  Summary summary;
  AllToAllTotals all_to_all;
  traces::Trace trace;  // source "predicted"; empty events when build_trace is false
};

// Throws ScheduleError (naming the rank and the instruction it waits at) on a deadlock,
// UsageError when the costs do not fit the schedule, and CostOverflowError when they add up
// to kMaxSimulatedTimeS or more.
SimResult simulate(const CompiledSchedule& schedule, const CostModel& costs,
                   const Topology& topology = {}, const SimOptions& options = {});
SimResult simulate(const Schedule& schedule, const CostModel& costs,
                   const Topology& topology = {}, const SimOptions& options = {});

}  // namespace pipescope::sim
