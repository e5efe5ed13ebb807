// The experts' calls of a MoE run (pprun's "expert_calls" args on its forwards and backwards,
// docs/MOE-EXEC.md): each expert's forward or backward, the rows it got and its time. Read
// from the pass that ran them, so the pass can be timed net of them.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "estimation.hpp"
#include "pipescope/core/errors.hpp"

namespace pipescope::sim::calibration {

namespace {

using traces::EventKind;
using traces::TraceEvent;

bool runs_expert_calls(EventKind kind) {
  return kind == EventKind::Forward || kind == EventKind::Backward || kind == EventKind::BackwardInput;
}

// The calls of one pass, or nothing where its args do not hold them in pprun's shape.
std::vector<ExpertCallSample> calls_of(const traces::Trace& trace, const TraceEvent& e) {
  std::vector<ExpertCallSample> out;
  const std::string* args = trace.args_of(static_cast<std::size_t>(&e - trace.events.data()));
  if (!args) return out;
  const auto parsed = nlohmann::json::parse(*args, nullptr, false);
  if (!parsed.is_object()) return out;
  const auto calls = parsed.find("expert_calls");
  if (calls == parsed.end() || !calls->is_array()) return out;
  for (const auto& call : *calls) {
    if (!call.is_object() || !call.contains("rows") || !call["rows"].is_number() || !call.contains("us") ||
        !call["us"].is_number())
      continue;
    ExpertCallSample sample;
    sample.backward = e.kind != EventKind::Forward;
    sample.rows = std::max(0.0, call["rows"].get<double>());
    sample.duration_s = std::max(0.0, call["us"].get<double>()) * 1e-6;
    sample.stage = e.stage;
    if (call.contains("layer") && call["layer"].is_string()) sample.layer = call["layer"].get<std::string>();
    out.push_back(std::move(sample));
  }
  return out;
}

}  // namespace

std::map<const TraceEvent*, double> collect_rank_expert_calls(const MeasuredTrace& mt, int rank, Collected& out) {
  std::map<const TraceEvent*, double> inside_us;
  for (const auto& e : mt.trace.events) {
    if (e.rank != rank || !runs_expert_calls(e.kind)) continue;
    std::vector<ExpertCallSample> calls = calls_of(mt.trace, e);
    if (calls.empty()) continue;
    std::map<std::string, double> rows_of_layer;
    for (ExpertCallSample& call : calls) {
      inside_us[&e] += call.duration_s * 1e6;
      if (!call.backward) rows_of_layer[call.layer] += call.rows;
      out.expert_calls.push_back(std::move(call));
    }
    for (const auto& layer : rows_of_layer) out.expert_rows_per_layer.push_back(layer.second);
  }
  return inside_us;
}

void collect_expert_layers(const traces::RunDescription& run, Collected& out) {
  if (!run.layers) return;
  for (const traces::LayerDescription& l : *run.layers) {
    if (!l.expert_parameters) continue;
    out.expert_parameters_of_layer[l.name] = *l.expert_parameters;
    if (l.experts) out.experts_per_layer = std::max(out.experts_per_layer, *l.experts);
  }
}

void collect_expert_call_probe(const MeasuredTrace& mt, Collected& out) {
  if (!mt.trace.meta.run.expert_call_probe) return;
  const std::vector<traces::ExpertCallProbe>& probe = *mt.trace.meta.run.expert_call_probe;
  for (std::size_t i = 0; i < probe.size(); ++i) {
    const traces::ExpertCallProbe& entry = probe[i];
    const std::string where = fmt::format("{}: otherData.expert_call_probe[{}]", mt.source, i);
    if (entry.rows < 0) throw UsageError(where + ".rows: must be a number >= 0");
    for (const double us : entry.us)
      if (!(us >= 0)) throw UsageError(where + ".us: must hold numbers >= 0");
    if (entry.us.empty()) continue;
    ExpertCallSample sample;
    sample.backward = entry.backward;
    sample.rows = static_cast<double>(entry.rows);
    sample.duration_s = median_of(entry.us) * 1e-6;
    sample.stage = entry.stage;
    sample.layer = entry.layer;
    out.expert_call_probe.push_back(std::move(sample));
  }
}

}  // namespace pipescope::sim::calibration
