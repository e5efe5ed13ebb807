// Helpers shared by the generator and pass tests: text forms of orders and programs, the
// unit-time dry run, and the invariants every generated schedule must keep.
//
// The unit-time model used throughout: every compute instruction (F, B, I, W) takes one
// slot; a compute runs in a later slot than each compute it consumes (F after the previous
// stage's F of the same micro-batch; B or I after the next stage's B or I and after its own
// F; W after its own I); a rank runs its order without reordering and never idles when its
// next compute is ready. Transfers are free. group_steps performs exactly this dry run, so
// the unit makespan is the number of steps it produces.
#pragma once

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/generators.hpp"
#include "pipescope/core/passes.hpp"

namespace test_support {

using namespace pipescope;

inline ScheduleParams params(int ranks, int micro_batches, int chunks = 1, bool chunks_given = false) {
  ScheduleParams p;
  p.num_ranks = ranks;
  p.num_micro_batches = micro_batches;
  p.chunks = chunks;
  p.chunks_given = chunks_given;
  return p;
}

// "0F0 0F1 0B0 ..." for one rank of an order.
inline std::string order_text(const ComputeOrder& order, int rank) {
  std::string text;
  for (const Instruction& instr : order.per_rank[rank]) text += (text.empty() ? "" : " ") + to_string(instr);
  return text;
}

// One string per step: the instructions in torch's text form, '.' for an idle step.
inline std::vector<std::string> program_text(const Program& program) {
  std::vector<std::string> steps;
  for (const Step& step : program) {
    std::string text;
    for (const Instruction& instr : step) text += (text.empty() ? "" : " ") + to_string(instr);
    steps.push_back(text.empty() ? "." : text);
  }
  return steps;
}

// The compute-only schedule aligned on the unit-time dry run.
inline Schedule unit_grid(const ComputeOrder& order) {
  Schedule schedule = from_compute_order(order);
  group_steps(schedule);
  return schedule;
}

inline int unit_makespan(const ComputeOrder& order) {
  return static_cast<int>(unit_grid(order).programs.at(0).size());
}

// Idle slots between a rank's first and last compute in the unit grid.
inline int idle_inside_span(const Program& program) {
  int first = -1, last = -1;
  for (int t = 0; t < static_cast<int>(program.size()); ++t)
    if (!program[t].empty()) {
      if (first < 0) first = t;
      last = t;
    }
  int idle = 0;
  for (int t = first; t >= 0 && t <= last; ++t) idle += program[t].empty() ? 1 : 0;
  return idle;
}

// Every stage sits on the rank the placement says; every (stage, micro-batch) is forwarded
// once and backwarded once (one BackwardPass, or one BackwardInput and one BackwardWeight
// after it); on each rank F comes before its backward, I before its W.
inline void check_order_invariants(const ComputeOrder& order, const std::vector<int>& placement) {
  INFO(order.name << " p=" << order.num_ranks << " m=" << order.num_micro_batches);
  REQUIRE(order.stage_to_rank == placement);
  REQUIRE(order.num_stages == static_cast<int>(placement.size()));
  REQUIRE(static_cast<int>(order.per_rank.size()) == order.num_ranks);
  std::map<std::tuple<int, int, Op>, int> count;
  for (int r = 0; r < order.num_ranks; ++r) {
    std::map<std::pair<int, int>, std::set<Op>> seen;
    for (const Instruction& instr : order.per_rank[r]) {
      INFO("rank " << r << " " << to_string(instr));
      REQUIRE(is_compute(instr.op));
      REQUIRE(order.stage_to_rank.at(instr.stage) == r);
      REQUIRE(instr.micro_batch >= 0);
      REQUIRE(instr.micro_batch < order.num_micro_batches);
      auto& done = seen[{instr.stage, instr.micro_batch}];
      if (instr.op != Op::ForwardPass) REQUIRE(done.count(Op::ForwardPass) == 1);
      if (instr.op == Op::BackwardWeight) REQUIRE(done.count(Op::BackwardInput) == 1);
      done.insert(instr.op);
      ++count[{instr.stage, instr.micro_batch, instr.op}];
    }
  }
  for (int s = 0; s < order.num_stages; ++s)
    for (int i = 0; i < order.num_micro_batches; ++i) {
      INFO("stage " << s << " micro-batch " << i);
      CHECK(count[{s, i, Op::ForwardPass}] == 1);
      const int full = count[{s, i, Op::BackwardPass}];
      const int input = count[{s, i, Op::BackwardInput}];
      const int weight = count[{s, i, Op::BackwardWeight}];
      CHECK(((full == 1 && input == 0 && weight == 0) || (full == 0 && input == 1 && weight == 1)));
    }
  // The dry run completes (no rank waits forever) or throws naming the stuck instruction.
  CHECK_NOTHROW(unit_grid(order));
}

// Compute ops per rank in the order.
inline std::map<Op, int> op_counts(const std::vector<Instruction>& ops) {
  std::map<Op, int> counts;
  for (const Instruction& instr : ops) ++counts[instr.op];
  return counts;
}

// The largest number of micro-batches whose activations a rank holds at once: forwarded,
// and not yet through BackwardPass / BackwardInput.
inline int peak_activations(const std::vector<Instruction>& ops) {
  int live = 0, peak = 0;
  for (const Instruction& instr : ops) {
    if (instr.op == Op::ForwardPass) peak = std::max(peak, ++live);
    if (is_backward(instr.op)) --live;
  }
  return peak;
}

// The message of the ScheduleError that `make` throws ("" when it does not throw).
template <class Make>
std::string refusal(Make make) {
  try {
    make();
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

}  // namespace test_support
