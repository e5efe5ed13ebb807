// The event loop's trace recorder: events per (rank, lane) and memory samples per rank as the
// ranks run, assembled into one predicted trace at the end.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "simulator_engine.hpp"

namespace pipescope::sim::event_loop {

void Engine::prepare_trace() {
  trace_.meta.source = "predicted";
  trace_.meta.schedule = s_.name;
  trace_.meta.num_ranks = s_.num_ranks;
  trace_.meta.num_stages = s_.num_stages;
  trace_.meta.num_micro_batches = s_.num_micro_batches;
  lane_events_.resize(static_cast<std::size_t>(s_.num_ranks) * traces::kNumLanes);
  rank_memory_.resize(static_cast<std::size_t>(s_.num_ranks));
  for (int rank = 0; rank < s_.num_ranks; ++rank) {
    trace_.rank_names.push_back("rank " + std::to_string(rank));
    rank_memory_[rank].push_back({rank, 0.0, ranks_[rank].memory_bytes});
    lane_events_[static_cast<std::size_t>(rank) * traces::kNumLanes].reserve(
        static_cast<std::size_t>(s_.rank_begin[rank + 1] - s_.rank_begin[rank]) / 2);
  }
}

void Engine::add_send_event(std::int32_t transfer, double end_s) {
  const CompiledTransfer& t = s_.transfers[transfer];
  const CompiledInstruction& send = s_.instructions[t.send_index];
  add_event(t.from_rank, traces::Lane::Send, send, posted_s_[transfer], end_s, "p2p");
  traces::TraceEvent& e = lane_events_[static_cast<std::size_t>(t.from_rank) * traces::kNumLanes + 1].back();
  e.peer_rank = t.to_rank;
  e.bytes = stage_[send.stage].activation_bytes;
}

// A pass's tensor-parallel collectives, as one event on the collectives lane ending where the
// pass's own part ends (Megatron interleaves them with the pass's kernels: their sum is what
// the pass waits for). They are part of the pass's compute time, not extra busy time.
void Engine::add_tensor_parallel_event(std::int32_t rank, const CompiledInstruction& ci, const StageCost& cost,
                                       double start) {
  const bool forward = ci.op == Op::ForwardPass;
  if (!forward && ci.op != Op::BackwardPass && ci.op != Op::BackwardInput) return;
  const double collectives_s = forward ? cost.tensor_parallel_f_s : cost.tensor_parallel_b_s;
  if (collectives_s <= 0) return;
  const double pass_end = start + (forward ? cost.f_s : cost.b_s);
  add_event(rank, traces::Lane::Collective, ci, pass_end - collectives_s, pass_end, "collective");
  lane_events_[static_cast<std::size_t>(rank) * traces::kNumLanes + static_cast<int>(traces::Lane::Collective)]
      .back()
      .name = forward ? "TP_F" : "TP_B";
  lane_events_[static_cast<std::size_t>(rank) * traces::kNumLanes + static_cast<int>(traces::Lane::Collective)]
      .back()
      .kind = forward ? traces::EventKind::TensorParallelForward : traces::EventKind::TensorParallelBackward;
}

// The all-to-all pieces of a step (or of a pass alone: `backward` then names the pass itself
// when it is a backward) as events on the all-to-all lane, with the bytes each rank sends and
// the expert-parallel group it sends them to (the simulator's ranks are pipeline ranks: the
// group's other members are not in the trace, so its size stands for the peers).
void Engine::add_all_to_all_events(std::int32_t rank, const CompiledInstruction& forward,
                                   const CompiledInstruction* backward, const OverlappedStep& step, double start) {
  for (const AllToAllPiece& piece : step.pieces) {
    const CompiledInstruction& pass = piece.backward_pass && backward ? *backward : forward;
    const ExpertAllToAll& a2a = stage_[pass.stage].all_to_all;
    add_event(rank, traces::Lane::AllToAll, pass, start + piece.start_s, start + piece.end_s, "collective");
    traces::TraceEvent& e =
        lane_events_[static_cast<std::size_t>(rank) * traces::kNumLanes + static_cast<int>(traces::Lane::AllToAll)]
            .back();
    e.kind = all_to_all_event_kind(piece.kind);
    e.name = traces::event_kind_name(e.kind);
    // The dispatch's reverse carries BF16 gradients even when the dispatch sent FP8.
    e.bytes = piece.kind == AllToAllPiece::Kind::DispatchF ? a2a.dispatch_bytes : a2a.combine_bytes;
  }
}

// Each all-to-all event's expert-parallel group, in args as a measured trace gives its peers
// (traces::Trace::args is kept in event order: the events are in their final places here).
void Engine::add_all_to_all_args() {
  for (std::size_t i = 0; i < trace_.events.size(); ++i) {
    const traces::TraceEvent& e = trace_.events[i];
    if (!traces::is_all_to_all(e.kind) || e.stage < 0) continue;
    const int group = stage_[static_cast<std::size_t>(e.stage)].all_to_all.group_size;
    trace_.args.push_back({i, fmt::format("{{\"group_size\": {}}}", group)});
  }
}

// The events of every (rank, lane) and the memory samples of every rank, each bucket already
// in time order but for the few lanes noted, as one trace.
traces::Trace Engine::assemble_trace(double iteration) {
  std::size_t total_events = 0, total_samples = 0;
  for (const auto& bucket : lane_events_) total_events += bucket.size();
  for (const auto& bucket : rank_memory_) total_samples += bucket.size();
  trace_.events.reserve(total_events);
  trace_.memory.reserve(total_samples);
  for (std::size_t b = 0; b < lane_events_.size(); ++b) {
    auto& bucket = lane_events_[b];
    // Shared links can finish transfers out of the order they were posted in, and sends
    // that end at their receive are recorded in the order of the receives.
    // An overlapped step records its all-to-all pieces by resource, not by start, and its two
    // passes' tensor-parallel collectives as each pass's part ends.
    const std::size_t lane = b % traces::kNumLanes;
    const bool sends_unordered =
        (links_mode_ || costs_.runtime.send_ends_at_receive) && lane == static_cast<std::size_t>(traces::Lane::Send);
    const bool collectives_unordered = any_all_to_all_ && (lane == static_cast<std::size_t>(traces::Lane::AllToAll) ||
                                                           lane == static_cast<std::size_t>(traces::Lane::Collective));
    if (sends_unordered || collectives_unordered)
      std::stable_sort(bucket.begin(), bucket.end(),
                       [](const traces::TraceEvent& x, const traces::TraceEvent& y) { return x.ts_us < y.ts_us; });
    std::move(bucket.begin(), bucket.end(), std::back_inserter(trace_.events));
  }
  for (auto& bucket : rank_memory_) trace_.memory.insert(trace_.memory.end(), bucket.begin(), bucket.end());
  if (any_all_to_all_) add_all_to_all_args();
  // The iteration outlasts the events by the step overhead; readers take it from here
  // (traces::iteration_time_us), as from a measured trace.
  if (costs_.runtime.step_overhead_s > 0) trace_.meta.run.step_time_s = iteration;
  return std::move(trace_);
}

}  // namespace pipescope::sim::event_loop
