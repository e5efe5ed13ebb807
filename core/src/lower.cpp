// `lower`: a generator's compute order to a full Schedule in one walk. It gives what the passes
// from_compute_order, add_data_loads, add_send_recv, group_steps, assign_buffers and
// add_optimizer_step give run one after the other (tests/core/test_lower.cpp compares them on
// every generator), without their intermediate forms: on a schedule of 1.5 M instructions those
// were five walks, one heap block per step built, grown twice and moved, and most of
// `ppsim simulate`'s time. A fresh compute order holds nothing but computes, which is what
// lets each step be written once, at its final place and size:
// - no load or transfer is present yet, so every forward of the first and last stage gets its
//   load (the first forward of its micro-batch), and every compute the transfers add_send_recv
//   gives it;
// - each step is one unit of group_steps (its compute with its load, receive and send), so the
//   dry run reads the computes and the slot of compute u is the step it lands in;
// - every instruction of a unit names the unit's (stage, micro-batch), so assign_buffers' walk
//   over instructions gives the same ids walked over computes.
#include <string>
#include <vector>

#include "lowering_support.hpp"
#include "pipescope/core/passes.hpp"

namespace pipescope {
namespace {

using namespace lowering;

// A compute order's computes as group_steps' dry run reads units: one compute per unit, all
// already checked by check_compute_order.
struct ComputeUnits {
  const ComputeOrder& order;
  std::size_t size(int rank) const { return order.per_rank[rank].size(); }
  const Instruction* compute(int rank, std::size_t u) const { return &order.per_rank[rank][u]; }
  void check(int, std::size_t) const {}
};

// The instructions add_data_loads and add_send_recv put around one compute.
struct Surroundings {
  bool load = false;
  Op receive = Op::ForwardPass;  // the receive before the compute; ForwardPass: none
  Op send = Op::ForwardPass;     // the send after it; ForwardPass: none

  std::size_t size() const {
    return 1 + static_cast<std::size_t>(load) + (receive != Op::ForwardPass) + (send != Op::ForwardPass);
  }
};

Surroundings surroundings_of(const Schedule& schedule, const Instruction& compute, std::vector<char>& loaded) {
  Surroundings around;
  const int s = compute.stage;
  if (compute.op == Op::ForwardPass) {
    if (s == 0 || s == schedule.num_stages - 1) {
      char& done = loaded[pair_index(schedule, compute)];
      around.load = !done;
      done = 1;
    }
    if (crosses_ranks(schedule, s, s - 1)) around.receive = Op::RecvActivation;
    if (crosses_ranks(schedule, s, s + 1)) around.send = Op::SendActivation;
  } else if (is_full_or_input_backward(compute.op)) {
    if (crosses_ranks(schedule, s, s + 1)) around.receive = Op::RecvGrad;
    if (crosses_ranks(schedule, s, s - 1)) around.send = Op::SendGrad;
  }
  return around;
}

// assign_buffers' ids for one rank's computes, in order (the ids of the order itself when it
// carries any, as assign_buffers keeps a rank's given ids).
std::vector<int> buffer_ids(const Schedule& schedule, int rank, const std::vector<Instruction>& computes) {
  std::vector<int> ids(computes.size());
  bool given = false;
  for (std::size_t u = 0; u < computes.size(); ++u) {
    ids[u] = computes[u].buffer;
    given = given || computes[u].buffer != kNone;
  }
  if (given) return ids;
  const int m = schedule.num_micro_batches;
  std::vector<int> local_of_stage(schedule.num_stages, -1);
  int num_local = 0;
  for (int s = 0; s < schedule.num_stages; ++s)
    if (schedule.stage_to_rank[s] == rank) local_of_stage[s] = num_local++;
  auto key_of = [&](const Instruction& instr) {
    return static_cast<std::size_t>(local_of_stage[instr.stage]) * m + instr.micro_batch;
  };
  const std::size_t local_pairs = static_cast<std::size_t>(num_local) * m;
  std::vector<std::size_t> last_use(local_pairs, 0);
  for (std::size_t u = 0; u < computes.size(); ++u) last_use[key_of(computes[u])] = u;
  std::vector<int> buffer_of(local_pairs, kNone);
  std::vector<StageBufferIds> stage_ids(num_local);
  for (std::size_t u = 0; u < computes.size(); ++u) {
    const std::size_t key = key_of(computes[u]);
    StageBufferIds& free_ids = stage_ids[local_of_stage[computes[u].stage]];
    if (buffer_of[key] == kNone) buffer_of[key] = free_ids.take();
    ids[u] = buffer_of[key];
    if (last_use[key] == u) free_ids.release(buffer_of[key]);
  }
  return ids;
}

bool has_backward(const ComputeOrder& order) {
  for (const auto& computes : order.per_rank)
    for (const Instruction& instr : computes)
      if (is_backward(instr.op) || instr.op == Op::BackwardWeight) return true;
  return false;
}

}  // namespace

Schedule lower(const ComputeOrder& order) {
  Schedule schedule = schedule_shell(order);
  check_compute_order(schedule, order);
  const std::vector<std::vector<int>> slots = UnitDryRun(schedule, ComputeUnits{order}).run();
  int num_steps = 0;
  for (const auto& rank_slots : slots)
    if (!rank_slots.empty()) num_steps = std::max(num_steps, rank_slots.back() + 1);

  std::vector<char> loaded(pair_count(schedule), 0);
  for (int r = 0; r < schedule.num_ranks; ++r) {
    const std::vector<Instruction>& computes = order.per_rank[r];
    const std::vector<int> buffers = buffer_ids(schedule, r, computes);
    Program& program = schedule.programs[r];
    program.resize(static_cast<std::size_t>(num_steps));
    for (std::size_t u = 0; u < computes.size(); ++u) {
      Instruction compute = computes[u];
      const Surroundings around = surroundings_of(schedule, compute, loaded);
      compute.buffer = buffers[u];
      Step& step = program[slots[r][u]];
      step.reserve(around.size());
      if (around.load) step.push_back({Op::LoadMicroBatch, compute.stage, compute.micro_batch, compute.buffer});
      if (around.receive != Op::ForwardPass) step.push_back({around.receive, compute.stage, compute.micro_batch, compute.buffer});
      step.push_back(compute);
      if (around.send != Op::ForwardPass) step.push_back({around.send, compute.stage, compute.micro_batch, compute.buffer});
    }
  }

  // add_optimizer_step: nothing of the kind is present in a compute order.
  if (has_backward(order)) {
    for (int r = 0; r < schedule.num_ranks; ++r) {
      Program& program = schedule.programs[r];
      if (program.empty()) program.emplace_back();
      Step& last = program.back();
      for (Op op : {Op::ReduceTiedGrads, Op::ReduceGrads, Op::OptimizerStep})
        for (int s = 0; s < schedule.num_stages; ++s)
          if (schedule.stage_to_rank[s] == r) last.push_back({op, s, kNone});
    }
  }
  return schedule;
}

}  // namespace pipescope
