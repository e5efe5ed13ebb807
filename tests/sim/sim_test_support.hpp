// Helpers shared by the simulator tests: hand-built schedules (one instruction per step) and
// an independent list scheduler written from SPEC.md section 6 alone, to compare against.
#pragma once

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "pipescope/core/schedule.hpp"
#include "pipescope/sim/costs.hpp"
#include "pipescope/traces/trace.hpp"

namespace sim_test {

using pipescope::Instruction;
using pipescope::Op;
using pipescope::Schedule;

// A schedule from per-rank instruction lists, one instruction per step.
inline Schedule hand_schedule(const std::string& name, int num_stages, int num_micro_batches,
                              std::vector<int> stage_to_rank, const std::vector<std::vector<Instruction>>& per_rank) {
  Schedule s;
  s.name = name;
  s.num_ranks = static_cast<int>(per_rank.size());
  s.num_stages = num_stages;
  s.num_micro_batches = num_micro_batches;
  s.stage_to_rank = std::move(stage_to_rank);
  for (const auto& list : per_rank) {
    pipescope::Program program;
    for (const auto& instr : list) program.push_back({instr});
    s.programs.push_back(program);
  }
  return s;
}

struct ReferenceResult {
  double iteration_s = 0;
  std::vector<double> busy_s;
};

// List scheduling, the plain way: sweep the ranks again and again; each rank runs its next
// instruction once the previous one finished and its data is there. A receive completes c
// after its send (matched by kind, stages and micro-batch) was posted; sends take no time.
inline ReferenceResult reference_list_schedule(const Schedule& s, const pipescope::sim::CostModel& costs) {
  using Key = std::tuple<int, int, int, int>;  // kind, from stage, to stage, micro-batch
  std::map<Key, double> posted;
  std::vector<std::vector<Instruction>> flat(s.num_ranks);
  for (int r = 0; r < s.num_ranks; ++r)
    for (const auto& step : s.programs[r])
      for (const auto& instr : step) flat[r].push_back(instr);
  std::vector<std::size_t> next(s.num_ranks, 0);
  std::vector<double> clock(s.num_ranks, 0.0);
  ReferenceResult result;
  result.busy_s.assign(s.num_ranks, 0.0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < s.num_ranks; ++r) {
      while (next[r] < flat[r].size()) {
        const Instruction& in = flat[r][next[r]];
        const auto& c = costs.stage(in.stage);
        double duration = 0;
        if (in.op == Op::ForwardPass) duration = c.f_s;
        if (in.op == Op::BackwardPass) duration = c.b_s + c.w_s;
        if (in.op == Op::BackwardInput) duration = c.b_s;
        if (in.op == Op::BackwardWeight) duration = c.w_s;
        if (in.op == Op::SendActivation) posted[{0, in.stage, in.stage + 1, in.micro_batch}] = clock[r];
        if (in.op == Op::SendGrad) posted[{1, in.stage, in.stage - 1, in.micro_batch}] = clock[r];
        if (in.op == Op::RecvActivation || in.op == Op::RecvGrad) {
          const Key key = in.op == Op::RecvActivation ? Key{0, in.stage - 1, in.stage, in.micro_batch}
                                                      : Key{1, in.stage + 1, in.stage, in.micro_batch};
          auto it = posted.find(key);
          if (it == posted.end()) break;  // not sent yet: try the other ranks
          clock[r] = std::max(clock[r], it->second + costs.c_s);
        }
        clock[r] += duration;
        result.busy_s[r] += duration;
        ++next[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < s.num_ranks; ++r) result.iteration_s = std::max(result.iteration_s, clock[r]);
  return result;
}

// The longest wait of any rank's compute lane between its first and last compute.
inline double largest_internal_gap_s(const pipescope::traces::Trace& trace) {
  std::map<int, std::vector<std::pair<double, double>>> lanes;
  for (const auto& e : trace.events)
    if (e.lane == 0 && e.dur_us > 0) lanes[e.rank].emplace_back(e.ts_us, e.end_us());
  double gap_us = 0;
  for (auto& [rank, spans] : lanes) {
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) gap_us = std::max(gap_us, spans[i].first - spans[i - 1].second);
  }
  return gap_us / 1e6;
}

}  // namespace sim_test
