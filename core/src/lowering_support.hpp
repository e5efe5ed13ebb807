// What the lowering passes (passes.cpp) and the one-walk lowering of a fresh compute order
// (lower.cpp) share: the checks that name a bad instruction's place, the unit-time dry run that
// aligns steps across ranks, and the lowest-free-id buffer numbering. One definition each, so
// that `lower` and the passes run one after the other cannot drift apart.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <functional>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/passes.hpp"
#include "pipescope/core/schedule.hpp"

namespace pipescope::lowering {

inline std::string place(const Schedule& schedule, int rank, int step, const Instruction& instr) {
  return "schedule '" + schedule.name + "': rank " + std::to_string(rank) + ", step " + std::to_string(step) +
         ", instruction " + to_string(instr);
}

// from_compute_order's first half: the schedule's name, sizes and placement with empty programs,
// after the checks that name a compute order whose shape is wrong.
Schedule schedule_shell(const ComputeOrder& order);
// Throws ScheduleError naming rank, step and instruction for anything but F/B/I/W, a stage on
// another rank, or a micro-batch out of range (`shell`: schedule_shell(order)).
void check_compute_order(const Schedule& shell, const ComputeOrder& order);

// Throws ScheduleError naming `pass` when the schedule's sizes or placement cannot be indexed.
void check_shape(const Schedule& schedule, std::string_view pass);

// Names what is wrong with an instruction that check_instruction refused.
[[noreturn, gnu::cold, gnu::noinline]] void refuse_instruction(const Schedule& schedule, int rank, int step,
                                                               const Instruction& instr);

// Checks the fields the passes index tables with, so a bad file fails with its place named
// instead of reading out of bounds. Every pass calls it on every instruction it indexes with:
// the test stays inline and the message is built out of line, only when it fails.
inline void check_instruction(const Schedule& schedule, int rank, int step, const Instruction& instr) {
  const bool stage_ok =
      instr.stage >= 0 && instr.stage < schedule.num_stages && schedule.stage_to_rank[instr.stage] == rank;
  const bool micro_batch_ok =
      !needs_micro_batch(instr.op) || (instr.micro_batch >= 0 && instr.micro_batch < schedule.num_micro_batches);
  if (stage_ok && micro_batch_ok) [[likely]]
    return;
  refuse_instruction(schedule, rank, step, instr);
}

// Flat index of a (stage, micro-batch) pair into per-pair tables.
inline std::size_t pair_index(const Schedule& schedule, const Instruction& instr) {
  return static_cast<std::size_t>(instr.stage) * schedule.num_micro_batches + instr.micro_batch;
}

inline std::size_t pair_count(const Schedule& schedule) {
  return static_cast<std::size_t>(schedule.num_stages) * schedule.num_micro_batches;
}

inline bool is_full_or_input_backward(Op op) { return op == Op::BackwardPass || op == Op::BackwardInput; }

// Which neighbour stages live on another rank, so that values must travel.
inline bool crosses_ranks(const Schedule& schedule, int stage, int other_stage) {
  return other_stage >= 0 && other_stage < schedule.num_stages &&
         schedule.stage_to_rank[stage] != schedule.stage_to_rank[other_stage];
}

// The buffer ids of one stage: the lowest free id is handed out first, a released id is reused.
class StageBufferIds {
 public:
  int take() {
    if (free_.empty()) return next_++;
    const int id = free_.top();
    free_.pop();
    return id;
  }
  void release(int id) { free_.push(id); }

 private:
  std::priority_queue<int, std::vector<int>, std::greater<int>> free_;
  int next_ = 0;
};

// The unit-time dry run of group_steps (passes.hpp): every unit takes one slot on its rank; a
// compute runs in a later slot than the computes it consumes. Ranks advance until blocked and
// are woken by the completion they wait for, so the run is linear in the number of units.
// `Units` tells, per rank, how many units there are (`size(rank)`), the compute of unit u
// (`compute(rank, u)`, nullptr for a unit without one), and checks a unit's instructions before
// they index the tables (`check(rank, u)`, which throws on a bad one).
template <class Units>
class UnitDryRun {
 public:
  UnitDryRun(const Schedule& schedule, const Units& units)
      : schedule_(schedule),
        units_(units),
        pairs_(pair_count(schedule)),
        forward_slot_(pairs_, -1),
        backward_slot_(pairs_, -1),
        wait_head_(2 * pairs_, -1),
        wait_next_(schedule.num_ranks, -1),
        next_unit_(schedule.num_ranks, 0),
        last_slot_(schedule.num_ranks, -1),
        slots_(schedule.num_ranks) {}

  // The slot of every unit, per rank; throws ScheduleError naming the first blocked compute
  // when the orders deadlock.
  std::vector<std::vector<int>> run() {
    for (int r = 0; r < schedule_.num_ranks; ++r) {
      slots_[r].assign(units_.size(r), -1);
      ready_.push_back(r);
    }
    while (!ready_.empty()) {
      const int rank = ready_.front();
      ready_.pop_front();
      advance(rank);
    }
    for (int r = 0; r < schedule_.num_ranks; ++r) {
      if (next_unit_[r] < units_.size(r)) {
        const Instruction& instr = *units_.compute(r, next_unit_[r]);
        throw ScheduleError("group_steps: schedule '" + schedule_.name + "': rank " + std::to_string(r) +
                            ", instruction " + to_string(instr) +
                            ": its input is never produced before it (the per-rank orders deadlock)");
      }
    }
    return std::move(slots_);
  }

 private:
  // Keys of the completions a compute needs; -1 when none.
  void needs(const Instruction& instr, long long& first, long long& second) const {
    first = second = -1;
    const long long idx = static_cast<long long>(pair_index(schedule_, instr));
    const long long m = schedule_.num_micro_batches;
    const long long backward_base = static_cast<long long>(pairs_);
    switch (instr.op) {
      case Op::ForwardPass:
        if (instr.stage > 0) first = idx - m;
        break;
      case Op::BackwardPass:
      case Op::BackwardInput:
        first = idx;  // its own forward
        if (instr.stage + 1 < schedule_.num_stages) second = backward_base + idx + m;
        break;
      case Op::BackwardWeight:
        first = backward_base + idx;
        break;
      default:
        break;
    }
  }

  int slot_of(long long key) const {
    const std::size_t k = static_cast<std::size_t>(key);
    return k < pairs_ ? forward_slot_[k] : backward_slot_[k - pairs_];
  }

  void advance(int rank) {
    auto& next = next_unit_[rank];
    const std::size_t count = units_.size(rank);
    while (next < count) {
      const Instruction* compute = units_.compute(rank, next);
      int slot = last_slot_[rank] + 1;
      if (compute) {
        units_.check(rank, next);
        long long keys[2];
        needs(*compute, keys[0], keys[1]);
        for (long long key : keys) {
          if (key < 0) continue;
          const int producer_slot = slot_of(key);
          if (producer_slot < 0) {
            wait_next_[rank] = wait_head_[key];
            wait_head_[key] = rank;
            return;
          }
          slot = std::max(slot, producer_slot + 1);
        }
        finish(*compute, slot);
      }
      slots_[rank][next] = slot;
      last_slot_[rank] = slot;
      ++next;
    }
  }

  void finish(const Instruction& instr, int slot) {
    long long key = -1;
    if (instr.op == Op::ForwardPass)
      key = static_cast<long long>(pair_index(schedule_, instr));
    else if (is_full_or_input_backward(instr.op))
      key = static_cast<long long>(pairs_ + pair_index(schedule_, instr));
    if (key < 0) return;
    std::size_t k = static_cast<std::size_t>(key);
    if (k < pairs_) {
      if (forward_slot_[k] >= 0) return;  // a duplicate; the validator names it
      forward_slot_[k] = slot;
    } else {
      if (backward_slot_[k - pairs_] >= 0) return;
      backward_slot_[k - pairs_] = slot;
    }
    for (int waiter = wait_head_[k]; waiter >= 0;) {
      const int following = wait_next_[waiter];
      ready_.push_back(waiter);
      waiter = following;
    }
    wait_head_[k] = -1;
  }

  const Schedule& schedule_;
  const Units& units_;
  std::size_t pairs_;
  std::vector<int> forward_slot_;
  std::vector<int> backward_slot_;
  std::vector<int> wait_head_;
  std::vector<int> wait_next_;
  std::vector<std::size_t> next_unit_;
  std::vector<int> last_slot_;
  std::vector<std::vector<int>> slots_;
  std::deque<int> ready_;
};

}  // namespace pipescope::lowering
