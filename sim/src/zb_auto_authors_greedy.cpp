// The Zero Bubble authors' greedy scheduler, one stage per rank, as a source of zb-auto
// candidates: the heuristic their runtime runs to build ZB-1p / ZB-2p from measured costs
// (`Graph.manual_order` in megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py of
// sail-sg/zero-bubble-pipeline-parallelism, BSD-3-Clause), re-expressed here so that zb-auto
// is never slower than what those authors' own search finds.
//
// It walks the micro-batches in order. Micro-batch 0 is forwarded through every stage, then
// each stage adds the forwards it can run (within its memory) before the first gradient
// reaches it, and micro-batch 0 goes backward. For each later micro-batch, every stage that
// still has forwards runs one (a stage ahead of the next by two may hold it back for the
// backward, `prioritize_b`), then the backward goes through the stages from the last. Before
// a forward or backward, weight passes run whenever the memory needs them and fill the wait
// for its input: all that end before the input arrives, then one more that overruns it unless
// the wait is within the worst stage's bubble so far (then only with `no_bubble_greedy`); the
// remaining weight passes close each stage. Times follow the simulator's rules with fixed
// costs: an operation starts when its stage is free and its input has arrived, c after it was
// produced. The authors run all eight settings of the three flags and keep the fastest.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/zb_auto.hpp"
#include "transfer_estimate.hpp"

namespace pipescope::sim {
// A namespace of its own: F, B and W are names the other zb-auto files (one unity batch) use too.
namespace authors_greedy {
namespace {

enum Kind { F = 0, B = 1, W = 2 };

class AuthorsGreedy {
 public:
  AuthorsGreedy(const ZbAutoRequest& request, const std::vector<std::int64_t>& rank_limit_bytes,
                const ZbAuthorsGreedyFlags& flags)
      : flags_(flags) {
    S_ = request.params.num_ranks;
    m_ = request.params.num_micro_batches;
    for (int s = 0; s < S_; ++s) {
      const StageCost& c = request.costs.stage(s);
      cost_[F].push_back(c.f_s);
      cost_[B].push_back(c.b_s);
      cost_[W].push_back(c.w_s);
      mem_[F].push_back(c.f_mem_bytes);
      mem_[B].push_back(c.b_mem_bytes);
      mem_[W].push_back(c.w_mem_bytes);
      // What the activations may take: the rank's limit less what it holds throughout.
      budget_.push_back(rank_limit_bytes[s] - c.static_bytes);
    }
    // The authors take one transfer time for every boundary; here each boundary has its own.
    for (int s = 0; s + 1 < S_; ++s) comm_after_s_.push_back(transfer_estimate_s(request.costs, request.topology, s, s + 1, s));
    const auto nodes = static_cast<std::size_t>(S_) * m_;
    for (auto& t : end_s_) t.assign(nodes, 0.0);
    for (auto& n : done_) n.assign(S_, 0);
    stage_end_s_.assign(S_, 0.0);
    memory_.assign(S_, 0);
    bubble_s_.assign(S_, 0.0);
  }

  // An empty per_rank when the memory cannot be met (the authors' "Cannot fit memory").
  ComputeOrder build() {
    ComputeOrder order;
    order.name = "zb-auto";
    order.num_ranks = S_;
    order.num_stages = S_;
    order.num_micro_batches = m_;
    order.stage_to_rank = loop_placement(S_, 1);
    order.per_rank.resize(S_);
    program_ = &order.per_rank;
    for (int i = 0; i < m_; ++i) {
      if (!(i == 0 ? first_micro_batch() : later_micro_batch(i))) return {};
    }
    for (int s = 0; s < S_; ++s)
      while (done_[W][s] < m_) put(s, W);
    return order;
  }

 private:
  double end(Kind kind, int stage, int micro_batch) const {
    return end_s_[kind][static_cast<std::size_t>(stage) * m_ + micro_batch];
  }
  double max_bubble() const { return *std::max_element(bubble_s_.begin(), bubble_s_.end()); }

  void put(int s, Kind kind) {
    const int i = done_[kind][s]++;
    double finish = stage_end_s_[s] + cost_[kind][s];
    const double without_wait = finish;
    if (kind == F && s > 0) finish = std::max(finish, end(F, s - 1, i) + comm_after_s_[s - 1] + cost_[kind][s]);
    if (kind == B && s < S_ - 1) finish = std::max(finish, end(B, s + 1, i) + comm_after_s_[s] + cost_[kind][s]);
    if (done_[F][s] - (kind == F ? 1 : 0) > 0) bubble_s_[s] += finish - without_wait;
    stage_end_s_[s] = finish;
    end_s_[kind][static_cast<std::size_t>(s) * m_ + i] = finish;
    memory_[s] += mem_[kind][s];
    const Op op = kind == F ? Op::ForwardPass : kind == B ? Op::BackwardInput : Op::BackwardWeight;
    (*program_)[s].push_back({op, s, i});
  }

  // Weight passes until `needed` more bytes fit; false when none is left to run.
  bool make_room(int s, std::int64_t needed) {
    while (memory_[s] + needed > budget_[s]) {
      if (done_[W][s] >= done_[B][s]) return false;
      put(s, W);
    }
    return true;
  }

  // Weight passes that end before the input the next operation waits for arrives; then one
  // more when that still leaves a wait, if the wait left after it is within the worst bubble.
  void fill_wait(int s, double input_ready_s) {
    while (done_[W][s] < done_[B][s] && stage_end_s_[s] + cost_[W][s] <= input_ready_s) put(s, W);
    if (done_[W][s] < done_[B][s] && stage_end_s_[s] < input_ready_s) {
      if (input_ready_s - stage_end_s_[s] <= max_bubble() - bubble_s_[s]) {
        if (flags_.no_bubble_greedy) put(s, W);
      } else {
        put(s, W);
      }
    }
  }

  bool first_micro_batch() {
    for (int s = 0; s < S_; ++s) put(s, F);
    // From the last stage back: the forwards a stage can run before the first gradient
    // arrives, within its memory.
    std::vector<int> extra(S_, 0);
    double gradient_s = 0;
    for (int s = S_ - 1; s >= 0; --s) {
      if (s == S_ - 1) {
        gradient_s = end(F, s, 0) + cost_[B][s];
        continue;
      }
      std::int64_t memory = memory_[s];
      double busy_until = stage_end_s_[s];
      while (done_[F][s] + extra[s] < m_ && memory + mem_[F][s] <= budget_[s]) {
        if (flags_.allow_bubble_before_first_b ? busy_until + cost_[F][s] > gradient_s + comm_after_s_[s]
                                               : busy_until >= gradient_s + comm_after_s_[s])
          break;
        memory += mem_[F][s];
        busy_until += cost_[F][s];
        ++extra[s];
      }
      gradient_s = std::max(busy_until, gradient_s + comm_after_s_[s]) + cost_[B][s];
    }
    // A stage never runs as many warm-up forwards as the stage before it (it could not have
    // their inputs), unless it is out of micro-batches.
    for (int s = 1; s < S_; ++s)
      while (extra[s] > 0 && extra[s] >= extra[s - 1] && done_[F][s] + extra[s] < m_) --extra[s];
    for (int s = 0; s < S_; ++s)
      for (int k = 0; k < extra[s]; ++k) put(s, F);
    for (int s = S_ - 1; s >= 0; --s) put(s, B);
    return true;
  }

  bool later_micro_batch(int i) {
    std::vector<int> forward(S_, 0);
    for (int s = 0; s < S_; ++s) {
      if (done_[F][s] >= m_) continue;
      if (s + 1 < S_ && done_[F][s] >= done_[F][s + 1] + 2 && flags_.prioritize_b) {
        // Two forwards ahead of the next stage: run one only if it (and the weight passes that
        // make its room) ends before the next stage's next forward and backward, or if holding
        // back would leave a bubble larger than the worst one.
        const double next_free_s = stage_end_s_[s + 1] + cost_[F][s + 1] + cost_[B][s + 1] + comm_after_s_[s];
        if (stage_end_s_[s] >= next_free_s) continue;
        double weight_s = 0;
        std::int64_t memory = memory_[s] + mem_[F][s];
        for (int k = 0; memory > budget_[s] && done_[W][s] + k < done_[B][s]; ++k) {
          weight_s += cost_[W][s];
          memory += mem_[W][s];
        }
        if (stage_end_s_[s] + cost_[F][s] + weight_s <= next_free_s) {
          forward[s] = 1;
          continue;
        }
        if (next_free_s - stage_end_s_[s] <= max_bubble() - bubble_s_[s]) continue;
      }
      forward[s] = 1;
    }
    // A stage forwards only if every later one does.
    for (int s = S_ - 2; s >= 0; --s) forward[s] = std::min(forward[s], forward[s + 1]);
    for (int s = 0; s < S_; ++s) {
      if (!forward[s]) continue;
      if (!make_room(s, mem_[F][s])) return false;
      if (s > 0) fill_wait(s, end(F, s - 1, done_[F][s]) + comm_after_s_[s - 1]);
      put(s, F);
    }
    for (int s = S_ - 1; s >= 0; --s) {
      if (done_[B][s] != i) throw std::logic_error("zb-auto: the authors' greedy lost its backward order");
      if (!make_room(s, mem_[B][s])) return false;
      if (s + 1 < S_) fill_wait(s, end(B, s + 1, i) + comm_after_s_[s]);
      if (s == 0 && done_[F][s] == m_)
        while (done_[W][s] < done_[B][s]) put(s, W);
      put(s, B);
    }
    return true;
  }

  ZbAuthorsGreedyFlags flags_;
  int S_ = 0, m_ = 0;
  std::vector<double> comm_after_s_;  // the transfer from stage s to s + 1, and back
  std::vector<double> cost_[3];
  std::vector<std::int64_t> mem_[3];
  std::vector<std::int64_t> budget_;
  std::vector<double> end_s_[3];
  std::vector<int> done_[3];
  std::vector<double> stage_end_s_;
  std::vector<std::int64_t> memory_;
  std::vector<double> bubble_s_;
  std::vector<std::vector<Instruction>>* program_ = nullptr;
};

}  // namespace
}  // namespace authors_greedy

ComputeOrder zb_authors_greedy_order(const ZbAutoRequest& request, const std::vector<std::int64_t>& rank_limit_bytes,
                                     const ZbAuthorsGreedyFlags& flags) {
  if (request.params.chunks != 1) throw ScheduleError("zb-auto: the authors' greedy places one stage per rank");
  if (static_cast<int>(rank_limit_bytes.size()) != request.params.num_ranks)
    throw ScheduleError("zb-auto: one memory limit per rank expected");
  return authors_greedy::AuthorsGreedy(request, rank_limit_bytes, flags).build();
}

std::vector<ZbAuthorsGreedyFlags> zb_authors_greedy_flag_sets() {
  std::vector<ZbAuthorsGreedyFlags> sets;
  for (bool allow_bubble : {true, false})
    for (bool prioritize_b : {true, false})
      for (bool no_bubble_greedy : {true, false}) sets.push_back({allow_bubble, prioritize_b, no_bubble_greedy});
  return sets;
}

}  // namespace pipescope::sim
