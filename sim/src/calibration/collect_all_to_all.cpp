// The all-to-all events of a MoE run (pprun's ALL_TO_ALL_*, docs/MOE-EXEC.md): each lies inside
// the forward or backward that ran it, and carries its bytes, its peers, its layer and the
// routing histogram of the rank's tokens. Read by their typed kind, whatever lane they are on.
// An event lasts from its rank's arrival until the exchange is done: the member of the group
// that arrived last waited for no one, and its duration is the exchange's own time; what the
// others' events last beyond it is waiting for that member. The wait is a cost of meeting: the
// replicas' passes vary from one to the next, and where they exchange, each exchange waits for
// the slower; at E = 1 they do not meet there and do not pay it. So the whole event comes out
// of the pass, and the profile adds the mean wait to each exchange it puts back
// (AllToAllProfile::member_wait_s).
#include <algorithm>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "estimation.hpp"

namespace pipescope::sim::calibration {

namespace {

using traces::EventKind;
using traces::TraceEvent;

bool is_pass(EventKind kind) {
  return kind == EventKind::Forward || kind == EventKind::Backward || kind == EventKind::BackwardInput ||
         kind == EventKind::BackwardWeight;
}

// An event's end may round a little past the end of the pass it ran inside.
constexpr double kInsideToleranceUs = 1.0;

// Of the `bytes` an exchange sent, those that left the rank: pprun counts the rows a rank keeps
// for its own experts among its bytes (its args' rows_sent, one count per peer, this rank among
// them); they cross no link. All of them when the args do not say.
double bytes_to_others(const std::vector<int>& peers, const nlohmann::json& rows_sent, int rank, double bytes) {
  if (!rows_sent.is_array() || rows_sent.size() != peers.size()) return bytes;
  double all = 0, own = 0;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if (!rows_sent[i].is_number()) return bytes;
    all += rows_sent[i].get<double>();
    if (peers[i] == rank) own += rows_sent[i].get<double>();
  }
  return all > 0 ? bytes * (all - own) / all : bytes;
}

// An exchange's args, as pprun writes them (empty where a trace does not say).
struct ExchangeArgs {
  std::vector<int> peers;  // the group's world ranks, this one among them
  std::string layer;
  std::vector<double> tokens_per_expert;
  nlohmann::json rows_sent;  // per peer
};

ExchangeArgs read_exchange_args(const traces::Trace& trace, const TraceEvent& e) {
  ExchangeArgs out;
  const std::string* args = trace.args_of(static_cast<std::size_t>(&e - trace.events.data()));
  if (!args) return out;
  const auto parsed = nlohmann::json::parse(*args, nullptr, false);
  if (!parsed.is_object()) return out;
  if (const auto peers = parsed.find("peers"); peers != parsed.end() && peers->is_array())
    for (const auto& peer : *peers)
      if (peer.is_number_integer()) out.peers.push_back(peer.get<int>());
  if (const auto layer = parsed.find("layer"); layer != parsed.end() && layer->is_string())
    out.layer = layer->get<std::string>();
  if (const auto tokens = parsed.find("tokens_per_expert"); tokens != parsed.end() && tokens->is_array())
    for (const auto& t : *tokens)
      if (t.is_number()) out.tokens_per_expert.push_back(t.get<double>());
  if (const auto rows = parsed.find("rows_sent"); rows != parsed.end()) out.rows_sent = *rows;
  return out;
}

// The exchanges of one group, layer and kind: per member rank, its events in time order.
using ExchangeKey = std::tuple<std::vector<int>, std::string, EventKind>;

// With pprun --bind-cores a rank's transport threads run on its own core: the CPU they took in
// the step (the run description's transport_cpu_s) over the rank's exchanges is what an
// exchange takes from the compute beside it. Only for a rank that exchanged and sent nothing
// else (no pipeline transfers shared that CPU).
void collect_exchange_cpu(const MeasuredTrace& mt, int rank, std::size_t exchanges, bool transfers, Collected& out) {
  const traces::RunDescription& run = mt.trace.meta.run;
  if (exchanges == 0 || transfers || !run.bind_cores.value_or(false) || !run.transport_cpu_s) return;
  const std::vector<double>& cpu = *run.transport_cpu_s;
  if (rank < 0 || static_cast<std::size_t>(rank) >= cpu.size() || cpu[static_cast<std::size_t>(rank)] < 0) return;
  out.exchange_transport_cpu.push_back(
      {cpu[static_cast<std::size_t>(rank)] / static_cast<double>(exchanges), &mt.source, rank, -1});
}

}  // namespace

std::map<const TraceEvent*, double> all_to_all_exchange_times(const traces::Trace& trace) {
  std::map<ExchangeKey, std::map<int, std::vector<const TraceEvent*>>> groups;
  for (const auto& e : trace.events) {
    if (!traces::is_all_to_all(e.kind)) continue;
    ExchangeArgs args = read_exchange_args(trace, e);
    std::sort(args.peers.begin(), args.peers.end());
    groups[{std::move(args.peers), std::move(args.layer), e.kind}][e.rank].push_back(&e);
  }
  std::map<const TraceEvent*, double> own_us;
  for (auto& group : groups) {
    // Not a structured binding: the lambda below captures the members (clang 14 cannot).
    const std::vector<int>& peers = std::get<0>(group.first);
    auto& members = group.second;
    for (auto& [rank, events] : members) {
      std::sort(events.begin(), events.end(),
                [](const TraceEvent* a, const TraceEvent* b) { return a->ts_us < b->ts_us; });
      for (const TraceEvent* e : events) own_us[e] = e->dur_us;  // unless the whole group is here
    }
    // The k-th exchange of every member is one exchange: the group runs the same schedule.
    const bool whole_group = peers.size() >= 2 && members.size() == peers.size() &&
                             std::all_of(members.begin(), members.end(), [&](const auto& member) {
                               return member.second.size() == members.begin()->second.size();
                             });
    if (!whole_group) continue;
    for (std::size_t k = 0; k < members.begin()->second.size(); ++k) {
      double last_us = members.begin()->second[k]->dur_us;
      for (const auto& member : members) last_us = std::min(last_us, member.second[k]->dur_us);
      for (const auto& member : members) own_us[member.second[k]] = last_us;
    }
  }
  return own_us;
}

std::map<const TraceEvent*, double> collect_rank_all_to_all(const MeasuredTrace& mt, int rank,
                                                            const std::map<const TraceEvent*, double>& exchange_us,
                                                            Collected& out) {
  std::map<const TraceEvent*, double> inside_us;
  const traces::Trace& trace = mt.trace;
  std::vector<const TraceEvent*> passes;
  std::vector<const TraceEvent*> exchanges;
  bool transfers = false;  // pipeline sends or receives besides the exchanges
  for (const auto& e : trace.events) {
    if (e.rank != rank) continue;
    if (is_pass(e.kind)) passes.push_back(&e);
    if (traces::is_all_to_all(e.kind)) exchanges.push_back(&e);
    if (e.lane == static_cast<int>(traces::Lane::Send) || e.lane == static_cast<int>(traces::Lane::Recv))
      transfers = true;
  }
  if (exchanges.empty()) return inside_us;
  const auto by_start = [](const TraceEvent* a, const TraceEvent* b) { return a->ts_us < b->ts_us; };
  std::sort(passes.begin(), passes.end(), by_start);
  // Whether the runtime runs overlapped F&B steps as one: as the run says (pprun's
  // overlapped_steps, which a 1f1b trace, without such steps, carries too), else two passes at
  // once on one rank.
  if (const std::optional<bool> said = trace.meta.run.overlapped_steps) {
    out.passes_overlapped = out.passes_overlapped || *said;
  } else {
    for (std::size_t i = 1; i < passes.size(); ++i)
      if (passes[i]->ts_us + kInsideToleranceUs < passes[i - 1]->end_us()) out.passes_overlapped = true;
  }
  collect_exchange_cpu(mt, rank, exchanges.size(), transfers, out);
  for (const TraceEvent* a : exchanges) {
    const ExchangeArgs args = read_exchange_args(trace, *a);
    const auto own = exchange_us.find(a);
    const double own_us = own == exchange_us.end() ? a->dur_us : own->second;
    AllToAllSample sample;
    sample.kind = a->kind;
    sample.bytes = static_cast<double>(std::max<std::int64_t>(a->bytes, 0));
    if (!args.peers.empty()) {
      sample.group_size = static_cast<int>(args.peers.size());
      sample.bytes = bytes_to_others(args.peers, args.rows_sent, rank, sample.bytes);
    }
    sample.duration_s = own_us * 1e-6;
    sample.wait_s = std::max(0.0, a->dur_us - own_us) * 1e-6;
    sample.layer = args.layer;
    sample.tokens_per_expert = args.tokens_per_expert;
    sample.source = &mt.source;
    sample.rank = rank;
    // The last pass that started no later than the exchange, if the exchange ends inside it: the
    // exchange and its wait for the group's last member come out of it.
    const auto after = std::upper_bound(passes.begin(), passes.end(), a, by_start);
    if (after != passes.begin()) {
      const TraceEvent* pass = *std::prev(after);
      if (a->end_us() <= pass->end_us() + kInsideToleranceUs) {
        sample.stage = pass->stage;
        inside_us[pass] += a->dur_us;
      }
    }
    out.all_to_all.push_back(std::move(sample));
  }
  return inside_us;
}

}  // namespace pipescope::sim::calibration
