// The experts' all-to-all of a MoE run (Profile::all_to_all): a cost per group size fitted to
// the events' bytes and durations, the bytes of each kind per layer and micro-batch, the routing
// imbalance from the histograms, which stages' layers ran it, and whether the runtime overlapped
// two passes. The stages' F and B samples are already net of it (collect_rank_all_to_all).
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "estimation.hpp"
#include "line_fit.hpp"

namespace pipescope::sim::calibration {

namespace {

using traces::EventKind;

// latency + bytes / bandwidth by least squares over the events (the mean duration at each
// size: the expected exchange, waits for the slower peer included). When the bytes hardly
// vary, or a larger exchange was not slower, the bytes do not explain the durations: the cost
// is their typical duration, as a latency. A negative latency is a line through the origin.
AllToAllCost fit_all_to_all(const std::vector<const AllToAllSample*>& samples, const Summariser& summary,
                            int group_size) {
  AllToAllCost cost;
  cost.group_size = group_size;
  cost.samples = static_cast<std::int64_t>(samples.size());
  const LineSums l = line_sums(
      samples, [](const AllToAllSample& s) { return s.bytes; }, [](const AllToAllSample& s) { return s.duration_s; });
  std::vector<double> durations;
  durations.reserve(samples.size());
  for (const AllToAllSample* s : samples) durations.push_back(s->duration_s);
  // Bytes that vary by less than 1% (relative standard deviation) cannot tell a latency from a
  // bandwidth.
  const bool bytes_vary = l.x_varies();
  const double seconds_per_byte = bytes_vary ? l.sxy / l.sxx : 0;
  if (seconds_per_byte <= 0) {
    cost.latency_s = summary.duration(durations);
    return cost;
  }
  const double latency_s = l.mean_y - seconds_per_byte * l.mean_x;
  if (latency_s >= 0) {
    cost.latency_s = latency_s;
    cost.bandwidth_bytes_per_s = 1 / seconds_per_byte;
  } else if (l.sxy_origin > 0) {
    cost.bandwidth_bytes_per_s = l.sxx_origin / l.sxy_origin;
  }
  return cost;
}

// The busiest expert's tokens over the mean, and the busiest group of experts_per_rank
// consecutive experts (an expert-parallel rank's) over the mean group, of one histogram.
std::pair<double, double> routing_imbalance(const std::vector<double>& tokens, int expert_parallel) {
  double total = 0, busiest = 0;
  for (const double t : tokens) {
    total += t;
    busiest = std::max(busiest, t);
  }
  if (total <= 0 || tokens.empty()) return {1.0, 1.0};
  const std::size_t groups = static_cast<std::size_t>(std::max(expert_parallel, 1));
  const std::size_t per_group = std::max<std::size_t>(tokens.size() / groups, 1);
  double busiest_group = 0;
  for (std::size_t g = 0; g * per_group < tokens.size(); ++g) {
    double sum = 0;
    for (std::size_t e = g * per_group; e < std::min(tokens.size(), (g + 1) * per_group); ++e) sum += tokens[e];
    busiest_group = std::max(busiest_group, sum);
  }
  const double experts = static_cast<double>(tokens.size());
  return {busiest / (total / experts), busiest_group / (total * static_cast<double>(per_group) / experts)};
}

const char* kind_label(EventKind kind) {
  switch (kind) {
    case EventKind::AllToAllDispatchForward: return "dispatch F";
    case EventKind::AllToAllCombineForward: return "combine F";
    case EventKind::AllToAllDispatchBackward: return "dispatch B";
    case EventKind::AllToAllCombineBackward: return "combine B";
    default: return "other";
  }
}

// The routing: each histogram counted once, at its forward dispatch.
void estimate_routing(Estimation& e, AllToAllProfile& a) {
  std::vector<double> imbalance, rank_load;
  for (const AllToAllSample& s : e.collected.all_to_all) {
    if (s.kind != EventKind::AllToAllDispatchForward || s.tokens_per_expert.empty()) continue;
    a.experts = std::max(a.experts, static_cast<int>(s.tokens_per_expert.size()));
    const auto [expert, rank] = routing_imbalance(s.tokens_per_expert, a.expert_parallel);
    imbalance.push_back(expert);
    rank_load.push_back(rank);
  }
  a.imbalance = std::max(1.0, median_of(imbalance));
  a.rank_load = std::max(1.0, median_of(rank_load));
  if (imbalance.empty()) e.note("all-to-all: the events carry no routing histogram (tokens_per_expert): imbalance 1");
}

}  // namespace

void estimate_all_to_all(Estimation& e) {
  const std::vector<AllToAllSample>& samples = e.collected.all_to_all;
  if (samples.empty()) return;
  AllToAllProfile a;
  std::map<int, std::vector<const AllToAllSample*>> by_group;
  std::map<EventKind, Samples> bytes;
  std::map<int, std::set<std::string>> stage_layers;
  std::set<std::string> layers;
  for (const AllToAllSample& s : samples) {
    by_group[s.group_size].push_back(&s);
    bytes[s.kind].push_back({s.bytes, s.source, s.rank, -1});
    if (s.layer.empty()) continue;
    layers.insert(s.layer);
    if (s.stage >= 0) stage_layers[s.stage].insert(s.layer);
  }
  a.expert_parallel = by_group.rbegin()->first;  // the largest group measured
  a.layers.assign(layers.begin(), layers.end());
  for (const auto& [group, events] : by_group)
    if (group > 1) a.costs.push_back(fit_all_to_all(events, e.summary, group));
  a.dispatch_f_bytes =
      e.summary.estimate("all-to-all dispatch F bytes", "bytes", bytes[EventKind::AllToAllDispatchForward]);
  a.combine_f_bytes =
      e.summary.estimate("all-to-all combine F bytes", "bytes", bytes[EventKind::AllToAllCombineForward]);
  a.dispatch_b_bytes =
      e.summary.estimate("all-to-all dispatch B bytes", "bytes", bytes[EventKind::AllToAllDispatchBackward]);
  a.combine_b_bytes =
      e.summary.estimate("all-to-all combine B bytes", "bytes", bytes[EventKind::AllToAllCombineBackward]);
  for (const EventKind kind : {EventKind::AllToAllDispatchForward, EventKind::AllToAllCombineForward,
                               EventKind::AllToAllDispatchBackward, EventKind::AllToAllCombineBackward}) {
    Samples durations;
    for (const AllToAllSample& s : samples)
      if (s.kind == kind) durations.push_back({s.duration_s, s.source, s.rank, -1});
    e.summary.estimate(fmt::format("all-to-all {}", kind_label(kind)), "s", durations);
  }
  // The wait for the group's last member: half the events are that member's and wait for no
  // one, so it is a mean, not a quantity whose median says anything.
  double wait_s = 0;
  for (const AllToAllSample& s : samples) wait_s += s.wait_s / static_cast<double>(samples.size());
  a.member_wait_s = wait_s;
  if (wait_s > 0)
    e.note(fmt::format(
        "all-to-all: a rank waited {:.1f} us per exchange on average for the last member of its group; taken out "
        "of the passes with the exchanges and added to each exchange where the ranks meet (E > 1; at E = 1 the "
        "replicas do not meet there)",
        wait_s * 1e6));
  estimate_routing(e, a);
  for (StageProfile& stage : e.result.profile.stages) {
    const auto it = stage_layers.find(stage.stage);
    stage.moe_layers = it == stage_layers.end() ? 0 : static_cast<int>(it->second.size());
  }
  if (!e.collected.exchange_transport_cpu.empty()) {
    a.transport_cpu_per_exchange_s =
        e.summary.estimate("all-to-all transport threads' CPU per exchange", "s", e.collected.exchange_transport_cpu);
    e.note(fmt::format(
        "all-to-all: the transport's threads ran {:.1f} us of CPU per exchange on the rank's own core: an overlapped "
        "F&B step's compute runs that much slower beside an exchange",
        a.transport_cpu_per_exchange_s * 1e6));
  }
  a.overlapped_steps = e.collected.passes_overlapped;
  if (!a.overlapped_steps)
    e.note(
        "all-to-all: the runtime ran no two passes at once (or said it runs overlapped F&B steps one pass after "
        "the other), so overlapped F&B steps (dualpipev's pairs) are predicted one pass after the other, each "
        "with its all-to-all exposed, as this runtime ran them");
  if (a.costs.empty()) e.note("all-to-all: every exchange was within one rank (E = 1): no all-to-all cost to learn");
  e.result.profile.all_to_all = std::move(a);
}

}  // namespace pipescope::sim::calibration
