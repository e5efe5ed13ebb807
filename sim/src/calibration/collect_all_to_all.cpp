// The all-to-all events of a MoE run (pprun's ALL_TO_ALL_*, docs/MOE-EXEC.md): each lies inside
// the forward or backward that ran it, and carries its bytes, its peers, its layer and the
// routing histogram of the rank's tokens. Read by their typed kind, whatever lane they are on.
#include <algorithm>

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
double bytes_to_others(const nlohmann::json& peers, const nlohmann::json& rows_sent, int rank, double bytes) {
  if (!rows_sent.is_array() || rows_sent.size() != peers.size()) return bytes;
  double all = 0, own = 0;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if (!rows_sent[i].is_number() || !peers[i].is_number_integer()) return bytes;
    all += rows_sent[i].get<double>();
    if (peers[i].get<int>() == rank) own += rows_sent[i].get<double>();
  }
  return all > 0 ? bytes * (all - own) / all : bytes;
}

// The peers, layer and routing histogram of an all-to-all event's args, when they are there.
void read_all_to_all_args(const traces::Trace& trace, const TraceEvent& e, AllToAllSample& sample) {
  const std::string* args = trace.args_of(static_cast<std::size_t>(&e - trace.events.data()));
  if (!args) return;
  const auto parsed = nlohmann::json::parse(*args, nullptr, false);
  if (!parsed.is_object()) return;
  const auto peers = parsed.find("peers");
  if (peers != parsed.end() && peers->is_array() && !peers->empty()) {
    sample.group_size = static_cast<int>(peers->size());
    sample.bytes = bytes_to_others(*peers, parsed.find("rows_sent") != parsed.end() ? parsed["rows_sent"] : nullptr,
                                   e.rank, sample.bytes);
  }
  if (const auto layer = parsed.find("layer"); layer != parsed.end() && layer->is_string())
    sample.layer = layer->get<std::string>();
  if (const auto tokens = parsed.find("tokens_per_expert"); tokens != parsed.end() && tokens->is_array())
    for (const auto& t : *tokens)
      if (t.is_number()) sample.tokens_per_expert.push_back(t.get<double>());
}

}  // namespace

std::map<const TraceEvent*, double> collect_rank_all_to_all(const MeasuredTrace& mt, int rank, Collected& out) {
  std::map<const TraceEvent*, double> inside_us;
  const traces::Trace& trace = mt.trace;
  std::vector<const TraceEvent*> passes;
  std::vector<const TraceEvent*> exchanges;
  for (const auto& e : trace.events) {
    if (e.rank != rank) continue;
    if (is_pass(e.kind)) passes.push_back(&e);
    if (traces::is_all_to_all(e.kind)) exchanges.push_back(&e);
  }
  if (exchanges.empty()) return inside_us;
  const auto by_start = [](const TraceEvent* a, const TraceEvent* b) { return a->ts_us < b->ts_us; };
  std::sort(passes.begin(), passes.end(), by_start);
  // Two passes at once on one rank: the runtime runs overlapped F&B steps.
  for (std::size_t i = 1; i < passes.size(); ++i)
    if (passes[i]->ts_us + kInsideToleranceUs < passes[i - 1]->end_us()) out.passes_overlapped = true;
  for (const TraceEvent* a : exchanges) {
    AllToAllSample sample;
    sample.kind = a->kind;
    sample.bytes = static_cast<double>(std::max<std::int64_t>(a->bytes, 0));
    sample.duration_s = a->dur_us * 1e-6;
    sample.source = &mt.source;
    sample.rank = rank;
    read_all_to_all_args(trace, *a, sample);
    // The last pass that started no later than the exchange, if the exchange ends inside it.
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
