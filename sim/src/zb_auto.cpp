#include "pipescope/sim/zb_auto.hpp"

#include <algorithm>
#include <deque>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/simulator.hpp"
#include "transfer_estimate.hpp"

namespace pipescope::sim {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();
constexpr std::int64_t kNoLimit = std::numeric_limits<std::int64_t>::max();

std::vector<int> placement_for(const ScheduleParams& params) {
  if (params.chunks == 1) return loop_placement(params.num_ranks, 1);
  if (params.chunks == 2) return v_placement(params.num_ranks);
  throw ScheduleError("zb-auto: --chunks must be 1 (one stage per rank) or 2 (V placement), got " +
                      std::to_string(params.chunks));
}

enum class Kind { None, F, B, W };

struct Choice {
  double time = kNever;
  Kind kind = Kind::None;
  int stage = -1;
};

// The greedy construction: ranks act in the order of the time of their next action, so that a
// rank deciding at time t knows every result that arrives by t.
class Greedy {
 public:
  Greedy(const ZbAutoRequest& request, const std::vector<int>& caps, bool eager_w,
         const std::vector<std::int64_t>& rank_limit_bytes)
      : req_(request), caps_(caps), eager_w_(eager_w) {
    p_ = request.params.num_ranks;
    m_ = request.params.num_micro_batches;
    placement_ = placement_for(request.params);
    S_ = static_cast<int>(placement_.size());
    const auto slots = static_cast<std::size_t>(S_) * m_;
    fwd_ready_.assign(slots, kNever);
    grad_ready_.assign(slots, kNever);
    next_f_.assign(S_, 0);
    next_b_.assign(S_, 0);
    ranks_.resize(p_);
    for (int s = 0; s < S_; ++s) {
      ranks_[placement_[s]].stages.push_back(s);
      ranks_[placement_[s]].static_bytes += request.costs.stage(s).static_bytes;
    }
    for (int r = 0; r < p_; ++r)
      ranks_[r].budget_bytes =
          rank_limit_bytes[r] == kNoLimit ? kNoLimit : rank_limit_bytes[r] - ranks_[r].static_bytes;
  }

  ComputeOrder build() {
    ComputeOrder order;
    order.name = "zb-auto";
    order.num_ranks = p_;
    order.num_stages = S_;
    order.num_micro_batches = m_;
    order.stage_to_rank = placement_;
    order.per_rank.resize(p_);
    std::vector<Choice> next(p_);
    for (int r = 0; r < p_; ++r) next[r] = choose(r);
    const std::size_t total = static_cast<std::size_t>(S_) * m_ * 3;
    for (std::size_t done = 0; done < total; ++done) {
      int best = -1;
      for (int r = 0; r < p_; ++r)
        if (next[r].kind != Kind::None && (best < 0 || next[r].time < next[best].time)) best = r;
      if (best < 0 || next[best].time == kNever) return {};  // stuck under this cap or limit
      const int touched = execute(best, next[best], order.per_rank[best]);
      next[best] = choose(best);
      if (touched >= 0 && touched != best) next[touched] = choose(touched);
    }
    return order;
  }

 private:
  struct RankState {
    std::vector<int> stages;
    double time_s = 0;
    std::int64_t memory_bytes = 0;  // activations and weight-gradient stashes
    std::int64_t static_bytes = 0;
    std::int64_t budget_bytes = 0;
    int in_flight = 0;
    std::deque<std::pair<int, int>> pending_w;  // (stage, micro-batch)
  };

  double f_ready(int s) const {
    const int i = next_f_[s];
    if (i >= m_) return kNever;
    return s == 0 ? 0.0 : fwd_ready_[static_cast<std::size_t>(s - 1) * m_ + i];
  }
  double b_ready(int s) const {
    const int i = next_b_[s];
    if (i >= m_ || i >= next_f_[s]) return kNever;
    return s == S_ - 1 ? 0.0 : grad_ready_[static_cast<std::size_t>(s + 1) * m_ + i];
  }
  // A micro-batch is in flight on a rank from the forward of the rank's first stage to the
  // backward of that stage; the cap counts those. A forward of an earlier chunk must leave
  // room for one forward of each later chunk, so the oldest micro-batch can always proceed.
  bool f_fits(int r, int s) const {
    const RankState& rank = ranks_[r];
    const StageCost& c = req_.costs.stage(s);
    const bool first = s == rank.stages.front();
    if (first && rank.in_flight >= caps_[r]) return false;
    std::int64_t needed = c.f_mem_bytes + std::max<std::int64_t>(0, c.b_mem_bytes);
    for (int later : rank.stages)
      if (later > s) needed += req_.costs.stage(later).f_mem_bytes;
    return rank.memory_bytes + needed <= rank.budget_bytes;
  }

  Choice choose(int r) const {
    const RankState& rank = ranks_[r];
    const double t = rank.time_s;
    if (eager_w_ && !rank.pending_w.empty()) return {t, Kind::W, rank.pending_w.front().first};
    Choice b, f;
    for (int s : rank.stages) {
      const double rb = b_ready(s);
      if (rb < b.time || (rb == b.time && rb != kNever && s > b.stage)) b = {rb, Kind::B, s};
      if (f_fits(r, s)) {
        const double rf = f_ready(s);
        // Among forwards ready now, the later stage first: it reaches its backward sooner.
        const double key = std::max(rf, t);
        const double best_key = std::max(f.time, t);
        if (key < best_key || (key == best_key && rf != kNever && s > f.stage)) f = {rf, Kind::F, s};
      }
    }
    if (b.time <= t) return {t, Kind::B, b.stage};
    if (f.time <= t) return {t, Kind::F, f.stage};
    if (!rank.pending_w.empty()) return {t, Kind::W, rank.pending_w.front().first};
    const Choice& soonest = b.time <= f.time ? b : f;
    if (soonest.kind == Kind::None || soonest.time == kNever) return {kNever, Kind::None, -1};
    return {soonest.time, soonest.kind, soonest.stage};
  }

  // Runs the choice; returns the rank that receives its result (or -1).
  int execute(int r, const Choice& choice, std::vector<Instruction>& program) {
    RankState& rank = ranks_[r];
    const StageCost& c = req_.costs.stage(choice.stage);
    const double start = std::max(rank.time_s, choice.time);
    const int s = choice.stage;
    int touched = -1;
    switch (choice.kind) {
      case Kind::F: {
        const int i = next_f_[s]++;
        const double end = start + c.f_s;
        rank.memory_bytes += c.f_mem_bytes;
        if (s == rank.stages.front()) ++rank.in_flight;
        if (s + 1 < S_) {
          touched = placement_[s + 1];
          fwd_ready_[static_cast<std::size_t>(s) * m_ + i] =
              end + transfer_estimate_s(req_.costs, req_.topology, r, touched, s);
        }
        program.push_back({Op::ForwardPass, s, i});
        rank.time_s = end;
        break;
      }
      case Kind::B: {
        const int i = next_b_[s]++;
        const double end = start + c.b_s;
        rank.memory_bytes += c.b_mem_bytes;
        if (s == rank.stages.front()) --rank.in_flight;
        if (s > 0) {
          touched = placement_[s - 1];
          grad_ready_[static_cast<std::size_t>(s) * m_ + i] =
              end + transfer_estimate_s(req_.costs, req_.topology, r, touched, s);
        }
        rank.pending_w.emplace_back(s, i);
        program.push_back({Op::BackwardInput, s, i});
        rank.time_s = end;
        break;
      }
      case Kind::W: {
        const auto [ws, wi] = rank.pending_w.front();
        rank.pending_w.pop_front();
        rank.memory_bytes += req_.costs.stage(ws).w_mem_bytes;
        program.push_back({Op::BackwardWeight, ws, wi});
        rank.time_s = start + req_.costs.stage(ws).w_s;
        break;
      }
      case Kind::None: break;
    }
    return touched;
  }

  const ZbAutoRequest& req_;
  const std::vector<int>& caps_;
  bool eager_w_;
  int p_ = 0, m_ = 0, S_ = 0;
  std::vector<int> placement_;
  std::vector<double> fwd_ready_, grad_ready_;
  std::vector<int> next_f_, next_b_;
  std::vector<RankState> ranks_;
};

// Cap values worth trying: every value up to the largest useful one for small pipelines, an
// even spread of about two dozen for large ones.
std::vector<int> cap_values(int largest) {
  std::set<int> values;
  if (largest <= 24) {
    for (int k = 1; k <= largest; ++k) values.insert(k);
  } else {
    for (int j = 1; j <= 24; ++j) values.insert(std::max(1, largest * j / 24));
  }
  return {values.begin(), values.end()};
}

// What each rank holds throughout, and the activations one micro-batch leaves on it (all its
// stages) and on its largest stage.
struct RankMemory {
  std::int64_t static_bytes = 0;
  std::int64_t one_micro_batch_bytes = 0;
  std::int64_t largest_stage_f_bytes = 0;
};

std::vector<RankMemory> rank_memory(const ScheduleParams& params, const CostModel& costs) {
  const std::vector<int> placement = placement_for(params);
  std::vector<RankMemory> ranks(static_cast<std::size_t>(params.num_ranks));
  for (int s = 0; s < static_cast<int>(placement.size()); ++s) {
    RankMemory& r = ranks[placement[s]];
    r.static_bytes += costs.stage(s).static_bytes;
    r.one_micro_batch_bytes += costs.stage(s).f_mem_bytes;
    r.largest_stage_f_bytes = std::max(r.largest_stage_f_bytes, costs.stage(s).f_mem_bytes);
  }
  return ranks;
}

bool fits(const Summary& summary, const std::vector<std::int64_t>& rank_limit_bytes) {
  for (const RankSummary& rank : summary.ranks)
    if (rank.peak_memory_bytes > rank_limit_bytes[rank.rank]) return false;
  return true;
}

std::string limit_description(const ZbAutoRequest& request, const std::vector<std::int64_t>& rank_limit_bytes) {
  const auto [low, high] = std::minmax_element(rank_limit_bytes.begin(), rank_limit_bytes.end());
  const std::string bytes = *low == *high ? std::to_string(*low) + " bytes"
                                          : std::to_string(*low) + " to " + std::to_string(*high) + " bytes by rank";
  if (request.max_mem_micro_batches <= 0) return "--max-mem " + bytes;
  std::string text = "--max-mem-micro-batches " + std::to_string(request.max_mem_micro_batches);
  if (request.max_mem_bytes > 0) text += " and --max-mem " + std::to_string(request.max_mem_bytes);
  return text + " (" + bytes + ")";
}

// What the authors' ZB-V construction is given: the median stage's costs (as their runtime does)
// and, as the memory its ranks' activations may take, its own default (2p forwards: 1F1B's)
// where every rank's limit allows it, and the tightest rank's room under the limit.
std::vector<ZbAuthorsVCosts> authors_v_inputs(const ZbAutoRequest& request, const std::vector<std::int64_t>& limits) {
  const int p = request.params.num_ranks;
  auto median = [&](auto field) {
    std::vector<decltype(field(request.costs.stage(0)))> values;
    values.reserve(2 * static_cast<std::size_t>(p));
    for (int s = 0; s < 2 * p; ++s) values.push_back(field(request.costs.stage(s)));
    std::nth_element(values.begin(), values.begin() + p, values.end());
    return values[static_cast<std::size_t>(p)];
  };
  ZbAuthorsVCosts costs;
  costs.f_s = median([](const StageCost& c) { return c.f_s; });
  costs.b_s = median([](const StageCost& c) { return c.b_s; });
  costs.w_s = median([](const StageCost& c) { return c.w_s; });
  costs.f_mem = median([](const StageCost& c) { return c.f_mem_bytes; });
  costs.b_mem = median([](const StageCost& c) { return c.b_mem_bytes; });
  costs.w_mem = -costs.f_mem - costs.b_mem;
  costs.c_s = transfer_estimate_s(request.costs, request.topology, 0, std::min(1, p - 1), 0);
  const std::vector<RankMemory> ranks = rank_memory(request.params, request.costs);
  std::int64_t room = kNoLimit;
  for (std::size_t r = 0; r < ranks.size(); ++r)
    room = std::min(room, limits[r] == kNoLimit ? kNoLimit : limits[r] - ranks[r].static_bytes);
  std::vector<ZbAuthorsVCosts> inputs;
  const std::int64_t authors_default = 2LL * p * costs.f_mem;
  if (authors_default <= room) {
    costs.max_mem = authors_default;
    inputs.push_back(costs);
  }
  if (room != kNoLimit && room != authors_default) {
    costs.max_mem = room;
    inputs.push_back(costs);
  }
  return inputs;
}

// How a candidate that is exactly as fast as the best so far is ranked.
enum class Tie {
  KeepLeastIdle,  // the one whose ranks wait least once the pipeline is full, then least memory
  KeepEarlier,    // the best so far
};

// The fastest candidate whose simulated peak stays under each rank's limit.
class BestCandidate {
 public:
  BestCandidate(const ZbAutoRequest& request, const std::vector<int>& placement,
                const std::vector<std::int64_t>& limits)
      : request_(request), placement_(placement), limits_(limits) {
    options_.build_trace = false;
  }

  void consider(Schedule candidate, Tie tie) {
    if (candidate.stage_to_rank != placement_) return;
    const Summary summary = simulate(candidate, request_.costs, request_.topology, options_).summary;
    const std::int64_t peak = summary.max_peak_memory_bytes();
    least_peak_ = std::min(least_peak_, peak);
    if (!fits(summary, limits_)) return;
    // Among equally fast ones, the idle time is what remains when iterations overlap.
    const double idle = summary.total_internal_idle_s();
    const auto key = std::make_tuple(summary.iteration_time_s, idle, peak);
    const bool better = tie == Tie::KeepEarlier ? summary.iteration_time_s < time_ * (1 - 1e-12)
                                                : key < std::make_tuple(time_, idle_, peak_);
    if (best_ && !better) return;
    best_ = std::move(candidate);
    time_ = summary.iteration_time_s;
    idle_ = idle;
    peak_ = peak;
  }

  Schedule take(const std::string& limit_text) {
    if (!best_) {
      std::string message = "zb-auto: no schedule found whose peak memory stays under " + limit_text;
      if (least_peak_ != kNoLimit)
        message += " (the least peak of any candidate: " + std::to_string(least_peak_) + " bytes)";
      throw ScheduleError(message);
    }
    best_->name = "zb-auto";
    return std::move(*best_);
  }

 private:
  const ZbAutoRequest& request_;
  const std::vector<int>& placement_;
  const std::vector<std::int64_t>& limits_;
  SimOptions options_;
  std::optional<Schedule> best_;
  double time_ = kNever;
  double idle_ = kNever;
  std::int64_t peak_ = 0;
  std::int64_t least_peak_ = kNoLimit;
};

}  // namespace

CostModel default_zb_auto_costs() { return CostModel::uniform(1.0, 1.0, 1.0, 0.0, 2, -1, -1); }

std::int64_t default_zb_auto_limit(const ScheduleParams& params, const CostModel& costs) {
  const std::vector<RankMemory> ranks = rank_memory(params, costs);
  std::int64_t limit = 0;
  for (const RankMemory& r : ranks)
    limit = std::max(limit,
                     r.static_bytes + (2 * static_cast<std::int64_t>(params.num_ranks) - 1) * r.largest_stage_f_bytes);
  return limit;
}

std::vector<std::int64_t> zb_auto_rank_limits(const ZbAutoRequest& request) {
  const ScheduleParams& params = request.params;
  if (request.max_mem_bytes <= 0 && request.max_mem_micro_batches <= 0)
    return std::vector<std::int64_t>(static_cast<std::size_t>(params.num_ranks),
                                     default_zb_auto_limit(params, request.costs));
  const std::vector<RankMemory> ranks = rank_memory(params, request.costs);
  std::int64_t largest = 0;
  for (const RankMemory& r : ranks) largest = std::max(largest, r.one_micro_batch_bytes);
  std::vector<std::int64_t> limits(ranks.size(), request.max_mem_bytes > 0 ? request.max_mem_bytes : kNoLimit);
  if (request.max_mem_micro_batches > 0)
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      // A limit past what 64 bits hold is no limit.
      const std::int64_t static_bytes = ranks[r].static_bytes;
      const bool huge = largest > 0 && request.max_mem_micro_batches > (kNoLimit - static_bytes) / largest;
      limits[r] = std::min(limits[r], huge ? kNoLimit : static_bytes + request.max_mem_micro_batches * largest);
    }
  return limits;
}

ComputeOrder zb_auto_greedy_order(const ZbAutoRequest& request, const std::vector<int>& cap_per_rank, bool eager_w,
                                  const std::vector<std::int64_t>& rank_limit_bytes) {
  if (static_cast<int>(rank_limit_bytes.size()) != request.params.num_ranks ||
      static_cast<int>(cap_per_rank.size()) != request.params.num_ranks)
    throw ScheduleError("zb-auto: one in-flight cap and one memory limit per rank expected");
  return Greedy(request, cap_per_rank, eager_w, rank_limit_bytes).build();
}

Schedule zb_auto_schedule(const ZbAutoRequest& request) {
  const ScheduleParams& params = request.params;
  const int p = params.num_ranks;
  const int m = params.num_micro_batches;
  const std::vector<int> placement = placement_for(params);
  const int num_stages = static_cast<int>(placement.size());
  if (p < 1 || m < 1) throw ScheduleError("zb-auto: --stages and --micro-batches must be at least 1");
  request.costs.check(num_stages);
  if (request.max_mem_micro_batches < 0)
    throw ScheduleError("zb-auto: --max-mem-micro-batches must be at least 1, got " +
                        std::to_string(request.max_mem_micro_batches));
  const std::vector<std::int64_t> limits = zb_auto_rank_limits(request);

  // Each candidate is simulated as soon as it is built, and only the best is kept (at p 64,
  // m 512 a candidate holds about 100 k instructions, and there are a hundred).
  BestCandidate best(request, placement, limits);
  const int largest_cap = std::min(m, 2 * p + 1);
  for (int k : cap_values(largest_cap)) {
    for (int slope : {0, 1}) {
      std::vector<int> caps(p);
      for (int r = 0; r < p; ++r) caps[r] = std::max(1, k - slope * r);
      for (bool eager : {false, true}) {
        ComputeOrder order = zb_auto_greedy_order(request, caps, eager, limits);
        if (!order.per_rank.empty()) best.consider(lower(order), Tie::KeepLeastIdle);
      }
    }
  }
  // The Zero Bubble authors' scheduler in all its settings: zb-auto is never slower than the
  // one of them those authors would pick (by their own clock) when it fits. Its orders replace
  // zb-auto's own only when faster: between equally fast ones, the choice stays what it was
  // before they were candidates (the steady states of docs/VALIDATION.md were measured with it).
  if (params.chunks == 1)
    for (const ZbAuthorsGreedyFlags& flags : zb_authors_greedy_flag_sets()) {
      ComputeOrder order = zb_authors_greedy_order(request, limits, flags);
      if (!order.per_rank.empty()) best.consider(lower(order), Tie::KeepEarlier);
    }
  // Likewise in V placement: the authors' ZB-V, and their V-Half and V-Min, which hold less.
  if (params.chunks == 2) {
    const std::vector<ZbAuthorsVCosts> inputs = authors_v_inputs(request, limits);
    for (const ZbAuthorsVCosts& costs : inputs) {
      ComputeOrder order = zb_authors_v_order(p, m, costs);
      if (!order.per_rank.empty()) best.consider(lower(order), Tie::KeepEarlier);
    }
    for (ZbAuthorsVPattern kind : {ZbAuthorsVPattern::v_half, ZbAuthorsVPattern::v_min}) {
      try {
        best.consider(lower(zb_authors_v_pattern_order(kind, p, m, inputs.front())), Tie::KeepEarlier);
      } catch (const std::logic_error&) {
        // A pattern that cannot be laid out over so few micro-batches is not a candidate.
      }
    }
  }
  // The hand-made schedules are candidates too: zb-auto is never worse than them when they fit.
  const std::vector<std::string> baselines =
      params.chunks == 1 ? std::vector<std::string>{"zb-h1", "zb-h2", "1f1b"} : std::vector<std::string>{"zbv"};
  for (const std::string& name : baselines) {
    if (!ScheduleRegistry::instance().find(name)) continue;
    try {
      ScheduleParams baseline_params = params;
      baseline_params.chunks_given = params.chunks != 1;
      best.consider(make_schedule(name, baseline_params), Tie::KeepLeastIdle);
    } catch (const ScheduleError&) {
      // A baseline that cannot honour these parameters is simply not a candidate.
    }
  }
  return best.take(limit_description(request, limits));
}

namespace {

struct CostDependentEntry {
  std::string_view name;
  std::string_view description;
  Schedule (*make)(const ZbAutoRequest&);
};

// The cost-dependent schedules: one line each.
constexpr CostDependentEntry kCostDependentSchedules[] = {
    {"zb-auto",
     "automatic zero bubble under a memory limit, from costs (default f=b=w=1, c=0, f_mem=2, b_mem=w_mem=-1, "
     "limit: 2p-1 micro-batches of activations); 1 stage per rank, or V with --chunks 2",
     zb_auto_schedule},
};

const CostDependentEntry* cost_dependent_entry(std::string_view name) {
  for (const CostDependentEntry& entry : kCostDependentSchedules)
    if (entry.name == name) return &entry;
  return nullptr;
}

const ScheduleTraits& cost_dependent_traits() {
  static const ScheduleTraits traits = [] {
    ScheduleTraits t;
    t.placement = StagePlacement::v;
    t.chunks = {1, 2};
    t.split_backward = true;
    t.cost_dependent = true;
    t.memory_limited = true;
    return t;
  }();
  return traits;
}

}  // namespace

Schedule make_cost_dependent_schedule(std::string_view name, const ZbAutoRequest& request) {
  const CostDependentEntry* entry = cost_dependent_entry(name);
  if (!entry) throw ScheduleError(std::string(name) + ": not a schedule searched from costs");
  return entry->make(request);
}

const ScheduleTraits* schedule_traits(std::string_view name) {
  if (const ScheduleTraits* traits = ScheduleRegistry::instance().traits(name)) return traits;
  return cost_dependent_entry(name) ? &cost_dependent_traits() : nullptr;
}

void register_with_costs(std::string_view name, const CostModel& costs, const Topology& topology,
                         std::int64_t max_mem_bytes, int max_mem_micro_batches) {
  const CostDependentEntry* entry = cost_dependent_entry(name);
  if (!entry) throw ScheduleError(std::string(name) + ": not a schedule searched from costs");
  const auto make = entry->make;
  ScheduleRegistry::instance().add(
      {std::string(entry->name), std::string(entry->description),
       [make, costs, topology, max_mem_bytes, max_mem_micro_batches](const ScheduleParams& params) {
         ZbAutoRequest request;
         request.params = params;
         request.costs = costs;
         request.topology = topology;
         request.max_mem_bytes = max_mem_bytes;
         request.max_mem_micro_batches = max_mem_micro_batches;
         return make(request);
       },
       nullptr, cost_dependent_traits()});
}

void register_zb_auto(const CostModel& costs, const Topology& topology, std::int64_t max_mem_bytes,
                      int max_mem_micro_batches) {
  register_with_costs("zb-auto", costs, topology, max_mem_bytes, max_mem_micro_batches);
}

void register_sim_schedules() { register_zb_auto(default_zb_auto_costs(), Topology{}, 0); }

}  // namespace pipescope::sim
