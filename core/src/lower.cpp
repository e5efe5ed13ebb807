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
#include <algorithm>
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

// add_data_loads' and add_send_recv's rules, per stage once: which of its neighbours live on
// another rank, and whether it loads data.
class SurroundingsOf {
 public:
  explicit SurroundingsOf(const Schedule& schedule) : schedule_(schedule), stages_(schedule.num_stages) {
    for (int s = 0; s < schedule.num_stages; ++s) {
      StageRule& rule = stages_[s];
      rule.loads = s == 0 || s == schedule.num_stages - 1;
      rule.previous_remote = crosses_ranks(schedule, s, s - 1);
      rule.next_remote = crosses_ranks(schedule, s, s + 1);
    }
  }

  // What goes around `compute`; `loaded` marks the (stage, micro-batch) pairs loaded so far.
  Surroundings operator()(const Instruction& compute, std::vector<char>& loaded) const {
    Surroundings around;
    const StageRule& rule = stages_[compute.stage];
    if (compute.op == Op::ForwardPass) {
      if (rule.loads) {
        char& done = loaded[pair_index(schedule_, compute)];
        around.load = !done;
        done = 1;
      }
      if (rule.previous_remote) around.receive = Op::RecvActivation;
      if (rule.next_remote) around.send = Op::SendActivation;
    } else if (is_full_or_input_backward(compute.op)) {
      if (rule.next_remote) around.receive = Op::RecvGrad;
      if (rule.previous_remote) around.send = Op::SendGrad;
    }
    return around;
  }

 private:
  struct StageRule {
    bool loads = false;
    bool previous_remote = false;
    bool next_remote = false;
  };
  const Schedule& schedule_;
  std::vector<StageRule> stages_;
};

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

// Where lower_ranks writes: a Schedule's steps (`lower`) or one rank's flat program at a time
// (`lower_streamed`). Per rank: begin_rank, then per unit of one step `unit(step, size)`
// followed by its `size` instructions through emit, then end_rank.
class ScheduleWriter {
 public:
  static constexpr bool kNeedsTotal = false;
  bool wants_buffers() const { return true; }
  void begin(const Schedule& shell, std::size_t) { schedule = shell; }
  void begin_rank(int rank, int num_steps) {
    program_ = &schedule.programs[rank];
    program_->resize(static_cast<std::size_t>(num_steps));
  }
  void unit(int step, std::size_t size) {
    step_ = &(*program_)[static_cast<std::size_t>(step)];
    step_->reserve(step_->size() + size);
  }
  void emit(const Instruction& instr) { step_->push_back(instr); }
  void end_rank() {}

  Schedule schedule;

 private:
  Program* program_ = nullptr;
  Step* step_ = nullptr;
};

class FlatWriter {
 public:
  static constexpr bool kNeedsTotal = true;
  explicit FlatWriter(FlatProgramConsumer& consumer) : consumer_(consumer) {}
  bool wants_buffers() const { return consumer_.wants_buffers(); }
  void begin(const Schedule& shell, std::size_t total) { consumer_.begin(shell, total); }
  void begin_rank(int rank, int num_steps) {
    flat_.rank = rank;
    flat_.num_steps = num_steps;
    flat_.instructions.clear();
    flat_.step_of.clear();
  }
  void unit(int step, std::size_t) { step_ = step; }
  void emit(const Instruction& instr) {
    flat_.instructions.push_back(instr);
    flat_.step_of.push_back(step_);
  }
  void end_rank() { consumer_.program(flat_); }

 private:
  FlatProgramConsumer& consumer_;
  FlatProgram flat_;
  int step_ = 0;
};

// The one walk of `lower`, into `writer`; releases each rank's order (and its slots) once
// written when `release` is given.
template <class Writer>
void lower_ranks(const ComputeOrder& order, Writer& writer, ComputeOrder* release) {
  const Schedule shell = schedule_shell(order);
  check_compute_order(shell, order);
  std::vector<std::vector<int>> slots = UnitDryRun(shell, ComputeUnits{order}).run();
  int num_steps = 0;
  for (const auto& rank_slots : slots)
    if (!rank_slots.empty()) num_steps = std::max(num_steps, rank_slots.back() + 1);
  // add_optimizer_step: nothing of the kind is present in a compute order. Its instructions go
  // to the last step, which a schedule with no step at all gets for them.
  const bool training = has_backward(order);
  const int optimizer_step = std::max(num_steps, 1) - 1;
  if (training) num_steps = std::max(num_steps, 1);

  const SurroundingsOf surroundings_of(shell);
  std::size_t total = 0;
  if constexpr (Writer::kNeedsTotal) {  // the count first, so that a consumer sizes its arrays once
    std::vector<char> loaded(pair_count(shell), 0);
    for (const auto& computes : order.per_rank)
      for (const Instruction& compute : computes) total += surroundings_of(compute, loaded).size();
    if (training) total += 3 * static_cast<std::size_t>(shell.num_stages);
  }
  writer.begin(shell, total);

  std::vector<char> loaded(pair_count(shell), 0);
  for (int r = 0; r < shell.num_ranks; ++r) {
    const std::vector<Instruction>& computes = order.per_rank[r];
    const std::vector<int> buffers = writer.wants_buffers() ? buffer_ids(shell, r, computes) : std::vector<int>();
    writer.begin_rank(r, num_steps);
    for (std::size_t u = 0; u < computes.size(); ++u) {
      Instruction compute = computes[u];
      const Surroundings around = surroundings_of(compute, loaded);
      if (!buffers.empty()) compute.buffer = buffers[u];
      writer.unit(slots[r][u], around.size());
      if (around.load) writer.emit({Op::LoadMicroBatch, compute.stage, compute.micro_batch, compute.buffer});
      if (around.receive != Op::ForwardPass) writer.emit({around.receive, compute.stage, compute.micro_batch, compute.buffer});
      writer.emit(compute);
      if (around.send != Op::ForwardPass) writer.emit({around.send, compute.stage, compute.micro_batch, compute.buffer});
    }
    if (training) {
      writer.unit(optimizer_step, 0);
      for (Op op : {Op::ReduceTiedGrads, Op::ReduceGrads, Op::OptimizerStep})
        for (int s = 0; s < shell.num_stages; ++s)
          if (shell.stage_to_rank[s] == r) writer.emit({op, s, kNone});
    }
    writer.end_rank();
    if (release) {
      std::vector<Instruction>().swap(release->per_rank[r]);
      std::vector<int>().swap(slots[r]);
    }
  }
}

}  // namespace

void lower_streamed(const ComputeOrder& order, FlatProgramConsumer& consumer) {
  FlatWriter writer(consumer);
  lower_ranks(order, writer, nullptr);
}

void lower_streamed(ComputeOrder&& order, FlatProgramConsumer& consumer) {
  FlatWriter writer(consumer);
  lower_ranks(order, writer, &order);
}

Schedule lower(const ComputeOrder& order) {
  ScheduleWriter writer;
  lower_ranks(order, writer, nullptr);
  return std::move(writer.schedule);
}

}  // namespace pipescope
