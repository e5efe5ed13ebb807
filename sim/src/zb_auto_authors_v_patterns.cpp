// The Zero Bubble authors' V-Half and V-Min schedules (Qi et al., "Pipeline Parallelism with
// Controllable Memory"), as sources of zb-auto candidates in V placement: `zbv_greedy.py` of
// sail-sg/zero-bubble-pipeline-parallelism (BSD-3-Clause), re-expressed here so that
// `zb-auto --chunks 2` is never slower than them at the memory they use.
//
// Each is a repeating pattern: every rank runs one forward of each of its two stages and one
// backward of each in a period of 6 slots, at offsets that set its memory (V-Min about a third
// of 1F1B's activations, V-Half half). The pattern is laid over m periods; then, twice, every
// operation outside the steady state is moved to the earliest free slot that its inputs allow
// and that keeps the rank's peak memory, and the result squeezed (each operation as early as its
// predecessors allow, unit times); weight passes take the free slots after their backwards.
// Times are kept as whole slots; the last pass times the order with the real costs. Type
// indices: 0 F of the rank's first stage, 1 F of its second, 2 B of its second (the gradient
// reaches it first), 3 B of its first, 4 and 5 their weight passes.
#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "pipescope/sim/zb_auto.hpp"

namespace pipescope::sim {
namespace {

using Times = std::vector<std::vector<int>>;   // [type][micro-batch] -> slot
using Stages = std::vector<Times>;              // per rank

int last_slot(const Times& rank) {
  int last = 0;
  for (const auto& type : rank)
    if (!type.empty()) last = std::max(last, type.back());
  return last;
}

// Weight passes into the free slots after their backwards, in order (one list, or one per
// backward type with `split`).
Times with_weights(Times rank, bool split) {
  const int bound = last_slot(rank);
  const int inf = bound + 1;
  rank.resize(split ? 6 : 5);
  int waiting[2] = {0, 0};
  std::vector<std::size_t> next(rank.size(), 0);
  int slot = 0;
  for (; slot <= bound; ++slot) {
    int next_time = inf, next_type = 0;
    for (int t = 0; t < 4; ++t) {
      const int time = next[t] < rank[t].size() ? rank[t][next[t]] : inf;
      if (time < next_time) next_time = time, next_type = t;
    }
    if (next_time == inf) throw std::logic_error("zb-auto: a V pattern ran out of operations");
    if (next_time == slot) {
      ++next[next_type];
      if (next_type >= 2) ++waiting[split ? next_type - 2 : 0];
    } else {
      for (int w = 0; w < 2; ++w)
        if (waiting[w]) {
          rank[4 + w].push_back(slot);
          --waiting[w];
          break;
        }
    }
  }
  --slot;
  for (int w = 0; w < 2; ++w)
    while (waiting[w] > 0) {
      rank[4 + w].push_back(++slot);
      --waiting[w];
    }
  return rank;
}

// The rank's peak, in micro-batches of one stage's activations (F +1, W -1; without weight
// passes in the lists, each backward's is taken in the next free slot).
int peak_memory(const Times& rank) {
  static constexpr int kMemory[] = {1, 1, 0, 0, -1};
  const bool has_w = rank.size() > 4;
  const int bound = last_slot(rank);
  const int inf = bound + 1;
  std::vector<std::size_t> next(rank.size(), 0);
  int waiting = 0, current = 0, peak = 0;
  for (int slot = 0; slot <= bound; ++slot) {
    int next_time = inf, next_type = 0;
    for (int t = 0; t < static_cast<int>(rank.size()); ++t) {
      const int time = next[t] < rank[t].size() ? rank[t][next[t]] : inf;
      if (time < next_time) next_time = time, next_type = t;
    }
    if (next_time == slot) {
      ++next[next_type];
      current += kMemory[next_type];
      if (next_type == 2 || next_type == 3) ++waiting;
    } else if (!has_w && waiting) {
      current += kMemory[4];
      --waiting;
    }
    peak = std::max(peak, current);
  }
  return peak;
}

struct Eager {
  std::vector<Times> start;  // [rank][type][micro-batch]: start times, in slots or seconds
  std::vector<std::vector<std::pair<int, int>>> order;  // per rank: (type, micro-batch)
  std::vector<std::vector<std::vector<double>>> start_s;
};

// Every operation as early as its inputs and its rank allow, taken in the order of the slots
// given (ties: rank, then type); `cost` per type, `c` a transfer.
Eager eager(const Stages& stages, const std::vector<double>& cost, double c) {
  const int S = static_cast<int>(stages.size());
  const int types = static_cast<int>(cost.size());
  std::vector<std::vector<std::size_t>> next(S, std::vector<std::size_t>(types, 0));
  std::map<std::tuple<int, int, int>, double> end;
  Eager result;
  result.order.resize(S);
  result.start_s.assign(S, std::vector<std::vector<double>>(types));
  std::size_t total = 0;
  for (const auto& type : stages[0]) total += type.size();
  total *= S;
  for (std::size_t done = 0; done < total; ++done) {
    std::tuple<int, int, int, int> best{std::numeric_limits<int>::max(), 0, 0, 0};
    for (int s = 0; s < S; ++s)
      for (int t = 0; t < types; ++t) {
        const std::size_t k = next[s][t];
        const int time = k < stages[s][t].size() ? stages[s][t][k] : std::numeric_limits<int>::max();
        best = std::min(best, std::make_tuple(time, s, t, static_cast<int>(k)));
      }
    const auto [time, s, t, mb] = best;
    if (time == std::numeric_limits<int>::max()) throw std::logic_error("zb-auto: a V pattern ran out of operations");
    ++next[s][t];
    double ready = 0;
    if ((t == 0 || t == 2) && s > 0) ready = std::max(ready, end.at({s - 1, t, mb}) + c);
    if ((t == 1 || t == 3) && s + 1 < S) ready = std::max(ready, end.at({s + 1, t, mb}) + c);
    if (t > 0 && t < 4) ready = std::max(ready, end.at({s, t - 1, mb}));
    if (mb > 0) ready = std::max(ready, end.at({s, t, mb - 1}));
    if (!result.order[s].empty()) {
      const auto [lt, lmb] = result.order[s].back();
      ready = std::max(ready, end.at({s, lt, lmb}));
    }
    end[{s, t, mb}] = ready + cost[t];
    result.order[s].emplace_back(t, mb);
    result.start_s[s][t].push_back(ready);
  }
  return result;
}

// The squeezed unit-time slots of an eager run.
Stages slots_of(const Eager& run) {
  Stages stages(run.start_s.size());
  for (std::size_t s = 0; s < run.start_s.size(); ++s)
    for (const auto& type : run.start_s[s]) {
      stages[s].emplace_back();
      for (double t : type) stages[s].back().push_back(static_cast<int>(t + 0.5));
    }
  return stages;
}

// Moves each operation outside the steady state to its earliest free slot that keeps the peak.
Stages reorder(Stages stages, bool consider_w) {
  int types = 4;
  if (consider_w) {
    for (Times& rank : stages) rank = with_weights(std::move(rank), false);
    types = 5;
  }
  int current_mem = 0;
  for (const Times& rank : stages) current_mem = std::max(current_mem, peak_memory(rank));
  const int S = static_cast<int>(stages.size());
  std::vector<std::vector<std::size_t>> next(S, std::vector<std::size_t>(types, 0));
  std::vector<std::vector<bool>> occupied(S);
  for (int s = 0; s < S; ++s) occupied[s].assign(static_cast<std::size_t>(last_slot(stages[s])) + 1, false);
  std::size_t total = 0;
  for (int t = 0; t < types; ++t) total += stages[0][t].size();
  total *= S;
  const int micro_batches = static_cast<int>(stages[0][0].size());
  int phase = 0;
  for (std::size_t done = 0; done < total; ++done) {
    std::tuple<int, int, int, int> best{std::numeric_limits<int>::max(), 0, 0, 0};
    for (int s = 0; s < S; ++s)
      for (int t = 0; t < types; ++t) {
        const std::size_t k = next[s][t];
        const int time = k < stages[s][t].size() ? stages[s][t][k] : std::numeric_limits<int>::max();
        best = std::min(best, std::make_tuple(time, s, t, static_cast<int>(k)));
      }
    const auto [time, s, t, mb] = best;
    ++next[s][t];
    auto occupy = [&, s = s, t = t, mb = mb] { occupied[s][stages[s][t][mb]] = true; };
    if (t == 3 && s == 0 && phase == 0) ++phase;
    if (phase == 1) {
      if (t == 0 && mb == micro_batches - 1) ++phase;
      occupy();
      continue;
    }
    if (phase == 0 && !consider_w) {
      occupy();
      continue;
    }
    int earliest = -1;
    if ((t == 0 || t == 2) && s > 0) earliest = std::max(earliest, stages[s - 1][t][mb]);
    if ((t == 1 || t == 3) && s + 1 < S) earliest = std::max(earliest, stages[s + 1][t][mb]);
    if (t > 0 && t < 4) earliest = std::max(earliest, stages[s][t - 1][mb]);
    if (t == 4) {
      std::vector<int> backwards = stages[s][2];
      backwards.insert(backwards.end(), stages[s][3].begin(), stages[s][3].end());
      std::sort(backwards.begin(), backwards.end());
      earliest = std::max(earliest, backwards[static_cast<std::size_t>(mb)]);
    }
    if (mb > 0) earliest = std::max(earliest, stages[s][t][mb - 1]);
    ++earliest;
    bool moved = false;
    for (int slot = earliest; slot < time; ++slot) {
      if (occupied[s][slot]) continue;
      stages[s][t][mb] = slot;
      if (peak_memory(stages[s]) <= current_mem) {
        moved = true;
        break;
      }
    }
    if (!moved) stages[s][t][mb] = time;
    occupy();
  }
  if (!consider_w)
    for (Times& rank : stages) rank = with_weights(std::move(rank), false);
  return slots_of(eager(stages, std::vector<double>(5, 1.0), 0.0));
}

Stages pattern(ZbAuthorsVPattern kind, int S, int m) {
  Stages stages(S);
  for (int i = 0; i < S; ++i) {
    std::vector<int> offsets;
    if (kind == ZbAuthorsVPattern::v_min) {
      const int interval = S % 3 == 0 ? 2 : 0;
      offsets = {i, 2 * S - i - 1, 2 * S + interval + i, 4 * S + interval - i - 1};
    } else {
      const int interval = S % 2 == 0 ? 3 : 0;
      offsets = {2 * i, 3 * S - i - 2, 3 * S + interval + 2 * i - 1, 6 * S + interval - i - 2};
    }
    for (int x : offsets) {
      stages[i].emplace_back();
      for (int k = 0; k < m; ++k) stages[i].back().push_back(x + 6 * k);
    }
  }
  return stages;
}

}  // namespace

ComputeOrder zb_authors_v_pattern_order(ZbAuthorsVPattern kind, int num_ranks, int num_micro_batches,
                                        const ZbAuthorsVCosts& costs) {
  const int S = num_ranks;
  Stages first = reorder(pattern(kind, S, num_micro_batches), true);
  for (Times& rank : first) rank.resize(4);
  Stages second = reorder(std::move(first), false);
  for (Times& rank : second) rank = with_weights(Times(rank.begin(), rank.begin() + 4), true);
  const Eager timed = eager(second, {costs.f_s, costs.f_s, costs.b_s, costs.b_s, costs.w_s, costs.w_s}, costs.c_s);

  ComputeOrder order;
  order.name = "zb-auto";
  order.num_ranks = S;
  order.num_stages = 2 * S;
  order.num_micro_batches = num_micro_batches;
  order.stage_to_rank = v_placement(S);
  order.per_rank.resize(S);
  for (int r = 0; r < S; ++r)
    for (const auto& [type, mb] : timed.order[r]) {
      // Types 0, 3, 5 work for the rank's first stage, 1, 2, 4 for its second.
      const bool first_stage = type == 0 || type == 3 || type == 5;
      const Op op = type < 2 ? Op::ForwardPass : type < 4 ? Op::BackwardInput : Op::BackwardWeight;
      order.per_rank[r].push_back({op, first_stage ? r : 2 * S - 1 - r, mb});
    }
  return order;
}

}  // namespace pipescope::sim
