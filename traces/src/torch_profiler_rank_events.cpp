// A rank's part of the trace, made from what the earlier passes found (torch_profiler_rank.hpp):
// each action as an event of its lane (a computation from its data's arrival, a receive to
// the arrival where it was measured, transfers with their peers), the operators and GPU kernels
// that ran in the step, and the memory curve. Times are still the file's own.
#include <algorithm>

#include <fmt/format.h>

#include "pipescope/traces/trace_io.hpp"
#include "torch_profiler_rank.hpp"

namespace pipescope::traces::detail {

using nlohmann::json;

void RankReader::emit(const std::map<int, int>& stage_rank, Trace& out, PendingArgs& args) {
  if (actions_.empty()) note_missing_actions(out);
  for (const auto& a : actions_) emit_action(a, stage_rank, out, args);
  if (options_.keep_operators) {
    emit_operators(out, args);
    emit_kernels(out);
  }
  emit_memory(out);
}

void RankReader::emit_action(const Action& a, const std::map<int, int>& stage_rank, Trace& out,
                             PendingArgs& args) const {
  TraceEvent ev;
  ev.rank = file_.rank;
  ev.lane = lane_of(a.kind);
  ev.name = std::string(event_kind_name(a.kind));
  ev.kind = a.kind;
  ev.category = std::string(event_kind_category(a.kind));
  ev.stage = a.stage;
  ev.micro_batch = a.micro_batch;
  ev.ts_us = a.start_us;
  double end = a.end_us;
  if (a.launched_kernels() && ev.lane != static_cast<int>(Lane::Recv)) {
    ev.ts_us = a.kernel_start_us;
    end = a.kernel_end_us;
  } else if (ev.lane == static_cast<int>(Lane::Compute) && a.data_ready_us > ev.ts_us) {
    // The span's time up to the data's arrival was a wait (an idle rank), not the work.
    ev.ts_us = std::min(a.data_ready_us, end);
    args.emplace_back(out.events.size(), json{{kDataWaitArg, ev.ts_us - a.start_us}}.dump());
  } else if (ev.lane == static_cast<int>(Lane::Recv) && a.arrival_measured) {
    end = std::max(end, a.transport_end_us);
    ev.category = kWaitedReceiveCategory;
  } else if (ev.lane == static_cast<int>(Lane::Recv)) {
    ev.category = kPostedReceiveCategory;  // its data came before its consumer asked: no arrival time
  }
  ev.dur_us = std::max(0.0, end - ev.ts_us);
  // A receive's own work is its post, whatever its span (docs/TORCH-TRACES.md).
  if (ev.lane == static_cast<int>(Lane::Recv))
    args.emplace_back(out.events.size(), json{{kReceivePostArg, a.end_us - a.start_us}}.dump());
  if (ev.lane == static_cast<int>(Lane::Send) || ev.lane == static_cast<int>(Lane::Recv)) {
    ev.bytes = a.bytes;
    const bool activation = carries_activation(a.kind);
    const bool send = ev.lane == static_cast<int>(Lane::Send);
    const int peer_stage = a.stage + ((activation == send) ? 1 : -1);
    if (const auto it = stage_rank.find(peer_stage); it != stage_rank.end()) ev.peer_rank = it->second;
  }
  out.events.push_back(std::move(ev));
}

// Single-stage schedule classes record `Forward i` / `Backward i` spans and no actions: kept
// under their own names with their micro-batch, without a stage (the trace does not say it).
void RankReader::note_missing_actions(Trace& out) {
  bool any = false;
  for (const RankSpan& e : spans_) {
    if ((e.role != SpanRole::SingleStageForward && e.role != SpanRole::SingleStageBackward) || !in_step(*e)) continue;
    TraceEvent ev;
    ev.rank = file_.rank;
    ev.lane = static_cast<int>(Lane::Compute);
    ev.name = name_of(*e);
    ev.category = "compute";
    ev.ts_us = e->ts_us;
    ev.dur_us = e->dur_us;
    ev.micro_batch = single_stage_micro_batch(ev.name);
    out.events.push_back(std::move(ev));
    any = true;
  }
  notes_.push_back(
      fmt::format("{}: no PP: action spans{}: events have no stage; compare and calibrate need a "
                  "multi-stage schedule class (which records PP: spans)",
                  file_.path, any ? " (a single-stage schedule class: Forward i / Backward i only)" : ""));
}

// The CPU operators of the step on the operators lane, with the stage and micro-batch of the
// action they ran in and their recorded shapes.
void RankReader::emit_operators(Trace& out, PendingArgs& args) {
  for (const RankSpan& e : spans_) {
    if (e.role == SpanRole::Action || e.role == SpanRole::Step || !in_step(*e)) continue;
    const bool single_stage_pass = e.role == SpanRole::SingleStageForward || e.role == SpanRole::SingleStageBackward;
    if (single_stage_pass && actions_.empty()) continue;  // already the compute lane's events
    const double ts = e->ts_us;
    const Action* a = action_at(ts);
    TraceEvent ev;
    ev.rank = file_.rank;
    ev.lane = kOperatorsLane;
    ev.name = name_of(*e);
    ev.category = e.role == SpanRole::TransportCall ? "p2p" : "operator";
    ev.ts_us = ts;
    ev.dur_us = e->dur_us;
    if (a) ev.stage = a->stage, ev.micro_batch = a->micro_batch;
    if (e->has_input_dims) args.emplace_back(out.events.size(), file_.events.shapes_of(*e));
    out.events.push_back(std::move(ev));
  }
}

// The GPU kernels, one lane per stream, with the stage and micro-batch of the action that
// launched them.
void RankReader::emit_kernels(Trace& out) {
  std::map<std::pair<std::int64_t, std::string>, int> lane_of_stream;
  for (std::size_t i = 0; i < kernels_.size(); ++i) {
    const TorchSpan& k = *kernels_[i];
    // A GPU runs behind its host: an action's kernels may end after the step's CPU span.
    if (kernel_action_[i] < 0 && !in_step(k)) continue;
    const auto key = std::make_pair(k.pid, file_.events.tid_of(k));
    const auto [it, added] = lane_of_stream.emplace(key, kOperatorsLane + 1 + static_cast<int>(lane_of_stream.size()));
    if (added) stream_lanes_.emplace_back(it->second, fmt::format("GPU {} stream {}", key.first, key.second));
    TraceEvent ev;
    ev.rank = file_.rank;
    ev.lane = it->second;
    ev.name = name_of(k);
    ev.category = is_communication_kernel(ev.name) ? "p2p" : "kernel";
    ev.ts_us = k.ts_us;
    ev.dur_us = k.dur_us;
    if (kernel_action_[i] >= 0) {
      const Action& a = actions_[static_cast<std::size_t>(kernel_action_[i])];
      ev.stage = a.stage, ev.micro_batch = a.micro_batch;
    }
    out.events.push_back(std::move(ev));
  }
}

// "[memory]" events hold the allocator's total after each allocation or free; a GPU run's
// curve is its GPU's (Device Type 1), a CPU run's the host's. The value held when the step
// starts opens the curve.
void RankReader::emit_memory(Trace& out) const {
  std::vector<std::pair<double, std::int64_t>> cpu, gpu;
  for (const TorchMemorySample& m : file_.events.memory) (m.host ? cpu : gpu).push_back({m.ts_us, m.bytes});
  auto& chosen = gpu.empty() ? cpu : gpu;
  std::stable_sort(chosen.begin(), chosen.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // The value held when the window opens (the last sample before it), then the window's own.
  bool held_before = false;
  std::int64_t bytes_before = 0;
  for (const auto& [ts, bytes] : chosen) {
    if (ts < window_.start_us) {
      held_before = true;
      bytes_before = bytes;
      continue;
    }
    if (ts >= window_.end_us) break;
    if (held_before) out.memory.push_back({file_.rank, window_.start_us, bytes_before}), held_before = false;
    out.memory.push_back({file_.rank, ts, bytes});
  }
}

}  // namespace pipescope::traces::detail
