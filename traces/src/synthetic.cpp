#include "pipescope/traces/synthetic.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace pipescope::traces {
namespace {

// splitmix64: a deterministic, well-mixed stream of jitter factors.
double unit_random(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

struct Op {
  bool forward = true;
  int micro_batch = 0;
};

// PipeDream-flush order of one rank: warm-up forwards, then one forward one backward, then
// the remaining backwards.
std::vector<Op> one_f_one_b_order(int rank, int ranks, int micro_batches) {
  const int warmup = std::min(ranks - rank - 1, micro_batches);
  std::vector<Op> order;
  int next_f = 0, next_b = 0;
  for (; next_f < warmup; ++next_f) order.push_back({true, next_f});
  while (next_f < micro_batches) {
    order.push_back({true, next_f++});
    order.push_back({false, next_b++});
  }
  while (next_b < micro_batches) order.push_back({false, next_b++});
  return order;
}

}  // namespace

Trace make_1f1b_trace(const SyntheticPipeline& pp) {
  if (pp.num_ranks < 1 || pp.num_micro_batches < 1)
    throw std::invalid_argument("make_1f1b_trace: needs at least one rank and one micro-batch");
  const int p = pp.num_ranks, m = pp.num_micro_batches;
  std::uint64_t state = pp.seed;
  auto scaled = [&](double base, int rank) {
    double factor = 1;
    if (pp.jitter > 0) factor += pp.jitter * (2 * unit_random(state) - 1);
    if (rank == pp.slow_rank) factor *= pp.slow_factor;
    return base * factor;
  };

  Trace t;
  t.meta.source = pp.source;
  t.meta.schedule = "1f1b";
  t.meta.num_ranks = p;
  t.meta.num_stages = p;
  t.meta.num_micro_batches = m;
  t.events.reserve(static_cast<std::size_t>(p) * m * 6 + p);

  std::vector<std::vector<Op>> orders(p);
  for (int r = 0; r < p; ++r) orders[r] = one_f_one_b_order(r, p, m);
  // When each micro-batch's input (from the previous rank) and gradient (from the next) is there.
  std::vector<std::vector<double>> input_ready(p, std::vector<double>(m, -1));
  std::vector<std::vector<double>> grad_ready(p, std::vector<double>(m, -1));
  for (int i = 0; i < m; ++i) input_ready[0][i] = 0;
  std::vector<std::size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  std::vector<std::int64_t> held(p, 0);

  auto add = [&](int rank, EventKind kind, double start, double dur, int mb, int peer, std::int64_t bytes) {
    TraceEvent e;
    e.rank = rank;
    e.lane = static_cast<int>(event_kind_lane(kind));
    e.name = std::string(event_kind_name(kind));
    e.kind = kind;
    e.category = std::string(event_kind_category(kind));
    e.ts_us = start;
    e.dur_us = dur;
    e.stage = rank;
    e.micro_batch = mb;
    e.peer_rank = peer;
    e.bytes = bytes;
    t.events.push_back(std::move(e));
  };
  auto transfer = [&](int from, int to, EventKind send, EventKind recv, double start, int mb) {
    const double dur = scaled(pp.transfer_us, from);
    add(from, send, start, dur, mb, to, pp.transfer_bytes);
    add(to, recv, start, dur, mb, from, pp.transfer_bytes);
    t.flows.push_back({from, 1, start, to, 2, start + dur});
    return start + dur;
  };

  // Round-robin over ranks, running each rank's next operation once its input is there.
  std::size_t done = 0;
  const std::size_t total = static_cast<std::size_t>(p) * m * 2;
  while (done < total) {
    bool progressed = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < orders[r].size()) {
        const Op op = orders[r][next[r]];
        const double ready = op.forward ? input_ready[r][op.micro_batch]
                                        : (r == p - 1 ? free_at[r] : grad_ready[r][op.micro_batch]);
        if (ready < 0) break;
        const double start = std::max(free_at[r], ready);
        const double dur = scaled(op.forward ? pp.forward_us : pp.backward_us, r);
        add(r, op.forward ? EventKind::Forward : EventKind::Backward, start, dur, op.micro_batch, -1, -1);
        free_at[r] = start + dur;
        held[r] += op.forward ? pp.activation_bytes : -pp.activation_bytes;
        t.memory.push_back({r, free_at[r], held[r]});
        if (op.forward && r + 1 < p) input_ready[r + 1][op.micro_batch] = transfer(r, r + 1, EventKind::SendActivation, EventKind::RecvActivation, free_at[r], op.micro_batch);
        if (!op.forward && r > 0) grad_ready[r - 1][op.micro_batch] = transfer(r, r - 1, EventKind::SendGrad, EventKind::RecvGrad, free_at[r], op.micro_batch);
        ++next[r];
        ++done;
        progressed = true;
      }
    }
    if (!progressed) throw std::logic_error("make_1f1b_trace: the 1F1B order deadlocked");
  }
  double end = 0;
  for (int r = 0; r < p; ++r) end = std::max(end, free_at[r]);
  for (int r = 0; r < p; ++r) add(r, EventKind::Optimizer, end, scaled(pp.optimizer_us, r), -1, -1, -1);
  for (int r = 0; r < p; ++r) t.memory.insert(t.memory.begin() + r, MemorySample{r, 0, 0});
  return t;
}

}  // namespace pipescope::traces
