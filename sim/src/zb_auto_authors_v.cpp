// The Zero Bubble authors' ZB-V construction (V placement: rank r holds stages r and 2p-1-r), as
// a source of zb-auto candidates: `PipelineGraph.try_v_schedule` of
// megatron/core/pipeline_parallel/zerobubble/scheduler/zbv.py in
// sail-sg/zero-bubble-pipeline-parallelism (BSD-3-Clause), re-expressed here so that
// `zb-auto --chunks 2` is never slower than ZB-V at the memory ZB-V uses.
//
// Costs are one figure each for F, B, W and a transfer (the authors' runtime takes the median
// stage's). Rank r first forwards micro-batches through its first stage as far as its memory
// and the return of the first activation allow, then fills until it has as many forwards as
// the rank before it; then, 2m times over, every rank runs one backward (the one of its two
// stages whose gradient has arrived, the later stage's first) and one forward, each preceded by
// the weight passes that fit in the wait for its input, or one more when the wait would exceed
// the worst bubble so far (`fill_b`, `fill_f` say whether the first stage's backward and a
// forward take that one). A pass that ends with a smaller worst bubble is tried again with the
// bubbles of the first as allowances, as the authors do. In the authors' indexing a backward's
// "chunk 0" is the rank's later stage (2p-1-r), which the gradient reaches first.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "pipescope/sim/zb_auto.hpp"

namespace pipescope::sim {
namespace {

enum Cat { F = 0, B = 1, W = 2 };

struct Attempt {
  std::vector<std::vector<Instruction>> per_rank;
  double max_bubble = 0;
  std::vector<double> bubbles;
};

class AuthorsV {
 public:
  AuthorsV(int p, int m, const ZbAuthorsVCosts& costs, bool fill_f, bool fill_b)
      : S_(p), m_(m), c_(costs), fill_f_(fill_f), fill_b_(fill_b) {}

  // Empty when the construction breaks one of its own rules (the authors' asserts).
  std::optional<Attempt> run(const std::vector<double>* approved) {
    reset(approved);
    if (!construct()) return std::nullopt;
    Attempt attempt{std::move(per_rank_), max_bubble(-1), bubble_};
    // Try again with these bubbles as allowances while that makes the worst one smaller.
    if (max_approved_ < 0 || attempt.max_bubble < max_approved_) {
      const std::vector<double> allowances = attempt.bubbles;
      AuthorsV again(S_, m_, c_, fill_f_, fill_b_);
      std::optional<Attempt> retry = again.run(&allowances);
      if (retry && retry->max_bubble < attempt.max_bubble) return retry;
    }
    return attempt;
  }

 private:
  std::size_t id(int cat, int chunk, int stage, int micro_batch) const {
    return ((static_cast<std::size_t>(cat) * 2 + chunk) * S_ + stage) * m_ + micro_batch;
  }
  // The authors index a missing producer as -1, which Python reads as the last node's time.
  double end_at(long long node) const { return node < 0 ? end_.back() : end_[static_cast<std::size_t>(node)]; }
  double cost(int cat) const { return cat == F ? c_.f_s : cat == B ? c_.b_s : c_.w_s; }
  std::int64_t mem(int cat) const { return cat == F ? c_.f_mem : cat == B ? c_.b_mem : c_.w_mem; }

  void reset(const std::vector<double>* approved) {
    count_.assign(S_, std::vector<int>(6, 0));
    end_.assign(static_cast<std::size_t>(6) * S_ * m_, -1.0);
    now_.assign(S_, 0.0);
    memory_.assign(S_, 0);
    bubble_.assign(S_, 0.0);
    pending_w_.assign(S_, {});
    per_rank_.assign(S_, {});
    approved_ = approved ? *approved : std::vector<double>(S_, -1.0);
    max_approved_ = *std::max_element(approved_.begin(), approved_.end());
  }

  double max_bubble(int stage) const {
    double worst = *std::max_element(bubble_.begin(), bubble_.end());
    if (stage >= 0) worst = std::max(worst, max_approved_ - approved_[stage]);
    return worst;
  }

  bool put(int cat, int chunk, int s) {
    double finish = now_[s] + cost(cat);
    const double without_wait = finish;
    const int k = count_[s][cat * 2 + chunk];
    if (k >= m_ || memory_[s] + mem(cat) > c_.max_mem) return false;
    if (cat > 0 || chunk > 0) {
      const int before = cat * 2 + chunk - 1;
      const std::size_t needed = cat < 2 ? id(before / 2, before % 2, s, k) : id(B, chunk, s, k);
      if (end_[needed] < 0) return false;
    }
    if (cat < 2 && chunk == 1 && s < S_ - 1) {
      const std::size_t from = id(cat, chunk, s + 1, k);
      if (end_[from] < 0) return false;
      finish = std::max(finish, end_[from] + c_.c_s + cost(cat));
    }
    if (cat < 2 && chunk == 0 && s > 0) {
      const std::size_t from = id(cat, chunk, s - 1, k);
      if (end_[from] < 0) return false;
      finish = std::max(finish, end_[from] + c_.c_s + cost(cat));
    }
    if (count_[s][0] > 0) bubble_[s] += finish - without_wait;
    end_[id(cat, chunk, s, k)] = finish;
    now_[s] = finish;
    memory_[s] += mem(cat);
    // F chunk 0 and the backward's chunk 1 are stage s; the others stage 2p-1-s.
    const bool first_stage = cat == F ? chunk == 0 : chunk == 1;
    const int stage = first_stage ? s : 2 * S_ - 1 - s;
    const Op op = cat == F ? Op::ForwardPass : cat == B ? Op::BackwardInput : Op::BackwardWeight;
    per_rank_[s].push_back({op, stage, k});
    if (cat == B) pending_w_[s].push_back(chunk);
    ++count_[s][cat * 2 + chunk];
    return true;
  }

  bool put_w(int s) {
    if (pending_w_[s].empty()) return false;
    const int chunk = pending_w_[s].front();
    pending_w_[s].pop_front();
    return put(W, chunk, s);
  }

  // Weight passes before an operation whose input comes from `producer` (-1: none).
  bool fill_wait(int s, long long producer, bool take_one_more) {
    while (!pending_w_[s].empty() && producer >= 0 && end_at(producer) + c_.c_s >= now_[s] + c_.w_s)
      if (!put_w(s)) return false;
    if (!pending_w_[s].empty() && end_at(producer) + c_.c_s - now_[s] > max_bubble(s) - bubble_[s] && take_one_more)
      if (!put_w(s)) return false;
    return true;
  }

  bool construct() {
    for (int s = 0; s < S_; ++s)
      if (!put(F, 0, s)) return false;
    for (int s = S_ - 1; s >= 0; --s) {
      if (s == S_ - 1) {
        if (!put(F, 1, s)) return false;
        continue;
      }
      const double back = end_[id(F, 1, s + 1, 0)] + c_.c_s;
      while (memory_[s] + c_.f_mem * (2 + s * 2) <= c_.max_mem && now_[s] + c_.f_s <= back && count_[s][0] < m_)
        for (int j = 0; j <= s; ++j)
          if (!put(F, 0, j)) return false;
      if (!put(F, 1, s)) return false;
    }
    int chunk = 0;
    for (int s = 1; s < S_; ++s)
      while (count_[s][0] + count_[s][1] < count_[s - 1][0] + count_[s - 1][1] ||
             (count_[s][1] <= count_[s - 1][1] && count_[s - 1][1] < m_)) {
        for (int j = S_ - 1; j >= s; --j)
          if (count_[j][chunk] < m_ && !put(F, chunk, j)) return false;
        chunk = 1 - chunk;
      }

    for (int round = 0; round < 2 * m_; ++round) {
      for (int s = 0; s < S_; ++s)
        while (memory_[s] + c_.b_mem > c_.max_mem)
          if (!put_w(s)) return false;
      std::vector<int> later_first, earlier;  // backward chunk 0 / 1 in the authors' indexing
      for (int s = 0; s < S_; ++s) {
        if (count_[s][3] >= count_[s][2]) later_first.push_back(s);
        else if (s == S_ - 1) earlier.push_back(s);
        else if (end_[id(B, 1, s + 1, count_[s][3])] >= 0 || count_[s][2] >= m_) earlier.push_back(s);
        else later_first.push_back(s);
      }
      std::vector<std::pair<int, int>> backwards;
      for (auto it = earlier.rbegin(); it != earlier.rend(); ++it) backwards.emplace_back(*it, 1);
      for (int s : later_first) backwards.emplace_back(s, 0);
      for (const auto& [s, ch] : backwards) {
        long long producer = -1;
        if (ch == 1 && s < S_ - 1) producer = static_cast<long long>(id(B, 1, s + 1, count_[s][3]));
        if (ch == 0 && s > 0) producer = static_cast<long long>(id(B, 0, s - 1, count_[s][2]));
        if (!fill_wait(s, producer, ch == 1 || fill_b_)) return false;
        if (!put(B, ch, s)) return false;
      }
      for (int s = 0; s < S_; ++s) {
        if (count_[s][1] >= m_) continue;
        int item = -1;
        if (count_[s][1] >= count_[s][0]) item = 0;
        else if (s == S_ - 1) item = 1;
        else if (end_[id(F, 1, s + 1, count_[s][1])] >= 0) item = 1;
        else if (count_[s][0] < m_ && (s == 0 || end_[id(F, 0, s - 1, count_[s][0])] >= 0)) item = 0;
        if (item < 0) continue;
        while (memory_[s] + c_.f_mem > c_.max_mem)
          if (!put_w(s)) return false;
        long long producer = -1;
        if (item == 0 && s > 0) producer = static_cast<long long>(id(F, 0, s - 1, count_[s][0]));
        if (item == 1 && s < S_ - 1) producer = static_cast<long long>(id(F, 1, s + 1, count_[s][1]));
        if (!fill_wait(s, producer, fill_f_)) return false;
        if (!put(F, item, s)) return false;
      }
    }
    for (int s = 0; s < S_; ++s)
      while (!pending_w_[s].empty())
        if (!put_w(s)) return false;
    return true;
  }

  int S_, m_;
  ZbAuthorsVCosts c_;
  bool fill_f_, fill_b_;
  std::vector<std::vector<int>> count_;
  std::vector<double> end_, now_, bubble_, approved_;
  double max_approved_ = -1;
  std::vector<std::int64_t> memory_;
  std::vector<std::deque<int>> pending_w_;
  std::vector<std::vector<Instruction>> per_rank_;
};

}  // namespace

ComputeOrder zb_authors_v_order(int num_ranks, int num_micro_batches, const ZbAuthorsVCosts& costs) {
  ComputeOrder order;
  order.name = "zb-auto";
  order.num_ranks = num_ranks;
  order.num_stages = 2 * num_ranks;
  order.num_micro_batches = num_micro_batches;
  order.stage_to_rank = v_placement(num_ranks);
  // The authors' four settings, the smallest worst bubble kept (the first of equals).
  std::optional<Attempt> best;
  for (bool fill_b : {true, false})
    for (bool fill_f : {true, false}) {
      std::optional<Attempt> attempt = AuthorsV(num_ranks, num_micro_batches, costs, fill_f, fill_b).run(nullptr);
      if (attempt && (!best || attempt->max_bubble < best->max_bubble)) best = std::move(attempt);
    }
  if (best) order.per_rank = std::move(best->per_rank);
  return order;
}

}  // namespace pipescope::sim
