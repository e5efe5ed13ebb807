#include "pipescope/sim/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/partitioner.hpp"
#include "pipescope/traces/compare.hpp"

namespace pipescope::sim {
namespace {

using traces::Lane;
using traces::TraceEvent;

// Where one sample came from, so an outlier can be named.
struct Sample {
  double value = 0;
  const std::string* source = nullptr;
  int rank = -1;
  int micro_batch = -1;
};

using Samples = std::vector<Sample>;

std::vector<double> values_of(const Samples& samples) {
  std::vector<double> v;
  v.reserve(samples.size());
  for (const Sample& s : samples) v.push_back(s.value);
  return v;
}

// Everything measured, keyed by (stage, what).
struct Collected {
  std::map<std::pair<int, std::string>, Samples> times_s;    // F, B, I, W, LOAD, OPTIMIZER, REDUCE_GRAD, REDUCE_TIED, SEND, RECV
  std::map<std::pair<int, std::string>, Samples> memory_b;   // forward, backward, input (I), grad_buffer, static
  std::map<int, std::vector<std::int64_t>> activation_bytes; // per sending stage
  struct TransferPair {
    double bytes = 0;
    double send_start_us = 0;
    double send_end_us = 0;
    const TraceEvent* recv = nullptr;
    const std::string* source = nullptr;
    int from_rank = -1;  // the sender
  };
  std::vector<TransferPair> transfers;
  // Per stage, from every probe (one per traced run): the input and weight halves' medians
  // over its full backward's median. Runs differ in speed from one another, and the shares
  // are only comparable within one run.
  struct ProbeShares {
    std::vector<double> input, weight;
    std::size_t samples = 0;  // full backwards timed, over all probes
  };
  std::map<int, ProbeShares> probe;
  // The first stage's layers after its first, timed as an inner stage runs them.
  std::map<int, ProbeShares> inner_probe;
  std::set<std::string> schedules;
  std::set<int> micro_batch_counts;
  int data_parallel = 1;
  // Program time between instructions: from the end of one main-thread event to the start
  // of the next, neither a send.
  Samples instruction_gaps;
  // Per trace that recorded its step's wall time: that time less the span of its events.
  Samples step_overheads;
  // Per trace and rank that recorded its transport threads' CPU time (otherData.transport_cpu_s):
  // that time over the rank's messages (sends and receives).
  Samples transport_cpu_per_message;
  // Per sending stage: from the end of the instruction before a send to the start of the one
  // after it (one overhead of each, and the send's packing and posting).
  std::map<int, Samples> send_spans;
  // Per collective (OPTIMIZER, REDUCE_TIED): traces whose first such events show (or rule
  // out) a wait for every member rank.
  std::map<std::string, int> sync_evidence, no_sync_evidence;
};

bool on_main_thread(const TraceEvent& e) {
  // The program's thread starts every event; only the send lane's ends come from elsewhere.
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

int stage_count(const traces::Trace& trace) {
  int highest = -1;
  for (const auto& e : trace.events) highest = std::max(highest, e.stage);
  return std::max(trace.meta.num_stages, highest + 1);
}

// The stage that sent the data a receive takes (the default peers of SPEC.md section 3).
int sender_stage_of_receive(const TraceEvent& e) { return e.name == "RECV_F" ? e.stage - 1 : e.stage + 1; }

void collect_rank(const MeasuredTrace& mt, int rank, Collected& out) {
  const traces::Trace& trace = mt.trace;
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
    }
    return 4;
  };
  std::stable_sort(main.begin(), main.end(), [&](const TraceEvent* a, const TraceEvent* b) {
    if (a->ts_us != b->ts_us) return a->ts_us < b->ts_us;
    return tie_order(a) < tie_order(b);
  });
  const MemoryTimeline memory(trace, rank);
  const double infinity = std::numeric_limits<double>::infinity();

  // Memory delta of each micro-batch's forward side and backward side, per stage.
  std::map<std::pair<int, int>, std::int64_t> forward_delta, backward_delta, input_delta;
  std::map<int, std::vector<std::pair<double, int>>> backward_order;  // stage -> (start, micro-batch)
  std::map<int, std::vector<std::int64_t>> optimizer_delta;

  for (std::size_t i = 0; i < main.size(); ++i) {
    const TraceEvent& e = *main[i];
    const double next_start_us = i + 1 < main.size() ? main[i + 1]->ts_us : infinity;
    const Sample sample{e.dur_us * 1e-6, &mt.source, rank, e.micro_batch};
    if (e.lane == static_cast<int>(Lane::Send)) {
      // A send occupies the program from the end of the instruction before it (its packing
      // comes before its event) until the next instruction starts. Only a computation or a
      // collective next tells when that was: a receive's event may start when its data
      // arrives instead of when the program reached it (simulated traces).
      const bool next_tells = i + 1 < main.size() && (main[i + 1]->lane == static_cast<int>(Lane::Compute) ||
                                                      main[i + 1]->lane == static_cast<int>(Lane::Collective));
      const bool previous_tells = i > 0 && main[i - 1]->lane != static_cast<int>(Lane::Send);
      if (next_tells && previous_tells)
        out.send_spans[e.stage].push_back({(next_start_us - main[i - 1]->end_us()) * 1e-6, &mt.source, rank, e.micro_batch});
      if (e.name == "SEND_F" && e.bytes > 0) out.activation_bytes[e.stage].push_back(e.bytes);
      continue;
    }
    // The program's own time between this instruction and the next (a send next has its
    // packing before its event: not a gap of this instruction).
    if (i + 1 < main.size() && main[i + 1]->lane != static_cast<int>(Lane::Send) && next_start_us >= e.end_us())
      out.instruction_gaps.push_back({(next_start_us - e.end_us()) * 1e-6, &mt.source, rank, e.micro_batch});
    if (e.stage < 0) continue;
    // Optimizer steps and tied reductions: collect_collective_waits (the first of a rank may
    // wait for the others).
    static const std::set<std::string> timed = {"F", "B", "I", "W", "LOAD", "REDUCE_GRAD"};
    if (timed.count(e.name)) out.times_s[{e.stage, e.name}].push_back(sample);
    if (memory.empty()) continue;
    // pprun samples the counter after each instruction, so an op's samples lie between its
    // start and the next instruction's start.
    const std::int64_t delta = memory.before(next_start_us) - memory.before(e.ts_us);
    const std::pair<int, int> key{e.stage, e.micro_batch};
    if (e.name == "LOAD" || e.name == "RECV_F" || e.name == "F") {
      forward_delta[key] += delta;
    } else if (e.name == "RECV_B" || e.name == "B" || e.name == "I" || e.name == "W") {
      backward_delta[key] += delta;
      if (e.name == "RECV_B" || e.name == "I") input_delta[key] += delta;
      if (e.name == "B" || e.name == "W") backward_order[e.stage].push_back({e.ts_us, e.micro_batch});
    } else if (e.name == "OPTIMIZER") {
      optimizer_delta[e.stage].push_back(delta);
    }
  }

  for (const auto& [key, delta] : forward_delta)
    out.memory_b[{key.first, "forward"}].push_back({static_cast<double>(delta), &mt.source, rank, key.second});
  for (const auto& [key, delta] : input_delta)
    out.memory_b[{key.first, "input"}].push_back({static_cast<double>(delta), &mt.source, rank, key.second});
  // The first weight gradient of a stage also allocates the gradient buffer: its excess over
  // the other micro-batches' backwards is the buffer.
  for (auto& [stage, order] : backward_order) {
    std::sort(order.begin(), order.end());
    std::vector<double> later;
    for (std::size_t k = 1; k < order.size(); ++k) {
      const std::int64_t d = backward_delta[{stage, order[k].second}];
      later.push_back(static_cast<double>(d));
      out.memory_b[{stage, "backward"}].push_back({static_cast<double>(d), &mt.source, rank, order[k].second});
    }
    const double first = static_cast<double>(backward_delta[{stage, order.front().second}]);
    if (!later.empty()) {
      out.memory_b[{stage, "grad_buffer"}].push_back({first - median_of(later), &mt.source, rank, order.front().second});
    } else if (auto it = optimizer_delta.find(stage); it != optimizer_delta.end() && !it->second.empty()) {
      out.memory_b[{stage, "grad_buffer"}].push_back({-static_cast<double>(it->second.front()), &mt.source, rank, -1});
      out.memory_b[{stage, "backward"}].push_back({first + static_cast<double>(it->second.front()), &mt.source, rank,
                                                   order.front().second});
    }
  }
  if (!memory.empty()) {
    std::vector<int> stages;
    for (const auto& e : trace.events)
      if (e.rank == rank && e.stage >= 0 && e.lane == static_cast<int>(Lane::Compute)) stages.push_back(e.stage);
    std::sort(stages.begin(), stages.end());
    stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
    // The memory at the start of the iteration (weights, optimizer state, work buffers) is
    // shared evenly by the stages of the rank.
    for (int s : stages)
      out.memory_b[{s, "static"}].push_back(
          {static_cast<double>(memory.first()) / static_cast<double>(stages.size()), &mt.source, rank, -1});
  }
}

// Collectives that may wait for every member: the optimizer step (clipping by the global
// gradient norm: an all-reduce over the pipeline in each rank's first optimizer step) and the
// tied-gradient all-reduce (the ranks of the first and the last stage). With the wait, the
// first such event of a rank lasts from when the rank got there until the last member got
// there plus its own time. The trace shows the wait when the first member to get there
// finished after the last one got there, two of that one's own durations later, and rules it
// out when it finished before the last got there. An executor that records its clipping
// (otherData "gradient_clipping": the maximum norm, 0 for none) says so for the optimizer.
// Both readings of the durations are kept (NAME_SYNCED, NAME_UNSYNCED); calibrate() takes the
// one that all traces together support.
void collect_collective_waits(const MeasuredTrace& mt, const std::string& name, int num_stages, Collected& out) {
  std::map<int, std::vector<const TraceEvent*>> by_rank;
  for (const auto& e : mt.trace.events) {
    if (e.name != name || e.stage < 0) continue;
    if (name == "REDUCE_TIED" && e.stage != 0 && e.stage != num_stages - 1) continue;  // holds no tied weights
    by_rank[e.rank].push_back(&e);
  }
  if (by_rank.empty()) return;
  for (auto& [rank, events] : by_rank)
    std::stable_sort(events.begin(), events.end(), [](const TraceEvent* a, const TraceEvent* b) { return a->ts_us < b->ts_us; });
  const TraceEvent* earliest = nullptr;
  const TraceEvent* latest = nullptr;
  for (const auto& [rank, events] : by_rank) {
    if (!earliest || events.front()->ts_us < earliest->ts_us) earliest = events.front();
    if (!latest || events.front()->ts_us > latest->ts_us) latest = events.front();
  }
  const double last_arrival_us = latest->ts_us;
  bool waits = false;
  const auto& clipping = mt.trace.meta.run.gradient_clipping;
  if (name == "OPTIMIZER" && clipping) {
    waits = by_rank.size() >= 2 && *clipping > 0;
    ++(waits ? out.sync_evidence[name] : out.no_sync_evidence[name]);
  } else if (by_rank.size() >= 2) {
    if (earliest->end_us() < last_arrival_us) {
      ++out.no_sync_evidence[name];
    } else {
      waits = true;
      if (last_arrival_us - earliest->ts_us >= 2 * latest->dur_us) ++out.sync_evidence[name];
    }
  }
  for (const auto& [rank, events] : by_rank)
    for (std::size_t k = 0; k < events.size(); ++k) {
      const TraceEvent& e = *events[k];
      const double synced_start_us = k == 0 && waits ? std::max(e.ts_us, last_arrival_us) : e.ts_us;
      out.times_s[{e.stage, name + "_SYNCED"}].push_back(
          {std::max(0.0, e.end_us() - synced_start_us) * 1e-6, &mt.source, rank, -1});
      out.times_s[{e.stage, name + "_UNSYNCED"}].push_back({e.dur_us * 1e-6, &mt.source, rank, -1});
    }
}

void collect_transfers(const MeasuredTrace& mt, Collected& out) {
  // Sends and receives between two stages pair up in order (SPEC.md section 3).
  std::map<std::tuple<std::string, int, int>, std::vector<const TraceEvent*>> sends, recvs;
  for (const auto& e : mt.trace.events) {
    if (e.name == "SEND_F" || e.name == "SEND_B")
      sends[{e.name.substr(5), e.stage, e.micro_batch}].push_back(&e);
    else if (e.name == "RECV_F" || e.name == "RECV_B")
      recvs[{e.name.substr(5), sender_stage_of_receive(e), e.micro_batch}].push_back(&e);
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
                               sent[k]->end_us(), received[k], &mt.source, sent[k]->rank});
  }
}

// Whether each transfer's receive began while a message the other way (from the receiving rank
// to the sender, in the same trace) had been posted and not yet received: traffic both ways on
// the pair (StageCost::recv_contended_s). Per (trace, sender, receiver) the messages ordered by
// post, with the latest receive end among those posted so far: one lookup per receive.
std::vector<char> receives_against_traffic(const std::vector<Collected::TransferPair>& transfers) {
  using Pair = std::tuple<const std::string*, int, int>;  // trace, from rank, to rank
  std::map<Pair, std::vector<std::pair<double, double>>> posted_then_received;
  for (const auto& t : transfers)
    posted_then_received[{t.source, t.from_rank, t.recv->rank}].push_back({t.send_start_us, t.recv->end_us()});
  for (auto& [pair, messages] : posted_then_received) {
    std::sort(messages.begin(), messages.end());
    for (std::size_t i = 1; i < messages.size(); ++i) messages[i].second = std::max(messages[i].second, messages[i - 1].second);
  }
  std::vector<char> contended(transfers.size(), 0);
  for (std::size_t i = 0; i < transfers.size(); ++i) {
    const auto& t = transfers[i];
    if (t.from_rank == t.recv->rank) continue;
    const auto it = posted_then_received.find({t.source, t.recv->rank, t.from_rank});
    if (it == posted_then_received.end()) continue;
    const auto& messages = it->second;
    const double begin_us = t.recv->ts_us;
    const auto after = std::upper_bound(messages.begin(), messages.end(), std::make_pair(begin_us, std::numeric_limits<double>::infinity()));
    contended[i] = after != messages.begin() && std::prev(after)->second > begin_us;
  }
  return contended;
}

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
    auto take_shares = [&](const traces::BackwardSplitTimes& from, const std::string& at, Collected::ProbeShares& into) {
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
// otherData.transport_cpu_s) over the rank's messages: on a core shared with the computation,
// what each message costs it. Reported; the simulator does not use it yet.
void collect_transport_cpu(const MeasuredTrace& mt, Collected& c) {
  if (!mt.trace.meta.run.transport_cpu_s) return;
  const std::vector<double>& cpu = *mt.trace.meta.run.transport_cpu_s;
  std::map<int, int> messages;
  for (const auto& e : mt.trace.events)
    if (e.lane == static_cast<int>(Lane::Send) || e.lane == static_cast<int>(Lane::Recv)) ++messages[e.rank];
  for (std::size_t rank = 0; rank < cpu.size(); ++rank) {
    const int n = messages[static_cast<int>(rank)];
    if (n > 0)
      c.transport_cpu_per_message.push_back({cpu[rank] / n, &mt.source, static_cast<int>(rank), -1});
  }
}

class Summariser {
 public:
  Summariser(Calibration& result, const CalibrationOptions& options) : result_(result), options_(options) {}

  // The median of `samples` (of durations: the chosen statistic), recorded as a quantity with
  // its median, mean, MAD and range; far samples become outliers.
  double estimate(const std::string& name, const std::string& unit, const Samples& samples) {
    const std::vector<double> values = values_of(samples);
    CalibratedQuantity q;
    q.name = name;
    q.unit = unit;
    q.samples = values.size();
    if (!values.empty()) {
      q.median = median_of(values);
      double sum = 0;
      for (double v : values) sum += v;
      q.mean = sum / static_cast<double>(values.size());
      q.mad = median_absolute_deviation(values);
      q.min = *std::min_element(values.begin(), values.end());
      q.max = *std::max_element(values.begin(), values.end());
      const double limit = std::max(options_.outlier_mads * 1.4826 * q.mad, options_.outlier_min_fraction * std::fabs(q.median));
      for (const Sample& s : samples)
        if (std::fabs(s.value - q.median) > limit)
          result_.outliers.push_back({name, s.source ? *s.source : std::string(), s.rank, s.micro_batch, s.value, q.median});
    }
    result_.quantities.push_back(q);
    return unit == "s" && options_.duration_statistic == CalibrationOptions::Statistic::Mean ? q.mean : q.median;
  }

  // The chosen statistic of some durations, not recorded (the points of a fit).
  double duration(const std::vector<double>& values_s) const {
    if (options_.duration_statistic == CalibrationOptions::Statistic::Median || values_s.empty()) return median_of(values_s);
    double sum = 0;
    for (double v : values_s) sum += v;
    return sum / static_cast<double>(values_s.size());
  }

 private:
  Calibration& result_;
  const CalibrationOptions& options_;
};

const Samples& find_or_empty(const std::map<std::pair<int, std::string>, Samples>& map, int stage, const char* what) {
  static const Samples none;
  auto it = map.find({stage, what});
  return it == map.end() ? none : it->second;
}

std::int64_t round_bytes(double bytes) { return static_cast<std::int64_t>(std::llround(bytes)); }

}  // namespace

CalibrationOptions::Statistic parse_duration_statistic(const std::string& text) {
  if (text == "median") return CalibrationOptions::Statistic::Median;
  if (text == "mean") return CalibrationOptions::Statistic::Mean;
  throw UsageError(fmt::format("--statistic: unknown statistic '{}' (known: median, mean)", text));
}

const char* to_string(CalibrationOptions::Statistic statistic) {
  return statistic == CalibrationOptions::Statistic::Mean ? "mean" : "median";
}

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  const std::size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

double median_absolute_deviation(const std::vector<double>& values) {
  const double m = median_of(values);
  std::vector<double> deviations;
  deviations.reserve(values.size());
  for (double v : values) deviations.push_back(std::fabs(v - m));
  return median_of(deviations);
}

namespace {

// The traces whose every rank lost at most `max_fraction` of the step to the host (steal), and
// a note for each one left out. Throws UsageError when none is left.
std::vector<std::reference_wrapper<const MeasuredTrace>> undisturbed_traces(const std::vector<MeasuredTrace>& traces,
                                                                            double max_fraction, std::vector<std::string>& notes) {
  std::vector<std::reference_wrapper<const MeasuredTrace>> kept;
  std::string first_left_out;
  for (const MeasuredTrace& mt : traces) {
    int worst_rank = -1;
    double worst = 0;
    for (int rank = 0; rank < mt.trace.rank_count(); ++rank)
      if (const double f = traces::stolen_time_fraction(mt.trace, rank); f > worst) {
        worst = f;
        worst_rank = rank;
      }
    if (worst <= max_fraction) {
      kept.push_back(mt);
      continue;
    }
    const std::string why = fmt::format("the host took {:.1f}% of rank {}'s step from its cores (steal)", worst * 100, worst_rank);
    if (first_left_out.empty()) first_left_out = fmt::format("{}: {}", mt.source, why);
    notes.push_back(fmt::format("{}: left out: {}", mt.source, why));
  }
  if (kept.empty())
    throw UsageError(fmt::format("every measured trace lost more than {:.1f}% of a rank's step to the host ({}{}): measure "
                                 "again when the machine is quiet, or raise --max-stolen",
                                 max_fraction * 100, first_left_out, traces.size() > 1 ? ", ..." : ""));
  return kept;
}

}  // namespace

Calibration calibrate(const std::vector<MeasuredTrace>& given, const CalibrationOptions& options) {
  if (given.empty()) throw UsageError("calibrate: give at least one measured trace");
  std::vector<std::string> left_out;
  const auto traces = undisturbed_traces(given, options.max_stolen_fraction, left_out);
  Collected c;
  int num_stages = -1, num_ranks = -1;
  std::string first_source;
  for (const MeasuredTrace& mt : traces) {
    const int stages = stage_count(mt.trace);
    const int ranks = mt.trace.rank_count();
    if (stages <= 0) throw UsageError(mt.source + ": no events with a stage: not a pipeline trace");
    if (num_stages < 0) {
      num_stages = stages;
      num_ranks = ranks;
      first_source = mt.source;
    } else if (stages != num_stages || ranks != num_ranks) {
      throw UsageError(fmt::format("{}: {} stages on {} ranks, but {} has {} stages on {} ranks: calibrate traces of one "
                                   "stage layout together",
                                   mt.source, stages, ranks, first_source, num_stages, num_ranks));
    }
    if (!mt.trace.meta.schedule.empty()) c.schedules.insert(mt.trace.meta.schedule);
    if (mt.trace.meta.num_micro_batches > 0) c.micro_batch_counts.insert(mt.trace.meta.num_micro_batches);
    if (const auto& data_parallel = mt.trace.meta.run.data_parallel) c.data_parallel = std::max(1, *data_parallel);
    for (int rank = 0; rank < ranks; ++rank) collect_rank(mt, rank, c);
    collect_transfers(mt, c);
    collect_collective_waits(mt, "OPTIMIZER", stages, c);
    collect_collective_waits(mt, "REDUCE_TIED", stages, c);
    collect_probe(mt, c);
    if (const double span_us = traces::event_span_us(mt.trace), step_us = traces::iteration_time_us(mt.trace);
        step_us != span_us)
      c.step_overheads.push_back({std::max(0.0, step_us - span_us) * 1e-6, &mt.source, -1, -1});
    collect_transport_cpu(mt, c);
  }

  Calibration result;
  Summariser summary(result, options);
  Profile& p = result.profile;
  p.data_parallel = c.data_parallel;

  // Transfers: delay = latency + bytes / bandwidth, from the receives that were already
  // waiting when their send was posted, fitted through the median (or mean) delay of each size;
  // one size leaves the bandwidth undetermined.
  constexpr double kUnlimitedBandwidth = 1e15;
  Samples waiting;
  std::map<double, std::vector<double>> delays_by_size;
  for (const auto& t : c.transfers)
    if (t.recv->ts_us <= t.send_start_us) {
      const double delay_s = (t.recv->end_us() - t.send_start_us) * 1e-6;
      waiting.push_back({delay_s, t.source, t.recv->rank, t.recv->micro_batch});
      delays_by_size[t.bytes].push_back(delay_s);
    }
  if (!waiting.empty()) {
    const double typical_delay_s = summary.estimate("transfer delay (receiver waiting)", "s", waiting);
    std::vector<std::pair<double, double>> points;
    for (const auto& [bytes, delays] : delays_by_size) points.push_back({bytes, summary.duration(delays)});
    double slope = 0, intercept = typical_delay_s;
    if (points.size() >= 2 && points.back().first >= 2 * points.front().first) {
      double mx = 0, my = 0;
      for (const auto& [x, y] : points) mx += x, my += y;
      mx /= static_cast<double>(points.size());
      my /= static_cast<double>(points.size());
      double sxy = 0, sxx = 0;
      for (const auto& [x, y] : points) sxy += (x - mx) * (y - my), sxx += (x - mx) * (x - mx);
      slope = sxx > 0 ? sxy / sxx : 0;
      intercept = my - slope * mx;
    }
    if (slope > 0 && intercept >= 0) {
      p.transfer = {1.0 / slope, intercept};
    } else {
      p.transfer = {kUnlimitedBandwidth, std::max(0.0, typical_delay_s)};
      result.notes.push_back(fmt::format(
          "transfers: {} message size(s) seen, too few to separate bandwidth from latency: the whole delay ({:.1f} us) "
          "is latency",
          points.size(), typical_delay_s * 1e6));
    }
  } else if (!c.transfers.empty()) {
    Samples all;
    for (const auto& t : c.transfers)
      all.push_back({(t.recv->end_us() - std::max(t.send_start_us, t.recv->ts_us)) * 1e-6, t.source, t.recv->rank,
                     t.recv->micro_batch});
    p.transfer = {kUnlimitedBandwidth, std::max(0.0, summary.estimate("transfer delay (all)", "s", all))};
    result.notes.push_back("transfers: no receive was waiting when its send was posted; latency from all pairs");
  } else {
    p.transfer = {kUnlimitedBandwidth, 0.0};
    result.notes.push_back("transfers: none measured (one rank?): communication is free");
  }
  // The program's own time between instructions.
  if (!c.instruction_gaps.empty())
    p.instruction_overhead_s = std::max(0.0, summary.estimate("program time between instructions", "s", c.instruction_gaps));
  // The step's own time after its last instruction (pprun gathers the step's figures).
  if (!c.step_overheads.empty()) p.step_overhead_s = summary.estimate("step time after the last instruction", "s", c.step_overheads);
  // A runtime whose sends complete when the receiver has the data (Gloo) ends their events
  // nearer the receive's end than the arrival; one that completes them on the wire, nearer
  // the arrival. Transfers whose receive waited for the data tell neither (both are equal).
  if (!c.transfers.empty()) {
    int nearer_receive = 0, nearer_arrival = 0;
    for (const auto& t : c.transfers) {
      const double arrival_us = t.send_start_us + (p.transfer.latency_s + t.bytes / p.transfer.bandwidth_bytes_per_s) * 1e6;
      const double from_receive_end = std::fabs(t.send_end_us - t.recv->end_us());
      const double from_arrival = std::fabs(t.send_end_us - arrival_us);
      if (from_receive_end < from_arrival) ++nearer_receive;
      if (from_arrival < from_receive_end) ++nearer_arrival;
    }
    p.send_ends_at_receive = nearer_receive > nearer_arrival;
    if (p.send_ends_at_receive)
      result.notes.push_back(fmt::format("transfers: {} of {} sends end nearer their receive's end than their data's "
                                         "arrival: predicted sends are drawn until the receive completes",
                                         nearer_receive, c.transfers.size()));
  }
  auto decide_sync = [&](const std::string& name) {
    const bool sync = c.sync_evidence[name] > 0 && c.no_sync_evidence[name] == 0;
    const std::string reading = name + (sync ? "_SYNCED" : "_UNSYNCED");
    for (auto it = c.times_s.begin(); it != c.times_s.end(); ++it)
      if (it->first.second == reading) c.times_s[{it->first.first, name}] = it->second;
    return sync;
  };
  p.optimizer_sync = decide_sync("OPTIMIZER");
  p.reduce_tied_sync = decide_sync("REDUCE_TIED");
  if (p.optimizer_sync)
    result.notes.push_back(fmt::format(
        "optimizer: the first step of each rank waits for every rank's (global-norm clipping; {} trace(s) show it): the "
        "optimizer times are measured from the last rank's arrival",
        c.sync_evidence["OPTIMIZER"]));
  else if (c.no_sync_evidence["OPTIMIZER"] > 0)
    result.notes.push_back("optimizer: ranks step without waiting for each other");
  if (p.reduce_tied_sync)
    result.notes.push_back(fmt::format(
        "tied weights: the tied-gradient all-reduce of the first and the last stage's ranks waits for both ({} trace(s) "
        "show it): its times are measured from the last arrival",
        c.sync_evidence["REDUCE_TIED"]));

  // A receive posted after its data must have arrived costs the program only its own work; more
  // when its rank's own message to the sender was still undelivered (both ways at once).
  Samples all_late_recvs, all_late_recvs_both_ways;
  const std::vector<char> against_traffic = receives_against_traffic(c.transfers);
  for (std::size_t i = 0; i < c.transfers.size(); ++i) {
    const auto& t = c.transfers[i];
    const double arrival_us = t.send_start_us + (p.transfer.latency_s + t.bytes / p.transfer.bandwidth_bytes_per_s) * 1e6;
    if (t.recv->ts_us >= arrival_us)
      (against_traffic[i] ? all_late_recvs_both_ways : all_late_recvs)
          .push_back({t.recv->dur_us * 1e-6, t.source, t.recv->rank, t.recv->micro_batch});
  }

  // A send's own program time: its span less the overhead of the instruction before it and
  // its own.
  for (auto& [stage, spans] : c.send_spans)
    for (Sample& span : spans) {
      span.value = std::max(0.0, span.value - 2 * p.instruction_overhead_s);
      c.times_s[{stage, "SEND"}].push_back(span);
    }
  Samples all_sends;
  for (const auto& [key, samples] : c.times_s)
    if (key.second == "SEND") all_sends.insert(all_sends.end(), samples.begin(), samples.end());
  // Posting a send and taking a receive whose data is already there are the transport's work
  // per message, not a stage's: one estimate from every stage's transfers. Their durations have
  // long tails (a rank that blocks can lose its core for a scheduler tick), and a stage that
  // seldom finds its data there (the first, in 1F1B: a few dozen receives in a hundred traces)
  // would get a mean that two or three tails decide, and charge it to every transfer point of
  // a schedule that has more of them (interleaved 1F1B, ZBV).
  const double send_s = all_sends.empty() ? 0.0 : summary.estimate("send posting (all stages)", "s", all_sends);
  // Receives of arrived data whose rank's own message to the sender was still undelivered
  // have their own estimate; with none of one kind measured, the other's stands for both.
  if (all_late_recvs.empty()) all_late_recvs = all_late_recvs_both_ways;
  const double recv_s =
      all_late_recvs.empty() ? 0.0 : summary.estimate("receive of arrived data (all stages)", "s", all_late_recvs);
  double recv_contended_s = recv_s;
  if (!all_late_recvs_both_ways.empty())
    recv_contended_s = summary.estimate("receive of arrived data, own message to the sender undelivered", "s",
                                        all_late_recvs_both_ways);
  else if (!all_late_recvs.empty())
    result.notes.push_back("transfers: no receive of arrived data met its rank's own message to the sender undelivered: "
                           "such receives are charged as the others");
  if (!c.transport_cpu_per_message.empty())
    summary.estimate("transport threads' CPU per message", "s", c.transport_cpu_per_message);

  bool split_everywhere = true;
  for (int s = 0; s < num_stages; ++s) {
    StageProfile sp;
    sp.stage = s;
    const std::string st = fmt::format("stage {} ", s);
    auto time = [&](const char* what) { return summary.estimate(st + what, "s", find_or_empty(c.times_s, s, what)); };
    // A weight gradient adds itself into the stage's gradient sum, except micro-batch 0's,
    // which becomes the sum (the executor accumulates in micro-batch order): B and W are
    // learnt from the later micro-batches, and micro-batch 0's saving apart.
    auto weight_time = [&](const char* what) {
      Samples later, first;
      for (const Sample& sample : find_or_empty(c.times_s, s, what)) (sample.micro_batch == 0 ? first : later).push_back(sample);
      if (later.empty() || first.empty()) return std::pair{time(what), 0.0};
      const double later_s = summary.estimate(st + what + " after micro-batch 0", "s", later);
      const double first_s = summary.estimate(st + what + " of micro-batch 0 (no gradient sum to add to)", "s", first);
      return std::pair{later_s, std::max(0.0, later_s - first_s)};
    };
    const Samples& forwards = find_or_empty(c.times_s, s, "F");
    if (forwards.empty()) throw UsageError(fmt::format("calibrate: stage {} has no forward (F) in any trace", s));
    sp.f_s = time("F");
    const bool has_full = !find_or_empty(c.times_s, s, "B").empty();
    const bool has_split = !find_or_empty(c.times_s, s, "I").empty() && !find_or_empty(c.times_s, s, "W").empty();
    if (!has_full && !has_split)
      throw UsageError(fmt::format("calibrate: stage {} has no backward (B, or I and W) in any trace", s));
    const auto [full_s, full_saving_s] = has_full ? weight_time("B") : std::pair{0.0, 0.0};
    sp.grad_accumulate_s = full_saving_s;
    if (has_split) {
      sp.b_s = time("I");
      const auto [w_s, w_saving_s] = weight_time("W");
      sp.w_s = w_s;
      if (!has_full) sp.grad_accumulate_s = w_saving_s;
      sp.full_backward_s = full_s;
    } else if (const auto& probe = c.probe[s]; !probe.input.empty()) {
      const double input_share = median_of(probe.input);
      const double weight_share = median_of(probe.weight);
      sp.b_s = full_s * input_share;
      sp.w_s = full_s * weight_share;
      sp.full_backward_s = full_s;
      result.notes.push_back(fmt::format(
          "stage {}: backward split from the executor's probe ({} samples): input {:.1f}%, weight {:.1f}% of a full "
          "backward",
          s, probe.samples, 100 * input_share, 100 * weight_share));
    } else {
      sp.b_s = full_s;
      sp.w_s = 0;
      split_everywhere = false;
    }
    sp.load_s = time("LOAD");
    sp.optimizer_s = time("OPTIMIZER");
    sp.reduce_grads_s = time("REDUCE_GRAD");
    sp.reduce_tied_s = time("REDUCE_TIED");
    sp.send_s = send_s;
    sp.recv_s = std::max(0.0, recv_s);
    sp.recv_contended_s = std::max(0.0, recv_contended_s);

    // Memory.
    const double forward_bytes = summary.estimate(st + "forward memory (LOAD + RECV_F + F)", "bytes",
                                                find_or_empty(c.memory_b, s, "forward"));
    sp.f_mem_bytes = round_bytes(forward_bytes);
    const Samples& input_side = find_or_empty(c.memory_b, s, "input");
    if (has_split && !input_side.empty()) {
      sp.b_mem_bytes = round_bytes(summary.estimate(st + "input-gradient memory (RECV_B + I)", "bytes", input_side));
    } else {
      // The executor keeps the graph from the input gradient to the weight gradient: the
      // activations go with the weight gradient.
      sp.b_mem_bytes = 0;
    }
    sp.w_mem_bytes = -(sp.f_mem_bytes + sp.b_mem_bytes);
    const Samples& backward_side = find_or_empty(c.memory_b, s, "backward");
    if (!backward_side.empty()) {
      const double measured = summary.estimate(st + "backward memory (RECV_B + B or I + W)", "bytes", backward_side);
      if (std::fabs(measured + forward_bytes) > 0.05 * std::max(1.0, std::fabs(forward_bytes)))
        result.notes.push_back(fmt::format("stage {}: a backward frees {} bytes, but its forward allocated {}: the "
                                           "profile frees what the forward allocated",
                                           s, -std::llround(measured), std::llround(forward_bytes)));
    }
    sp.grad_buffer_bytes = std::max<std::int64_t>(
        0, round_bytes(summary.estimate(st + "gradient buffer", "bytes", find_or_empty(c.memory_b, s, "grad_buffer"))));
    sp.static_bytes = std::max<std::int64_t>(
        0, round_bytes(summary.estimate(st + "memory at iteration start", "bytes", find_or_empty(c.memory_b, s, "static"))));
    if (auto it = c.activation_bytes.find(s); it != c.activation_bytes.end() && !it->second.empty()) {
      std::vector<double> sizes(it->second.begin(), it->second.end());
      sp.activation_bytes = round_bytes(median_of(sizes));
    } else if (s > 0 && !p.stages.empty()) {
      sp.activation_bytes = p.stages.back().activation_bytes;  // the last stage sends only gradients of its input
    }
    p.stages.push_back(sp);
  }
  p.backward_split_measured = split_everywhere;
  // How a stage cut from the first one, behind another stage now, splits its backward: from
  // the executor's probe of the first stage's later layers. A profile of several stages also
  // has the measured inner stages, which take precedence (split_of_inner_stages).
  if (const auto& inner = c.inner_probe[0]; !inner.input.empty()) {
    const double input_share = median_of(inner.input);
    const double weight_share = median_of(inner.weight);
    p.extra[std::string(kInnerBackwardSplitField)] = {{"input", input_share}, {"weight", weight_share}};
    result.notes.push_back(fmt::format("stage 0's layers after its first, as an inner stage runs them ({} samples): "
                                       "input {:.1f}%, weight {:.1f}% of a full backward",
                                       inner.samples, 100 * input_share, 100 * weight_share));
  }
  if (!split_everywhere)
    result.notes.push_back(
        "backward split unmeasured: the traces time only full backwards (B) and carry no split probe; schedules with "
        "BackwardInput/BackwardWeight (zb-*, dualpipev) will be refused. Add a trace of a split-backward schedule "
        "(pprun --schedule zb-h1 ...)");

  // The model's layers and their split, when the executor recorded them: they let a profile
  // of S stages predict other stage counts layer by layer (profile_for_stages).
  const traces::RunDescription& first_run = traces.front().get().trace.meta.run;
  bool same_layout = first_run.layers && first_run.stage_bounds && first_run.partition_method;
  for (const MeasuredTrace& mt : traces)
    same_layout = same_layout && mt.trace.meta.run.layers == first_run.layers && mt.trace.meta.run.stage_bounds == first_run.stage_bounds;
  if (same_layout) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& l : *first_run.layers) layers.push_back({{"name", l.name}, {"type", l.type}, {"parameters", l.parameters}});
    p.extra["layers"] = layers;
    p.extra["stage_bounds"] = *first_run.stage_bounds;
    p.extra["partition_method"] = *first_run.partition_method;
  }

  // What the executor says about the run (pprun records the model's name; a micro-batch
  // size recorded in the trace makes the profile's throughput right).
  if (first_run.model) p.extra["model"] = *first_run.model;
  if (first_run.micro_batch_size) p.micro_batch_size = std::max(1, *first_run.micro_batch_size);

  nlohmann::json info = nlohmann::json::object();
  nlohmann::json sources = nlohmann::json::array();
  for (const MeasuredTrace& mt : traces) sources.push_back(mt.source);
  info["traces"] = sources;
  if (!left_out.empty()) info["traces_left_out"] = given.size() - traces.size();
  info["schedules"] = c.schedules;
  info["micro_batches"] = c.micro_batch_counts;
  info["num_ranks"] = num_ranks;
  info["outliers"] = result.outliers.size();
  info["duration_statistic"] = to_string(options.duration_statistic);
  p.extra["calibration"] = info;
  result.notes.insert(result.notes.end(), left_out.begin(), left_out.end());
  return result;
}

namespace {

// The input-gradient and weight-gradient shares of a full backward on the measured stages
// after the first, pooled; nullopt when the split is unmeasured or there is no such stage. The
// first stage has no input gradient to compute (its input is data), so its own split says
// nothing about its layers once they sit behind another stage: they take these shares.
std::optional<std::pair<double, double>> split_of_inner_stages(const Profile& profile) {
  if (!profile.backward_split_measured) return std::nullopt;
  double input = 0, weight = 0, full = 0;
  for (std::size_t s = 1; s < profile.stages.size(); ++s) {
    input += profile.stages[s].b_s;
    weight += profile.stages[s].w_s;
    full += profile.stages[s].full_backward_s;
  }
  if (full > 0) return std::make_pair(input / full, weight / full);
  // One measured stage: the probe of its later layers, if the executor made it.
  const auto& extra = profile.extra;
  if (extra.is_object() && extra.contains(kInnerBackwardSplitField)) {
    const auto& split = extra[std::string(kInnerBackwardSplitField)];
    if (split.is_object() && split.contains("input") && split["input"].is_number() && split.contains("weight") &&
        split["weight"].is_number())
      return std::make_pair(split["input"].get<double>(), split["weight"].get<double>());
  }
  return std::nullopt;
}

// The layer-wise form of profile_for_stages, when the profile knows the model's layers (name,
// type, parameters), how the measured run split them and with which method: the target
// stages are split by the same method, and each layer takes from its measured stage a share
// of the time, the static memory and the gradient buffer in proportion to its parameters, and
// an equal share of the activation memory. Empty when the profile lacks the layers or they
// cannot be split into `num_stages` stages.
std::optional<Profile> profile_for_stages_by_layers(const Profile& profile, int num_stages) {
  const auto& extra = profile.extra;
  if (!extra.is_object() || !extra.contains("layers") || !extra.contains("stage_bounds") ||
      !extra.contains("partition_method"))
    return std::nullopt;
  std::vector<LayerInfo> layers;
  std::vector<int> bounds;
  std::string method;
  try {
    for (const auto& l : extra["layers"])
      layers.push_back({l.at("name").get<std::string>(), l.at("type").get<std::string>(), l.at("parameters").get<std::int64_t>(), 1.0});
    bounds = extra["stage_bounds"].get<std::vector<int>>();
    method = extra["partition_method"].get<std::string>();
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  const int measured = static_cast<int>(profile.stages.size());
  if (static_cast<int>(bounds.size()) != measured + 1 || bounds.front() != 0 ||
      bounds.back() != static_cast<int>(layers.size()))
    return std::nullopt;
  Partition target;
  try {
    target = partition_layers(layers, num_stages, method);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::vector<int> measured_stage_of(layers.size());
  std::vector<std::int64_t> stage_parameters(static_cast<std::size_t>(measured), 0);
  std::vector<int> stage_layers(static_cast<std::size_t>(measured), 0);
  for (int s = 0; s < measured; ++s)
    for (int l = bounds[s]; l < bounds[s + 1]; ++l) {
      measured_stage_of[static_cast<std::size_t>(l)] = s;
      stage_parameters[static_cast<std::size_t>(s)] += layers[static_cast<std::size_t>(l)].parameters;
      ++stage_layers[static_cast<std::size_t>(s)];
    }
  const auto inner_split = split_of_inner_stages(profile);
  Profile out = profile;
  out.stages.clear();
  for (int v = 0; v < num_stages; ++v) {
    StageProfile t;
    t.stage = v;
    double f_mem = 0, b_mem = 0, static_bytes = 0, grad_buffer = 0;
    for (int l = target.bounds[v]; l < target.bounds[v + 1]; ++l) {
      const int s = measured_stage_of[static_cast<std::size_t>(l)];
      const StageProfile& m = profile.stages[static_cast<std::size_t>(s)];
      const auto params = stage_parameters[static_cast<std::size_t>(s)];
      const double by_parameters = params > 0 ? static_cast<double>(layers[static_cast<std::size_t>(l)].parameters) / static_cast<double>(params)
                                              : 1.0 / stage_layers[static_cast<std::size_t>(s)];
      const double by_layers = 1.0 / stage_layers[static_cast<std::size_t>(s)];
      t.f_s += m.f_s * by_parameters;
      if (v > 0 && s == 0 && inner_split) {
        t.b_s += m.full_backward_s * by_parameters * inner_split->first;
        t.w_s += m.full_backward_s * by_parameters * inner_split->second;
      } else {
        t.b_s += m.b_s * by_parameters;
        t.w_s += m.w_s * by_parameters;
      }
      t.full_backward_s += m.full_backward_s * by_parameters;
      t.grad_accumulate_s += m.grad_accumulate_s * by_parameters;
      t.optimizer_s += m.optimizer_s * by_parameters;
      t.reduce_grads_s += m.reduce_grads_s * by_parameters;
      t.reduce_tied_s += m.reduce_tied_s * by_parameters;
      static_bytes += static_cast<double>(m.static_bytes) * by_parameters;
      grad_buffer += static_cast<double>(m.grad_buffer_bytes) * by_parameters;
      f_mem += static_cast<double>(m.f_mem_bytes) * by_layers;
      b_mem += static_cast<double>(m.b_mem_bytes) * by_layers;
    }
    // What crosses the stage's end, and the per-transfer costs, are those of the measured
    // stage that holds its last layer.
    const StageProfile& last = profile.stages[static_cast<std::size_t>(measured_stage_of[static_cast<std::size_t>(target.bounds[v + 1] - 1)])];
    t.activation_bytes = last.activation_bytes;
    t.send_s = last.send_s;
    t.recv_s = last.recv_s;
    t.recv_contended_s = last.recv_contended_s;
    t.load_s = v == 0 ? profile.stages.front().load_s : v == num_stages - 1 ? profile.stages.back().load_s : 0.0;
    t.f_mem_bytes = std::llround(f_mem);
    t.b_mem_bytes = std::llround(b_mem);
    t.w_mem_bytes = -(t.f_mem_bytes + t.b_mem_bytes);
    t.static_bytes = std::llround(static_bytes);
    t.grad_buffer_bytes = std::llround(grad_buffer);
    out.stages.push_back(t);
  }
  return out;
}

}  // namespace

Profile profile_for_stages(const Profile& profile, int num_stages, const std::string& source) {
  const int measured = static_cast<int>(profile.stages.size());
  if (num_stages == measured) return profile;
  if (num_stages <= 0 || measured <= 0 || (num_stages % measured != 0 && measured % num_stages != 0))
    throw UsageError(fmt::format("{}: the profile has {} stages; a schedule of {} stages needs a multiple or a divisor "
                                 "of that",
                                 source, measured, num_stages));
  Profile out = profile;
  out.stages.clear();
  if (auto by_layers = profile_for_stages_by_layers(profile, num_stages)) return *by_layers;
  if (num_stages > measured) {
    const int parts = num_stages / measured;
    const auto inner_split = split_of_inner_stages(profile);
    for (int v = 0; v < num_stages; ++v) {
      const StageProfile& m = profile.stages[static_cast<std::size_t>(v / parts)];
      const bool first_part = v % parts == 0;
      StageProfile s = m;
      s.stage = v;
      const double share = 1.0 / parts;
      s.f_s = m.f_s * share;
      if (v > 0 && v < parts && inner_split) {  // cut from the first stage, behind another one now
        s.b_s = m.full_backward_s * share * inner_split->first;
        s.w_s = m.full_backward_s * share * inner_split->second;
      } else {
        s.b_s = m.b_s * share;
        s.w_s = m.w_s * share;
      }
      s.full_backward_s = m.full_backward_s * share;
      s.grad_accumulate_s = m.grad_accumulate_s * share;
      s.optimizer_s = m.optimizer_s * share;
      s.reduce_grads_s = m.reduce_grads_s * share;
      s.reduce_tied_s = m.reduce_tied_s * share;
      // Only the first and the last stage load micro-batches (inputs, labels).
      s.load_s = (v == 0 || v == num_stages - 1) ? m.load_s : 0.0;
      s.f_mem_bytes = m.f_mem_bytes / parts;
      s.b_mem_bytes = m.b_mem_bytes / parts;
      s.w_mem_bytes = -(s.f_mem_bytes + s.b_mem_bytes);
      s.static_bytes = m.static_bytes / parts + (first_part ? m.static_bytes % parts : 0);
      s.grad_buffer_bytes = m.grad_buffer_bytes / parts + (first_part ? m.grad_buffer_bytes % parts : 0);
      out.stages.push_back(s);
    }
  } else {
    const int group = measured / num_stages;
    for (int v = 0; v < num_stages; ++v) {
      StageProfile s = profile.stages[static_cast<std::size_t>(v * group)];
      s.stage = v;
      for (int k = 1; k < group; ++k) {
        const StageProfile& m = profile.stages[static_cast<std::size_t>(v * group + k)];
        s.f_s += m.f_s;
        s.b_s += m.b_s;
        s.w_s += m.w_s;
        s.full_backward_s += m.full_backward_s;
        s.grad_accumulate_s += m.grad_accumulate_s;
        s.optimizer_s += m.optimizer_s;
        s.reduce_grads_s += m.reduce_grads_s;
        s.reduce_tied_s += m.reduce_tied_s;
        s.load_s = std::max(s.load_s, m.load_s);
        s.f_mem_bytes += m.f_mem_bytes;
        s.b_mem_bytes += m.b_mem_bytes;
        s.w_mem_bytes += m.w_mem_bytes;
        s.static_bytes += m.static_bytes;
        s.grad_buffer_bytes += m.grad_buffer_bytes;
        s.activation_bytes = m.activation_bytes;  // what leaves the merged stage is what left its last part
      }
      out.stages.push_back(s);
    }
  }
  return out;
}

void check_profile_fits(const Profile& profile, const Schedule& schedule, const std::string& source) {
  if (profile.backward_split_measured) return;
  for (std::size_t r = 0; r < schedule.programs.size(); ++r)
    for (const auto& step : schedule.programs[r])
      for (const Instruction& instr : step)
        if (instr.op == Op::BackwardInput || instr.op == Op::BackwardWeight)
          throw UsageError(fmt::format(
              "{}: schedule {} splits the backward (rank {} runs {}), but this profile was calibrated from full "
              "backwards only and does not know the split; calibrate with a trace of a split-backward schedule "
              "(e.g. pprun --schedule zb-h1 --trace t.json) among the inputs",
              source, schedule.name, r, to_string(instr)));
}

namespace {

std::string statistic_of(const Calibration& c) {
  const auto& info = c.profile.extra.value("calibration", nlohmann::json::object());
  return info.value("duration_statistic", std::string("median"));
}

}  // namespace

std::string calibration_report(const Calibration& c) {
  std::string out;
  const Profile& p = c.profile;
  out += fmt::format("{:<7}{:>11}{:>11}{:>11}{:>11}{:>10}{:>10}{:>10}{:>10}{:>12}{:>12}{:>12}\n", "stage", "F us", "B us",
                     "W us", "full us", "load us", "send us", "recv us", "optim us", "f mem B", "grad buf B",
                     "static B");
  for (const StageProfile& s : p.stages)
    out += fmt::format("{:<7}{:>11.1f}{:>11.1f}{:>11.1f}{:>11.1f}{:>10.1f}{:>10.1f}{:>10.1f}{:>10.1f}{:>12}{:>12}{:>12}\n",
                       s.stage, s.f_s * 1e6, s.b_s * 1e6, s.w_s * 1e6, s.full_backward_s * 1e6, s.load_s * 1e6,
                       s.send_s * 1e6, s.recv_s * 1e6, s.optimizer_s * 1e6, s.f_mem_bytes, s.grad_buffer_bytes,
                       s.static_bytes);
  out += fmt::format("transfer: latency {:.1f} us, bandwidth {:.4g} B/s; backward split {}\n", p.transfer.latency_s * 1e6,
                     p.transfer.bandwidth_bytes_per_s, p.backward_split_measured ? "measured" : "unmeasured");
  out += fmt::format("program: {:.1f} us between instructions, {:.1f} us after the last; optimizer steps {}; tied reductions {}; sends drawn until {}\n",
                     p.instruction_overhead_s * 1e6, p.step_overhead_s * 1e6, p.optimizer_sync ? "wait for every rank (global-norm clipping)" : "independent",
                     p.reduce_tied_sync ? "wait for both ends" : "independent",
                     p.send_ends_at_receive ? "their receive completes" : "their data arrives");
  out += fmt::format("durations: {} of the samples\n", statistic_of(c));
  out += fmt::format("\n{:<44}{:>8}{:>14}{:>14}{:>14}{:>14}{:>14}\n", "quantity", "samples", "median", "mean", "MAD", "min", "max");
  for (const auto& q : c.quantities) {
    if (q.samples == 0) continue;
    const double scale = q.unit == "s" ? 1e6 : 1.0;
    const std::string unit = q.unit == "s" ? " us" : " B";
    out += fmt::format("{:<44}{:>8}{:>14}{:>14}{:>14}{:>14}{:>14}\n", q.name, q.samples,
                       fmt::format("{:.1f}{}", q.median * scale, unit), fmt::format("{:.1f}", q.mean * scale),
                       fmt::format("{:.1f}", q.mad * scale), fmt::format("{:.1f}", q.min * scale),
                       fmt::format("{:.1f}", q.max * scale));
  }
  if (!c.outliers.empty()) {
    out += fmt::format("\noutliers ({}; {}):\n", c.outliers.size(),
                       statistic_of(c) == "mean" ? "durations: included in the means" : "reported only: the medians are robust to them");
    for (const auto& o : c.outliers) {
      const bool seconds = o.quantity.find("memory") == std::string::npos && o.quantity.find("buffer") == std::string::npos;
      out += fmt::format("  {}: {} rank {} micro-batch {}: {:.1f}{} (median {:.1f})\n", o.quantity, o.source, o.rank,
                         o.micro_batch, seconds ? o.value * 1e6 : o.value, seconds ? " us" : " B",
                         seconds ? o.median * 1e6 : o.median);
    }
  }
  for (const auto& n : c.notes) out += "note: " + n + "\n";
  return out;
}

}  // namespace pipescope::sim
