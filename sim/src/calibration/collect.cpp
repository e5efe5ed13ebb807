// The collectors: what calibration reads from one measured trace (estimation.hpp). Each
// turns a trace's events, memory counter or run description into samples keyed by stage and
// what they measure.
#include <algorithm>
#include <limits>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "estimation.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/traces/compare.hpp"
#include "pipescope/traces/torch_profiler.hpp"

namespace pipescope::sim::calibration {

namespace {

// The kind of the events a timed operation is measured on; nothing for a send's own program
// time, which both kinds of sends give.
std::optional<traces::EventKind> kind_of_timed(Timed timed) {
  using traces::EventKind;
  switch (timed) {
    case Timed::F: return EventKind::Forward;
    case Timed::B: return EventKind::Backward;
    case Timed::I: return EventKind::BackwardInput;
    case Timed::W: return EventKind::BackwardWeight;
    case Timed::Load: return EventKind::Load;
    case Timed::ReduceGrad: return EventKind::ReduceGrad;
    case Timed::OptimizerSynced:
    case Timed::OptimizerUnsynced:
    case Timed::Optimizer: return EventKind::Optimizer;
    case Timed::ReduceTiedSynced:
    case Timed::ReduceTiedUnsynced:
    case Timed::ReduceTied: return EventKind::ReduceTied;
    case Timed::Send: return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

// The names come from the kinds' table (event_kind.cpp), the one place that spells them.
std::string action_name(Timed timed) {
  const auto kind = kind_of_timed(timed);
  return kind ? std::string(traces::event_kind_name(*kind)) : std::string("SEND");
}

std::string action_name(Collective collective) {
  return action_name(collective == Collective::Optimizer ? Timed::Optimizer : Timed::ReduceTied);
}

int stage_count(const traces::Trace& trace) {
  int highest = -1;
  for (const auto& e : trace.events) highest = std::max(highest, e.stage);
  return std::max(trace.meta.num_stages, highest + 1);
}

namespace {

using traces::EventKind;
using traces::Lane;
using traces::TraceEvent;

// The operations timed event by event (optimizer steps and tied reductions: collect_collective_waits).
std::optional<Timed> timed_of(EventKind kind) {
  switch (kind) {
    case EventKind::Forward: return Timed::F;
    case EventKind::Backward: return Timed::B;
    case EventKind::BackwardInput: return Timed::I;
    case EventKind::BackwardWeight: return Timed::W;
    case EventKind::Load: return Timed::Load;
    case EventKind::ReduceGrad: return Timed::ReduceGrad;
    default: return std::nullopt;
  }
}

bool on_main_thread(const TraceEvent& e) {
  // The program's thread starts every event; only the send lane's ends come from elsewhere. An
  // all-to-all runs inside a forward or backward (collect_rank_all_to_all), not between them.
  if (traces::is_all_to_all(e.kind)) return false;
  return e.lane == static_cast<int>(Lane::Compute) || e.lane == static_cast<int>(Lane::Recv) ||
         e.lane == static_cast<int>(Lane::Collective) || e.lane == static_cast<int>(Lane::Send);
}

// The memory counter of one rank as a step function of time.
class MemoryTimeline {
 public:
  MemoryTimeline(const traces::Trace& trace, int rank) {
    for (const auto& m : trace.memory)
      if (m.rank == rank) samples_.push_back({m.ts_us, m.bytes});
    std::stable_sort(samples_.begin(), samples_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  bool empty() const { return samples_.empty(); }
  // The value held just before `t_us` (the last sample strictly before it; the first sample
  // when there is none). Strictly: what an op allocates at its very start is its own.
  std::int64_t before(double t_us) const {
    auto it = std::lower_bound(samples_.begin(), samples_.end(), t_us,
                               [](const std::pair<double, std::int64_t>& s, double t) { return s.first < t; });
    if (it == samples_.begin()) return samples_.front().second;
    return std::prev(it)->second;
  }
  std::int64_t first() const { return samples_.front().second; }

 private:
  std::vector<std::pair<double, std::int64_t>> samples_;
};

// The stage that sent the data a receive takes (the default peers of SPEC.md section 3).
int sender_stage_of_receive(const TraceEvent& e) { return carries_activation(e.kind) ? e.stage - 1 : e.stage + 1; }

// The events of a rank's program thread in program order.
std::vector<const TraceEvent*> main_thread_events(const traces::Trace& trace, int rank) {
  std::vector<const TraceEvent*> main;
  for (const auto& e : trace.events)
    if (e.rank == rank && on_main_thread(e)) main.push_back(&e);
  // At equal start times (simulated traces) the program order is: a send is posted, a receive
  // is taken, then computation starts, then the end-of-batch collectives.
  auto tie_order = [](const TraceEvent* e) {
    switch (static_cast<Lane>(e->lane)) {
      case Lane::Send: return 0;
      case Lane::Recv: return 1;
      case Lane::Compute: return 2;
      case Lane::Collective: return 3;
      case Lane::AllToAll: break;  // not on the program's thread (on_main_thread)
    }
    return 4;
  };
  std::stable_sort(main.begin(), main.end(), [&](const TraceEvent* a, const TraceEvent* b) {
    if (a->ts_us != b->ts_us) return a->ts_us < b->ts_us;
    return tie_order(a) < tie_order(b);
  });
  return main;
}

// When the program reached an event: its start, less the wait for received data that a torch
// computation's span began with (its event starts at the data's arrival).
double reached_us(const traces::Trace& trace, const TraceEvent& e) {
  if (e.lane != static_cast<int>(Lane::Compute)) return e.ts_us;
  const std::string* args = trace.args_of(static_cast<std::size_t>(&e - trace.events.data()));
  if (!args) return e.ts_us;
  const auto parsed = nlohmann::json::parse(*args, nullptr, false);
  const auto wait = parsed.is_object() ? parsed.find(traces::kDataWaitArg) : parsed.end();
  return wait != parsed.end() && wait->is_number() ? e.ts_us - wait->get<double>() : e.ts_us;
}

// The memory counter's changes over one rank's operations, keyed by (stage, micro-batch):
// what the forward side and the backward side of each micro-batch allocated.
struct RankMemoryDeltas {
  std::map<std::pair<int, int>, std::int64_t> forward, backward, input;
  std::map<int, std::vector<std::pair<double, int>>> backward_order;  // stage -> (start, micro-batch)
  std::map<int, std::vector<std::int64_t>> optimizer;

  void add(const TraceEvent& e, std::int64_t delta) {
    const std::pair<int, int> key{e.stage, e.micro_batch};
    switch (e.kind) {
      case EventKind::Load:
      case EventKind::RecvActivation:
      case EventKind::Forward: forward[key] += delta; break;
      case EventKind::RecvGrad:
      case EventKind::BackwardInput:
        backward[key] += delta;
        input[key] += delta;
        break;
      case EventKind::Backward:
      case EventKind::BackwardWeight:
        backward[key] += delta;
        backward_order[e.stage].push_back({e.ts_us, e.micro_batch});
        break;
      case EventKind::Optimizer: optimizer[e.stage].push_back(delta); break;
      default: break;
    }
  }
};

// A rank's memory samples from its deltas: each micro-batch's forward, input and backward
// footprints, the gradient buffer, and the memory held from the start shared by its stages.
void collect_rank_memory(const MeasuredTrace& mt, int rank, const MemoryTimeline& memory, RankMemoryDeltas& deltas,
                         Collected& out) {
  for (const auto& [key, delta] : deltas.forward)
    out.memory_b[{key.first, Footprint::Forward}].push_back({static_cast<double>(delta), &mt.source, rank, key.second});
  for (const auto& [key, delta] : deltas.input)
    out.memory_b[{key.first, Footprint::Input}].push_back({static_cast<double>(delta), &mt.source, rank, key.second});
  // The first weight gradient of a stage also allocates the gradient buffer: its excess over
  // the other micro-batches' backwards is the buffer.
  for (auto& [stage, order] : deltas.backward_order) {
    std::sort(order.begin(), order.end());
    std::vector<double> later;
    for (std::size_t k = 1; k < order.size(); ++k) {
      const std::int64_t d = deltas.backward[{stage, order[k].second}];
      later.push_back(static_cast<double>(d));
      out.memory_b[{stage, Footprint::Backward}].push_back({static_cast<double>(d), &mt.source, rank, order[k].second});
    }
    const double first = static_cast<double>(deltas.backward[{stage, order.front().second}]);
    if (!later.empty()) {
      out.memory_b[{stage, Footprint::GradBuffer}].push_back(
          {first - median_of(later), &mt.source, rank, order.front().second});
    } else if (auto it = deltas.optimizer.find(stage); it != deltas.optimizer.end() && !it->second.empty()) {
      out.memory_b[{stage, Footprint::GradBuffer}].push_back(
          {-static_cast<double>(it->second.front()), &mt.source, rank, -1});
      out.memory_b[{stage, Footprint::Backward}].push_back(
          {first + static_cast<double>(it->second.front()), &mt.source, rank, order.front().second});
    }
  }
  if (memory.empty()) return;
  std::vector<int> stages;
  for (const auto& e : mt.trace.events)
    if (e.rank == rank && e.stage >= 0 && e.lane == static_cast<int>(Lane::Compute)) stages.push_back(e.stage);
  std::sort(stages.begin(), stages.end());
  stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
  // The memory at the start of the iteration (weights, optimizer state, work buffers) is
  // shared evenly by the stages of the rank.
  for (int s : stages)
    out.memory_b[{s, Footprint::Static}].push_back(
        {static_cast<double>(memory.first()) / static_cast<double>(stages.size()), &mt.source, rank, -1});
}

void collect_rank(const MeasuredTrace& mt, int rank, const std::map<const TraceEvent*, double>& exchange_us,
                  Collected& out) {
  const traces::Trace& trace = mt.trace;
  const std::vector<const TraceEvent*> main = main_thread_events(trace, rank);
  const MemoryTimeline memory(trace, rank);
  const double infinity = std::numeric_limits<double>::infinity();
  const bool torch = trace.meta.run.torch_profiler.has_value();
  RankMemoryDeltas deltas;
  // A pass's time is taken net of the all-to-all it holds (Profile::all_to_all adds it back).
  const std::map<const TraceEvent*, double> all_to_all_us = collect_rank_all_to_all(mt, rank, exchange_us, out);
  // And net of its experts' calls (Profile::expert_compute puts back those of the E simulated).
  const std::map<const TraceEvent*, double> expert_us = collect_rank_expert_calls(mt, rank, out);

  for (std::size_t i = 0; i < main.size(); ++i) {
    const TraceEvent& e = *main[i];
    const double next_start_us = i + 1 < main.size() ? reached_us(trace, *main[i + 1]) : infinity;
    const auto inside = all_to_all_us.find(&e);
    const auto experts = expert_us.find(&e);
    const double own_us = e.dur_us - (inside == all_to_all_us.end() ? 0.0 : inside->second) -
                          (experts == expert_us.end() ? 0.0 : experts->second);
    const Sample sample{own_us * 1e-6, &mt.source, rank, e.micro_batch};
    if (e.lane == static_cast<int>(Lane::Send)) {
      // torch's SEND span is the program's time for the send, all of it (its tensors, then the
      // isend), whatever comes next.
      if (torch) {
        out.times_s[{e.stage, Timed::Send}].push_back(sample);
        if (e.kind == EventKind::SendActivation && e.bytes > 0) out.activation_bytes[e.stage].push_back(e.bytes);
        continue;
      }
      // A send occupies the program from the end of the instruction before it (its packing
      // comes before its event) until the next instruction starts. Only a computation or a
      // collective next tells when that was: a receive's event may start when its data
      // arrives instead of when the program reached it (simulated traces).
      const bool next_tells = i + 1 < main.size() && (main[i + 1]->lane == static_cast<int>(Lane::Compute) ||
                                                      main[i + 1]->lane == static_cast<int>(Lane::Collective));
      const bool previous_tells = i > 0 && main[i - 1]->lane != static_cast<int>(Lane::Send);
      if (next_tells && previous_tells)
        out.send_spans[e.stage].push_back(
            {(next_start_us - main[i - 1]->end_us()) * 1e-6, &mt.source, rank, e.micro_batch});
      if (e.kind == EventKind::SendActivation && e.bytes > 0) out.activation_bytes[e.stage].push_back(e.bytes);
      continue;
    }
    // The program's own time between this instruction and the next (a send next has its
    // packing before its event: not a gap of this instruction).
    if (i + 1 < main.size() && main[i + 1]->lane != static_cast<int>(Lane::Send) && next_start_us >= e.end_us())
      out.instruction_gaps.push_back({(next_start_us - e.end_us()) * 1e-6, &mt.source, rank, e.micro_batch});
    if (e.stage < 0) continue;
    // Optimizer steps and tied reductions: collect_collective_waits (the first of a rank may
    // wait for the others).
    if (const auto timed = timed_of(e.kind)) out.times_s[{e.stage, *timed}].push_back(sample);
    if (memory.empty()) continue;
    // pprun samples the counter after each instruction, so an op's samples lie between its
    // start and the next instruction's start.
    deltas.add(e, memory.before(next_start_us) - memory.before(e.ts_us));
  }
  collect_rank_memory(mt, rank, memory, deltas, out);
}

// Collectives that may wait for every member: the optimizer step (clipping by the global
// gradient norm: an all-reduce over the pipeline in each rank's first optimizer step) and the
// tied-gradient all-reduce (the ranks of the first and the last stage). With the wait, the
// first such event of a rank lasts from when the rank got there until the last member got
// there plus its own time. The trace shows the wait when the first member to get there
// finished after the last one got there, two of that one's own durations later, and rules it
// out when it finished before the last got there. An executor that records its clipping
// (the run description's gradient_clipping: the maximum norm, 0 for none) says so for the
// optimizer.
// Both readings of the durations are kept (Timed::OptimizerSynced, ...Unsynced);
// estimate_collective_waits takes the one that all traces together support.
void collect_collective_waits(const MeasuredTrace& mt, Collective collective, int num_stages, Collected& out) {
  const EventKind kind = collective == Collective::Optimizer ? EventKind::Optimizer : EventKind::ReduceTied;
  std::map<int, std::vector<const TraceEvent*>> by_rank;
  for (const auto& e : mt.trace.events) {
    if (e.kind != kind || e.stage < 0) continue;
    if (collective == Collective::ReduceTied && e.stage != 0 && e.stage != num_stages - 1)
      continue;  // holds no tied weights
    by_rank[e.rank].push_back(&e);
  }
  if (by_rank.empty()) return;
  for (auto& [rank, events] : by_rank)
    std::stable_sort(events.begin(), events.end(),
                     [](const TraceEvent* a, const TraceEvent* b) { return a->ts_us < b->ts_us; });
  const TraceEvent* earliest = nullptr;
  const TraceEvent* latest = nullptr;
  for (const auto& [rank, events] : by_rank) {
    if (!earliest || events.front()->ts_us < earliest->ts_us) earliest = events.front();
    if (!latest || events.front()->ts_us > latest->ts_us) latest = events.front();
  }
  const double last_arrival_us = latest->ts_us;
  bool waits = false;
  const auto& clipping = mt.trace.meta.run.gradient_clipping;
  if (collective == Collective::Optimizer && clipping) {
    waits = by_rank.size() >= 2 && *clipping > 0;
    ++(waits ? out.sync_evidence[collective] : out.no_sync_evidence[collective]);
  } else if (by_rank.size() >= 2) {
    if (earliest->end_us() < last_arrival_us) {
      ++out.no_sync_evidence[collective];
    } else {
      waits = true;
      if (last_arrival_us - earliest->ts_us >= 2 * latest->dur_us) ++out.sync_evidence[collective];
    }
  }
  const bool optimizer = collective == Collective::Optimizer;
  const Timed synced = optimizer ? Timed::OptimizerSynced : Timed::ReduceTiedSynced;
  const Timed unsynced = optimizer ? Timed::OptimizerUnsynced : Timed::ReduceTiedUnsynced;
  for (const auto& [rank, events] : by_rank)
    for (std::size_t k = 0; k < events.size(); ++k) {
      const TraceEvent& e = *events[k];
      const double synced_start_us = k == 0 && waits ? std::max(e.ts_us, last_arrival_us) : e.ts_us;
      out.times_s[{e.stage, synced}].push_back(
          {std::max(0.0, e.end_us() - synced_start_us) * 1e-6, &mt.source, rank, -1});
      out.times_s[{e.stage, unsynced}].push_back({e.dur_us * 1e-6, &mt.source, rank, -1});
    }
}

// A torch receive's post duration (its args' post_us), or -1 for other receives.
double torch_receive_post_us(const traces::Trace& trace, const TraceEvent& recv) {
  if (recv.category != traces::kPostedReceiveCategory && recv.category != traces::kWaitedReceiveCategory) return -1;
  const std::string* args = trace.args_of(static_cast<std::size_t>(&recv - trace.events.data()));
  if (!args) return -1;
  const auto parsed = nlohmann::json::parse(*args, nullptr, false);
  const auto post = parsed.is_object() ? parsed.find(traces::kReceivePostArg) : parsed.end();
  return post != parsed.end() && post->is_number() ? post->get<double>() : -1;
}

void collect_transfers(const MeasuredTrace& mt, Collected& out) {
  // Sends and receives between two stages pair up in order (SPEC.md section 3).
  // Keyed by (activations or gradients, sending stage, micro-batch).
  std::map<std::tuple<bool, int, int>, std::vector<const TraceEvent*>> sends, recvs;
  for (const auto& e : mt.trace.events) {
    if (is_send(e.kind))
      sends[{carries_activation(e.kind), e.stage, e.micro_batch}].push_back(&e);
    else if (is_receive(e.kind))
      recvs[{carries_activation(e.kind), sender_stage_of_receive(e), e.micro_batch}].push_back(&e);
  }
  for (auto& [key, sent] : sends) {
    auto it = recvs.find(key);
    if (it == recvs.end()) continue;
    auto& received = it->second;
    auto by_start = [](const TraceEvent* a, const TraceEvent* b) { return a->ts_us < b->ts_us; };
    std::sort(sent.begin(), sent.end(), by_start);
    std::sort(received.begin(), received.end(), by_start);
    for (std::size_t k = 0; k < std::min(sent.size(), received.size()); ++k)
      out.transfers.push_back({static_cast<double>(std::max<std::int64_t>(sent[k]->bytes, 0)), sent[k]->ts_us,
                               sent[k]->end_us(), received[k], &mt.source, sent[k]->rank,
                               received[k]->category != traces::kPostedReceiveCategory,
                               torch_receive_post_us(mt.trace, *received[k])});
  }
}

// Whether each transfer's receive began while a message the other way (from the receiving rank
// to the sender, in the same trace) had been posted and not yet received: traffic both ways on
// the pair (StageRuntimeEffects::recv_contended_s). Per (trace, sender, receiver) the messages ordered by
// post, with the latest receive end among those posted so far: one lookup per receive.
}  // namespace

std::vector<char> receives_against_traffic(const std::vector<Collected::TransferPair>& transfers) {
  using Pair = std::tuple<const std::string*, int, int>;  // trace, from rank, to rank
  std::map<Pair, std::vector<std::pair<double, double>>> posted_then_received;
  for (const auto& t : transfers)
    posted_then_received[{t.source, t.from_rank, t.recv->rank}].push_back({t.send_start_us, t.recv->end_us()});
  for (auto& [pair, messages] : posted_then_received) {
    std::sort(messages.begin(), messages.end());
    for (std::size_t i = 1; i < messages.size(); ++i)
      messages[i].second = std::max(messages[i].second, messages[i - 1].second);
  }
  std::vector<char> contended(transfers.size(), 0);
  for (std::size_t i = 0; i < transfers.size(); ++i) {
    const auto& t = transfers[i];
    if (t.from_rank == t.recv->rank) continue;
    const auto it = posted_then_received.find({t.source, t.recv->rank, t.from_rank});
    if (it == posted_then_received.end()) continue;
    const auto& messages = it->second;
    const double begin_us = t.recv->ts_us;
    const auto after = std::upper_bound(messages.begin(), messages.end(),
                                        std::make_pair(begin_us, std::numeric_limits<double>::infinity()));
    contended[i] = after != messages.begin() && std::prev(after)->second > begin_us;
  }
  return contended;
}

namespace {

void collect_probe(const MeasuredTrace& mt, Collected& out) {
  if (!mt.trace.meta.run.backward_split_probe) return;
  const auto& probe = *mt.trace.meta.run.backward_split_probe;
  for (std::size_t i = 0; i < probe.size(); ++i) {
    const traces::BackwardSplitProbe& entry = probe[i];
    const std::string where = fmt::format("{}: otherData.backward_split_probe[{}]", mt.source, i);
    auto checked = [&](const std::vector<double>& values, const std::string& at, const char* field) {
      for (const double v : values)
        if (!(v >= 0)) throw UsageError(at + "." + field + ": must hold numbers >= 0");
      return values;
    };
    auto take_shares = [&](const traces::BackwardSplitTimes& from, const std::string& at,
                           Collected::ProbeShares& into) {
      const std::vector<double>& full = checked(from.full_us, at, "full_us");
      const double input = median_of(checked(from.input_us, at, "input_us"));
      const double weight = median_of(checked(from.weight_us, at, "weight_us"));
      into.samples += full.size();
      if (const double full_median = median_of(full); full_median > 0) {
        into.input.push_back(input / full_median);
        into.weight.push_back(weight / full_median);
      }
    };
    take_shares(entry.own, where, out.probe[entry.stage]);
    if (entry.inner) take_shares(*entry.inner, where + ".inner", out.inner_probe[entry.stage]);
  }
}

// The CPU time of each rank's transport threads in the step (pprun's
// run description's transport_cpu_s) over the rank's messages: on a core shared with the computation,
// what each message costs it. Reported; the simulator does not use it yet.
void collect_transport_cpu(const MeasuredTrace& mt, Collected& c) {
  if (!mt.trace.meta.run.transport_cpu_s) return;
  const std::vector<double>& cpu = *mt.trace.meta.run.transport_cpu_s;
  std::map<int, int> messages;
  for (const auto& e : mt.trace.events)
    if (e.lane == static_cast<int>(Lane::Send) || e.lane == static_cast<int>(Lane::Recv)) ++messages[e.rank];
  for (std::size_t rank = 0; rank < cpu.size(); ++rank) {
    const int n = messages[static_cast<int>(rank)];
    if (n > 0) c.transport_cpu_per_message.push_back({cpu[rank] / n, &mt.source, static_cast<int>(rank), -1});
  }
}

}  // namespace

void collect_trace(const MeasuredTrace& mt, int stages, Collected& out) {
  if (!mt.trace.meta.schedule.empty()) out.schedules.insert(mt.trace.meta.schedule);
  if (mt.trace.meta.num_micro_batches > 0) out.micro_batch_counts.insert(mt.trace.meta.num_micro_batches);
  if (const auto& data_parallel = mt.trace.meta.run.data_parallel) out.data_parallel = std::max(1, *data_parallel);
  const std::map<const TraceEvent*, double> exchange_us = all_to_all_exchange_times(mt.trace);
  collect_expert_layers(mt.trace.meta.run, out);
  collect_expert_call_probe(mt, out);
  for (int rank = 0; rank < mt.trace.rank_count(); ++rank) collect_rank(mt, rank, exchange_us, out);
  collect_transfers(mt, out);
  for (const Collective collective : kCollectives) collect_collective_waits(mt, collective, stages, out);
  collect_probe(mt, out);
  if (const double span_us = traces::event_span_us(mt.trace), step_us = traces::iteration_time_us(mt.trace);
      step_us != span_us)
    out.step_overheads.push_back({std::max(0.0, step_us - span_us) * 1e-6, &mt.source, -1, -1});
  collect_transport_cpu(mt, out);
}

}  // namespace pipescope::sim::calibration
