// The event loop. Each rank runs ahead through its program as long as nothing it does
// touches shared state (compute, collectives, receives whose data has arrived); it stops at a
// receive whose data is not there yet, and, when links are shared, at a send that lies in the
// future, so that link bandwidth is divided among transfers in time order. Events are plain
// (time, id) pairs in a binary heap over a reserved vector: no allocation per event.
//
// This file is the loop's hot path: the rank interpreter with its sends, receives, arrivals and
// barriers, in one file and declared inline (simulator_engine.hpp says why). The set-up,
// overlapped F&B steps, the trace recorder and the summary are in simulator_*.cpp.
#include <algorithm>
#include <cstdint>
#include <optional>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/simulator.hpp"
#include "pipescope/traces/bubble.hpp"
#include "memory_rules.hpp"
#include "simulator_engine.hpp"

namespace pipescope::sim::event_loop {

SimResult Engine::run() {
  prepare_stages();
  prepare_transfers();
  if (options_.build_trace) prepare_trace();
  check_time_bound();
  prepare_barriers();
  heap_.reserve(static_cast<std::size_t>(s_.num_ranks) + s_.links.size() + 16);
  for (std::int32_t rank = 0; rank < s_.num_ranks; ++rank) push(0.0, rank);
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), EventLater{});
    const Event event = heap_.back();
    heap_.pop_back();
    now_s_ = event.time;
    if (event.id >= 0) {
      run_rank(event.id, std::max(event.time, ranks_[event.id].clock_s));
    } else {
      finish_link_event({~event.id, event.time, event.version});
    }
  }

  SimResult result;
  result.all_to_all = all_to_all_;
  result.summary = summarize();
  if (options_.build_trace) result.trace = assemble_trace(result.summary.iteration_time_s);
  return result;
}

void Engine::run_rank(std::int32_t rank, double now) {
  RankState& r = ranks_[rank];
  const std::int32_t end_pc = s_.rank_begin[rank + 1];
  const CompiledInstruction* instructions = s_.instructions.data();
  while (r.pc < end_pc) {
    const CompiledInstruction& ci = instructions[r.pc];
    // An overlapped F&B step waits for the backward's input too, before the forward's own.
    const bool starts_step = ci.op == Op::ForwardPass && !pair_backward_.empty() && pair_backward_[r.pc] >= 0;
    if (starts_step && ci.transfer >= 0 && pair_input_transfer_[r.pc] >= 0 &&
        arrival_s_[pair_input_transfer_[r.pc]] == kUnknown) {
      r.clock_s = now;
      receiver_waiting_[pair_input_transfer_[r.pc]] |= kReceiverWaits;
      return;
    }
    // Torch's semantics: a compute waits here for the data its posted receive brings.
    if (ci.transfer >= 0 && is_compute_op(ci.op) && !wait_for_data(rank, ci, now)) return;
    const bool handled = is_timed_op(ci.op) ? run_timed(rank, ci, starts_step, now) : run_untimed(rank, ci, now);
    if (!handled) return;
    ++r.pc;
  }
  // The program's time between instructions follows every instruction but the last.
  r.clock_s = end_pc > s_.rank_begin[rank] ? now - costs_.runtime.instruction_overhead_s : now;
  r.done = true;
}

// How long a timed instruction takes once it starts at `now`, and on which lane; false when an
// overlapped step cannot start yet (the rank waits).
bool Engine::timed_duration(std::int32_t rank, const CompiledInstruction& ci, bool starts_step, double& now,
                            double& duration, traces::Lane& lane) {
  RankState& r = ranks_[rank];
  const StageCost& cost = stage_[ci.stage];
  const StageRuntimeEffects& effects = effects_[ci.stage];
  const bool ends_step = r.pair_backward_pc == r.pc;
  switch (ci.op) {
    case Op::ForwardPass:
      duration = cost.f_s;
      if (starts_step) {
        if (!begin_overlapped_step(rank, ci, now, duration)) return false;
      } else if (any_all_to_all_) {
        account_lone_all_to_all(rank, ci, now);
      }
      break;
    // Micro-batch 0's weight gradient becomes the gradient sum: nothing to add it to.
    case Op::BackwardPass:
      duration = cost.backward_pass_s() - effects.weight_gradient_saving_s(ci.micro_batch) +
                 deferred_.pass_change_s(r.pc, cost);
      if (ends_step) {
        duration = std::max(0.0, r.pair_end_s - now);
        r.pair_backward_pc = -1;
      } else if (any_all_to_all_) {
        if (lone_backward_is_a_step(ci)) duration = lone_backward_step_s(ci, duration);
        account_lone_all_to_all(rank, ci, now);
      }
      note_weight_pass(ci.stage, now, duration);
      break;
    case Op::BackwardInput:
      duration = cost.b_s;
      if (ends_step) {
        duration = std::max(0.0, r.pair_end_s - now);
        r.pair_backward_pc = -1;
      } else if (any_all_to_all_) {
        account_lone_all_to_all(rank, ci, now);
      }
      break;
    case Op::BackwardWeight:
      duration = cost.w_s - effects.weight_gradient_saving_s(ci.micro_batch) + deferred_.pass_change_s(r.pc, cost);
      note_weight_pass(ci.stage, now, duration);
      break;
    case Op::LoadMicroBatch: duration = cost.load_s; break;
    // Overlapped, only what outlasts the backward holds the program up.
    case Op::ReduceGrads:
      duration = cost.reduce_grads_overlapped()
                     ? std::max(0.0, overlapped_reduce_grads_end_s(cost, weight_pass_start_s_[ci.stage],
                                                                   weight_pass_s_[ci.stage]) -
                                         now)
                     : cost.reduce_grads_s;
      lane = traces::Lane::Collective;
      break;
    case Op::ReduceTiedGrads:
      duration = cost.reduce_tied_s;
      lane = traces::Lane::Collective;
      break;
    case Op::OptimizerStep:
      duration = cost.optimizer_s;
      lane = traces::Lane::Collective;
      break;
    default: break;  // the untimed ones: run_untimed
  }
  return true;
}

// A compute, a load or a collective: its duration, any barrier before it, then its memory, its
// trace events and the rank's busy time. False when the rank waits (for an overlapped step's
// input or at a barrier).
bool Engine::run_timed(std::int32_t rank, const CompiledInstruction& ci, bool starts_step, double& now) {
  RankState& r = ranks_[rank];
  const StageCost& cost = stage_[ci.stage];
  if (deferred_.any()) run_flush_before(rank, r.pc, now);
  double duration = 0;
  traces::Lane lane = traces::Lane::Compute;
  if (!timed_duration(rank, ci, starts_step, now, duration, lane)) return false;
  // The event starts when this rank got there, as a runtime records it.
  double event_start = now;
  if (!pass_barrier(rank, ci, now, event_start)) return false;
  const double end = now + duration;
  // After any barrier wait: the rules flip the stage's gradient-buffer flag (memory_rules.hpp).
  const MemoryChange memory = memory_change(ci.op, cost, grad_buffer_held_[ci.stage], deferred_, r.pc);
  if (memory.grad_buffer_bytes + memory.deferred_bytes > 0)
    change_memory(rank, memory.grad_buffer_bytes + memory.deferred_bytes, now);
  const std::int64_t delta = memory.delta_bytes;
  // Allocations count from the start of an op, frees from its end.
  if (delta > 0) change_memory(rank, delta, now);
  if (options_.build_trace) {
    add_event(rank, lane, ci, event_start, end, lane == traces::Lane::Compute ? "compute" : "collective");
    add_tensor_parallel_event(rank, ci, cost, now);
  }
  if (delta < 0) change_memory(rank, delta, end);
  if (traces::counts_as_busy(lane)) r.busy_s += duration;
  if (is_compute_op(ci.op)) count_compute(r, now, duration);
  now = end + costs_.runtime.instruction_overhead_s;
  return true;
}

void Engine::count_compute(RankState& r, double start, double duration) {
  if (r.first_compute_s < 0) r.first_compute_s = start;
  r.last_compute_end_s = start + duration;
  r.compute_s += duration;
}

// Megatron's flush of the deferred output-layer weight gradients, before the rank's first
// reduction after its last backward: compute on the rank's lane, drawn as one W of the stage.
void Engine::run_flush_before(std::int32_t rank, std::int32_t pc, double& now) {
  const double flush_s = deferred_.flush_before_s(pc);
  if (flush_s <= 0 || flushed_before_[rank] == pc) return;
  flushed_before_[rank] = pc;
  RankState& r = ranks_[rank];
  const double end = now + flush_s;
  if (options_.build_trace)
    add_event(rank, traces::Lane::Compute, CompiledInstruction{Op::BackwardWeight, deferred_.flush_stage[pc]}, now, end,
              "compute");
  change_memory(rank, -deferred_.flush_bytes[pc], end);
  r.busy_s += flush_s;
  count_compute(r, now, flush_s);
  now = end + costs_.runtime.instruction_overhead_s;
}

// Clipping by the global norm: the first optimizer step of each rank waits for every rank's;
// the tied-gradient all-reduce waits for the other holders of the tied weights. False while
// members are missing (the rank waits); otherwise `now` moves to the last arrival and
// `event_start` to this rank's.
bool Engine::pass_barrier(std::int32_t rank, const CompiledInstruction& ci, double& now, double& event_start) {
  RankState& r = ranks_[rank];
  int barrier_id = -1;
  if (ci.op == Op::OptimizerStep && costs_.runtime.optimizer_sync) barrier_id = kOptimizerBarrier;
  if (ci.op == Op::ReduceTiedGrads && costs_.runtime.reduce_tied_sync && tied_member_[rank]) barrier_id = kTiedBarrier;
  if (barrier_id < 0 || r.passed_barrier[barrier_id]) return true;
  Barrier& barrier = barriers_[barrier_id];
  if (!r.reached_barrier[barrier_id]) {
    r.reached_barrier[barrier_id] = true;
    r.barrier_arrival_s[barrier_id] = now;
    ++barrier.arrived;
    barrier.time_s = std::max(barrier.time_s, now);
  }
  if (barrier.arrived < barrier.members) {
    r.clock_s = now;
    barrier.waiting.push_back(rank);
    return false;
  }
  for (std::int32_t waiting : barrier.waiting) push(std::max(barrier.time_s, ranks_[waiting].clock_s), waiting);
  barrier.waiting.clear();
  r.passed_barrier[barrier_id] = true;
  event_start = r.barrier_arrival_s[barrier_id];
  now = std::max(now, barrier.time_s);
  return true;
}

// Sends, receives and the waits and no-ops among them: they take the program's time (posting,
// a receive's own work) but no lane's. False when the rank waits.
bool Engine::run_untimed(std::int32_t rank, const CompiledInstruction& ci, double& now) {
  RankState& r = ranks_[rank];
  switch (ci.op) {
    case Op::SendActivation:
    case Op::SendGrad:
      // A shared link must see its transfers in time order: post only at the current time.
      if (links_mode_ && now > now_s_) {
        r.clock_s = now;
        push(now, rank);
        return false;
      }
      post_transfer(ci.transfer, now);
      if (contention_) {
        const CompiledTransfer& t = s_.transfers[ci.transfer];
        if (t.from_rank != t.to_rank) undelivered_[t.link].push_back(ci.transfer);
      }
      // Posting occupies the program (packing, handing over to the transport), not the link.
      now += effects_[ci.stage].send_s + costs_.runtime.instruction_overhead_s;
      return true;
    // Torch's wait for a send: until its data has arrived (a send with no WaitSend is waited
    // at the end of the step, which its receive outlasts anyway).
    case Op::WaitSendActivation:
    case Op::WaitSendGrad:
      if (ci.transfer >= 0) {
        if (arrival_s_[ci.transfer] == kUnknown) {
          r.clock_s = now;
          receiver_waiting_[ci.transfer] |= kSenderWaits;
          return false;
        }
        now = std::max(now, arrival_s_[ci.transfer]);
      }
      return true;
    case Op::RecvActivation:
    case Op::RecvGrad: return receive(rank, ci, now);
    // Collectives run synchronously here, so their wait has nothing left to wait for; and
    // pipescope never shards parameters, so (un)sharding has no work.
    default: return true;
  }
}

// A receive under SPEC semantics. False while its data is not known yet, or while whether the
// rank's own message contends depends on what the peer does first.
bool Engine::receive(std::int32_t rank, const CompiledInstruction& ci, double& now) {
  RankState& r = ranks_[rank];
  const double overhead_s = costs_.runtime.instruction_overhead_s;
  if (s_.receives_post_only) {  // torch: posting costs the program its overhead only
    now += overhead_s;
    return true;
  }
  const double arrival = arrival_s_[ci.transfer];
  if (arrival == kUnknown) {
    r.clock_s = now;
    r.recv_reached_s = now;
    receiver_waiting_[ci.transfer] |= kReceiverWaits;
    return false;
  }
  // A receive that waited for its data ends when the data is there (the calibrated latency is
  // measured that way); one whose data was there when it began costs its own work. Which of
  // the two it was is a matter of times, not of the order in which the event loop met the send
  // and the receive: a rank can reach a receive before the loop has posted its send, and still
  // find the data there at that time.
  const StageRuntimeEffects& effects = effects_[ci.stage];
  const bool waited = r.recv_reached_s >= 0;
  const double reached = waited ? r.recv_reached_s : now;
  const bool data_there = arrival <= reached;
  double own_work_s = effects.received_data_s(false);
  if (data_there && contention_) {
    const CompiledTransfer& t = s_.transfers[ci.transfer];
    const std::int32_t back_link = reverse_link_[t.link];
    const int contended = back_link < 0 ? 0 : own_message_undelivered(t.from_rank, back_link, reached);
    if (contended < 0) {  // the peer has not got that far: ask again when the clock has
      r.clock_s = now;
      push(now, rank);
      return false;
    }
    own_work_s = effects.received_data_s(contended > 0);
  }
  r.recv_reached_s = -1;
  const double done = data_there ? reached + own_work_s : std::max(now, arrival);
  if (contention_) received_s_[ci.transfer] = done;
  if (options_.build_trace) {
    add_event(rank, traces::Lane::Recv, ci, reached, done, "p2p");
    const CompiledTransfer& t = s_.transfers[ci.transfer];
    traces::TraceEvent& e = lane_events_[static_cast<std::size_t>(rank) * traces::kNumLanes + 2].back();
    e.peer_rank = t.from_rank;
    e.bytes = stage_[s_.instructions[t.send_index].stage].activation_bytes;
    trace_.flows.push_back({t.from_rank, static_cast<int>(traces::Lane::Send), posted_s_[ci.transfer] * 1e6, rank,
                            static_cast<int>(traces::Lane::Recv), done * 1e6});
    if (costs_.runtime.send_ends_at_receive) add_send_event(ci.transfer, done);
  }
  now = done + overhead_s;
  return true;
}

// Torch's semantics: the compute waits for the data of its posted receive. False when the data
// is not known yet (the rank stops until it arrives); otherwise `now` moves past the arrival and
// the receive's own work, and the wait is recorded on the receive lane, as torch's runtime
// shows it. Receive contention is not modelled for posted receives.
bool Engine::wait_for_data(std::int32_t rank, const CompiledInstruction& compute, double& now) {
  RankState& r = ranks_[rank];
  const double arrival = arrival_s_[compute.transfer];
  if (arrival == kUnknown) {
    r.clock_s = now;
    if (r.recv_reached_s < 0) r.recv_reached_s = now;
    receiver_waiting_[compute.transfer] |= kReceiverWaits;
    return false;
  }
  const double reached = r.recv_reached_s >= 0 ? r.recv_reached_s : now;
  r.recv_reached_s = -1;
  const bool data_there = arrival <= reached;
  const double done = data_there ? reached + effects_[compute.stage].received_data_s(false) : std::max(now, arrival);
  const CompiledTransfer& t = s_.transfers[compute.transfer];
  if (options_.build_trace) {
    add_event(rank, traces::Lane::Recv, s_.instructions[t.recv_index], reached, done, "p2p");
    traces::TraceEvent& e = lane_events_[static_cast<std::size_t>(rank) * traces::kNumLanes + 2].back();
    e.peer_rank = t.from_rank;
    e.bytes = stage_[compute.stage].activation_bytes;
    trace_.flows.push_back({t.from_rank, static_cast<int>(traces::Lane::Send), posted_s_[compute.transfer] * 1e6, rank,
                            static_cast<int>(traces::Lane::Recv), done * 1e6});
    if (costs_.runtime.send_ends_at_receive) add_send_event(compute.transfer, done);
  }
  if (contention_) received_s_[compute.transfer] = done;
  now = done;
  return true;
}

// 1 when a message of a rank to `peer` (on `back_link`), posted by `now`, is still undelivered
// at `now` (its receive ends later), 0 when none is, -1 when that depends on what the peer does
// before `now` and the event loop has not got there yet. Delivered messages leave the list: the
// only one to ask about it is the sending rank, at times that only grow.
int Engine::own_message_undelivered(std::int32_t peer, std::int32_t back_link, double now) {
  auto& posted = undelivered_[back_link];
  bool contended = false, unknown = false;
  std::size_t kept = 0;
  for (const std::int32_t id : posted) {
    const double received = received_s_[id];
    if (received <= now) continue;
    posted[kept++] = id;
    if (received != kUnknown) {
      contended = true;
    } else if ((arrival_s_[id] != kUnknown && arrival_s_[id] > now) || ranks_[peer].clock_s >= now) {
      contended = true;  // its receive cannot end before the data is there or the peer gets to it
      // (an arrival not known yet may still lie before now: a shared link's transfer ends in
      // the event loop's time, which can be behind this rank's)
    } else {
      unknown = true;
    }
  }
  posted.resize(kept);
  if (contended) return 1;
  // At the event loop's own time every earlier event is done: a peer that has not received it
  // yet is waiting for something that comes no earlier than now.
  if (unknown) return now > now_s_ ? -1 : 1;
  return 0;
}

void Engine::post_transfer(std::int32_t transfer, double now) {
  if (options_.build_trace) posted_s_[transfer] = now;
  const CompiledTransfer& t = s_.transfers[transfer];
  if (!links_mode_) {
    arrive(transfer, now + costs_.c_s);
    return;
  }
  if (const std::optional<double> arrival = links_.post(transfer, now))
    arrive(transfer, *arrival);
  else
    push_link_event(t.link);
}

void Engine::arrive(std::int32_t transfer, double arrival_s) {
  arrival_s_[transfer] = arrival_s;
  const CompiledTransfer& t = s_.transfers[transfer];
  if (options_.build_trace && !costs_.runtime.send_ends_at_receive) add_send_event(transfer, arrival_s);
  if (receiver_waiting_[transfer] & kReceiverWaits) push(std::max(ranks_[t.to_rank].clock_s, arrival_s), t.to_rank);
  if (receiver_waiting_[transfer] & kSenderWaits) push(std::max(ranks_[t.from_rank].clock_s, arrival_s), t.from_rank);
  receiver_waiting_[transfer] = 0;
}

// Events of the heap that name a link: ~link, so that they sort after the ranks' at one time.
void Engine::push_link_event(std::int32_t link_id) {
  if (const std::optional<LinkEvent> next = links_.next_event(link_id)) push(next->time_s, ~link_id, next->version);
}

// The link's transfers done now arrive (in the order they were posted), then the link plans
// its next finish.
void Engine::finish_link_event(const LinkEvent& event) {
  finished_.clear();
  if (!links_.finish(event, finished_)) return;
  for (const FinishedTransfer& done : finished_) arrive(done.transfer, done.arrival_s);
  push_link_event(event.link);
}

void Engine::change_memory(std::int32_t rank, std::int64_t delta, double at_s) {
  if (delta == 0) return;
  RankState& r = ranks_[rank];
  // Checked: figures near the limit of their options (2^60 bytes) held by many micro-batches at
  // once would wrap to a small or negative peak.
  if (__builtin_add_overflow(r.memory_bytes, delta, &r.memory_bytes))
    throw UsageError(
        fmt::format("rank {}: the memory it holds passes 2^63 bytes: the memory figures are too large for "
                    "this many micro-batches in flight",
                    rank));
  r.peak_bytes = std::max(r.peak_bytes, r.memory_bytes);
  if (options_.build_trace) rank_memory_[rank].push_back({rank, at_s * 1e6, r.memory_bytes});
}

}  // namespace pipescope::sim::event_loop

namespace pipescope::sim {

SimResult simulate(const CompiledSchedule& schedule, const CostModel& costs, const Topology& topology,
                   const SimOptions& options) {
  return event_loop::Engine(schedule, costs, topology, options).run();
}

SimResult simulate(const Schedule& schedule, const CostModel& costs, const Topology& topology,
                   const SimOptions& options) {
  return simulate(compile(schedule), costs, topology, options);
}

}  // namespace pipescope::sim
