// The event loop. Each rank runs ahead through its program as long as nothing it does
// touches shared state (compute, collectives, receives whose data has arrived); it stops at a
// receive whose data is not there yet, and, when links are shared, at a send that lies in the
// future, so that link bandwidth is divided among transfers in time order. Events are plain
// (time, id) pairs in a binary heap over a reserved vector: no allocation per event.
#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/simulator.hpp"
#include "pipescope/traces/bubble.hpp"
#include "link_model.hpp"
#include "memory_rules.hpp"

namespace pipescope::sim {
namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

// The core's is_compute, inlined for the event loop.
constexpr bool is_compute_op(Op op) {
  return op == Op::ForwardPass || op == Op::BackwardPass || op == Op::BackwardInput || op == Op::BackwardWeight;
}

// What the program runs for a time on a lane (computes, loads, collectives, the optimizer); the
// others are sends, receives and their waits.
constexpr bool is_timed_op(Op op) {
  return is_compute_op(op) || op == Op::LoadMicroBatch || op == Op::ReduceGrads || op == Op::ReduceTiedGrads ||
         op == Op::OptimizerStep;
}

struct Event {
  double time;
  std::int32_t id;        // >= 0: rank resumes; < 0: link ~id has a transfer finishing
  std::uint32_t version;  // link events: stale when the link changed since
};

struct EventLater {
  bool operator()(const Event& a, const Event& b) const {
    if (a.time != b.time) return a.time > b.time;
    return a.id > b.id;
  }
};

struct RankState {
  std::int32_t pc = 0;
  double clock_s = 0;  // when the previous instruction finished
  double busy_s = 0;
  double compute_s = 0;  // F, B, I, W only
  double first_compute_s = -1;
  double last_compute_end_s = 0;
  std::int64_t memory_bytes = 0;
  std::int64_t peak_bytes = 0;
  bool done = false;
  double recv_reached_s = -1;  // >= 0: waiting at a receive since then
  // Per barrier (optimizer_sync, reduce_tied_sync): got there, went through, when it got there.
  std::array<bool, 2> reached_barrier{};
  std::array<bool, 2> passed_barrier{};
  std::array<double, 2> barrier_arrival_s{};
  // An overlapped F&B step under way: its backward's instruction, and when the step ends.
  std::int32_t pair_backward_pc = -1;
  double pair_end_s = 0;
};

// An instruction every member rank must reach before any goes on (an all-reduce).
struct Barrier {
  int members = 0;
  int arrived = 0;
  double time_s = 0;  // the last arrival
  std::vector<std::int32_t> waiting;
};
constexpr int kOptimizerBarrier = 0;
constexpr int kTiedBarrier = 1;

class Engine {
 public:
  Engine(const CompiledSchedule& schedule, const CostModel& costs, const Topology& topology, const SimOptions& options)
      : s_(schedule), costs_(costs), topology_(topology), options_(options) {}

  SimResult run();

 private:
  void prepare_stages();
  void prepare_transfers();
  void prepare_trace();
  void prepare_barriers();
  Summary summarize() const;
  traces::Trace assemble_trace(double iteration);
  void run_rank(std::int32_t rank, double now);
  bool run_timed(std::int32_t rank, const CompiledInstruction& ci, bool starts_step, double& now);
  bool timed_duration(std::int32_t rank, const CompiledInstruction& ci, bool starts_step, double& now, double& duration,
                      traces::Lane& lane);
  bool pass_barrier(std::int32_t rank, const CompiledInstruction& ci, double& now, double& event_start);
  bool run_untimed(std::int32_t rank, const CompiledInstruction& ci, double& now);
  bool receive(std::int32_t rank, const CompiledInstruction& ci, double& now);
  void post_transfer(std::int32_t transfer, double now);
  bool wait_for_data(std::int32_t rank, const CompiledInstruction& compute, double& now);
  void arrive(std::int32_t transfer, double arrival_s);
  void push_link_event(std::int32_t link_id);
  void finish_link_event(const LinkEvent& event);
  void push(double time, std::int32_t id, std::uint32_t version = 0) {
    heap_.push_back({time, id, version});
    std::push_heap(heap_.begin(), heap_.end(), EventLater{});
  }
  int own_message_undelivered(std::int32_t peer, std::int32_t back_link, double now);
  void check_time_bound() const;
  void change_memory(std::int32_t rank, std::int64_t delta, double at_s);
  void add_send_event(std::int32_t transfer, double end_s);
  void add_tensor_parallel_event(std::int32_t rank, const CompiledInstruction& ci, const StageCost& cost, double start);
  void find_overlapped_steps();
  bool begin_overlapped_step(std::int32_t rank, const CompiledInstruction& forward, double& now, double& duration);
  double backward_duration_s(const CompiledInstruction& ci) const;
  void account_lone_all_to_all(std::int32_t rank, const CompiledInstruction& ci, double start);
  void add_all_to_all_events(std::int32_t rank, const CompiledInstruction& forward, const CompiledInstruction* backward,
                             const OverlappedStep& step, double start);
  void note_weight_pass(std::int32_t stage, double start_s, double duration_s) {
    weight_pass_start_s_[static_cast<std::size_t>(stage)] = start_s;
    weight_pass_s_[static_cast<std::size_t>(stage)] = duration_s;
  }
  void add_event(std::int32_t rank, traces::Lane lane, const CompiledInstruction& ci, double start, double end,
                 const char* category);
  [[noreturn]] void deadlock() const;

  const CompiledSchedule& s_;
  const CostModel& costs_;
  const Topology& topology_;
  const SimOptions& options_;
  bool links_mode_ = false;
  // Receives cost more while the receiving rank's own message to the sender is undelivered
  // (StageRuntimeEffects::recv_contended_s); tracked only when some stage says so.
  bool contention_ = false;
  // Per link (a directed pair of ranks with transfers): its posted transfers. Per link, not per
  // pair of ranks, which would be ranks x ranks lists.
  std::vector<std::vector<std::int32_t>> undelivered_;
  std::vector<std::int32_t> reverse_link_;  // per link (a -> b): the link b -> a, -1 when none
  std::vector<double> received_s_;          // per transfer: its receive's end; kUnknown before
  double now_s_ = 0;                        // time of the event being handled
  std::vector<StageCost> stage_;
  std::vector<StageRuntimeEffects> effects_;  // per stage
  std::vector<char> grad_buffer_held_;        // per stage
  // Per stage: start and length of its latest weight-gradient pass (BackwardPass or
  // BackwardWeight), which an overlapped gradient reduction runs beside.
  std::vector<double> weight_pass_start_s_, weight_pass_s_;
  std::vector<RankState> ranks_;
  // Per instruction: for a ForwardPass that starts an overlapped F&B step, its backward's index
  // and the transfer bringing that backward's input (-1: none); empty when nothing overlaps.
  std::vector<std::int32_t> pair_backward_;
  std::vector<std::int32_t> pair_input_transfer_;
  bool any_all_to_all_ = false;
  AllToAllTotals all_to_all_;
  LinkModel links_;                         // Links mode only
  std::vector<FinishedTransfer> finished_;  // what the link event being handled finished
  std::vector<double> arrival_s_;           // per transfer; kUnknown until it arrives
  std::vector<double> posted_s_;            // per transfer; only the trace reads it
  std::vector<char> receiver_waiting_;      // per transfer: who waits for its arrival (bits below)
  static constexpr char kReceiverWaits = 1;
  static constexpr char kSenderWaits = 2;  // torch's WaitSend*
  // optimizer_sync: ranks with an OptimizerStep; reduce_tied_sync: ranks of the first and the
  // last stage with a ReduceTiedGrads.
  std::array<Barrier, 2> barriers_{};
  std::vector<char> tied_member_;  // per rank
  std::vector<Event> heap_;
  traces::Trace trace_;
  // Trace events per (rank, lane) and memory samples per rank, each already in time order
  // (sends in Links mode excepted), so the trace needs no global sort.
  std::vector<std::vector<traces::TraceEvent>> lane_events_;
  std::vector<std::vector<traces::MemorySample>> rank_memory_;
};

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

void Engine::add_event(std::int32_t rank, traces::Lane lane, const CompiledInstruction& ci, double start, double end,
                       const char* category) {
  traces::TraceEvent e;
  e.rank = rank;
  e.lane = static_cast<int>(lane);
  e.name = std::string(op_action_type(ci.op));
  e.kind = traces::event_kind_of(ci.op);
  e.category = category;
  e.ts_us = start * 1e6;
  e.dur_us = (end - start) * 1e6;
  e.stage = ci.stage;
  e.micro_batch = ci.micro_batch;
  lane_events_[static_cast<std::size_t>(rank) * traces::kNumLanes + static_cast<int>(lane)].push_back(std::move(e));
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

// Which forwards start an overlapped F&B step: those the generator marked (DualPipeV), and
// under Megatron's --overlap-moe-expert-parallel-comm every forward whose rank next runs the
// full backward of another micro-batch (1F1B's and interleaved 1F1B's steady state). Only
// where either pass has an all-to-all to hide: a dense model's passes run as they always did.
void Engine::find_overlapped_steps() {
  for (const StageCost& c : stage_) any_all_to_all_ = any_all_to_all_ || c.all_to_all.any();
  if (!any_all_to_all_) return;
  const std::size_t n = s_.instructions.size();
  pair_backward_.assign(n, -1);
  pair_input_transfer_.assign(n, -1);
  for (std::int32_t rank = 0; rank < s_.num_ranks; ++rank) {
    const std::int32_t end = s_.rank_begin[rank + 1];
    for (std::int32_t i = s_.rank_begin[rank]; i < end; ++i) {
      const CompiledInstruction& f = s_.instructions[i];
      if (f.op != Op::ForwardPass) continue;
      std::int32_t j = i + 1;
      while (j < end && !is_compute_op(s_.instructions[j].op)) ++j;
      if (j == end) continue;
      const CompiledInstruction& b = s_.instructions[j];
      const bool marked = f.overlaps_next_backward && (b.op == Op::BackwardPass || b.op == Op::BackwardInput);
      const bool megatron = costs_.overlap_moe_all_to_all && b.op == Op::BackwardPass && b.micro_batch != f.micro_batch;
      if (!(marked || megatron)) continue;
      if (!stage_[f.stage].all_to_all.any() && !stage_[b.stage].all_to_all.any()) continue;
      pair_backward_[i] = j;
      // The backward's input: its receive between the two (SPEC semantics) or its own (torch's).
      if (s_.receives_post_only) {
        pair_input_transfer_[i] = b.transfer;
      } else {
        for (std::int32_t k = j - 1; k > i; --k) {
          const CompiledInstruction& recv = s_.instructions[k];
          if (recv.op == Op::RecvGrad && recv.stage == b.stage && recv.micro_batch == b.micro_batch) {
            pair_input_transfer_[i] = recv.transfer;
            break;
          }
        }
      }
    }
  }
}

double Engine::backward_duration_s(const CompiledInstruction& ci) const {
  const StageCost& c = stage_[ci.stage];
  if (ci.op == Op::BackwardInput) return c.b_s;
  return c.backward_pass_s() - effects_[ci.stage].weight_gradient_saving_s(ci.micro_batch);
}

// An overlapped step starts once both passes' inputs are there, as DualPipe and Megatron
// receive both before it: false while the backward's is not known yet (the rank waits for
// it). Otherwise `now` moves to the step's start, `duration` becomes the forward's part and
// the rank remembers when the step ends, which its backward runs up to.
bool Engine::begin_overlapped_step(std::int32_t rank, const CompiledInstruction& forward, double& now,
                                   double& duration) {
  RankState& r = ranks_[rank];
  const std::int32_t transfer = pair_input_transfer_[r.pc];
  if (transfer >= 0) {
    if (arrival_s_[transfer] == kUnknown) {
      r.clock_s = now;
      receiver_waiting_[transfer] |= kReceiverWaits;
      return false;
    }
    now = std::max(now, arrival_s_[transfer]);
  }
  const CompiledInstruction& backward = s_.instructions[pair_backward_[r.pc]];
  const StageCost& fc = stage_[forward.stage];
  const StageCost& bc = stage_[backward.stage];
  const double backward_s = backward_duration_s(backward);
  const OverlappedStep step = overlapped_step(fc.f_s - fc.all_to_all.forward_s(), fc.all_to_all,
                                              backward_s - bc.all_to_all.backward_s(), bc.all_to_all);
  duration = step.forward_end_s;
  r.pair_backward_pc = pair_backward_[r.pc];
  r.pair_end_s = now + step.length_s();
  all_to_all_.total_s += fc.all_to_all.forward_s() + bc.all_to_all.backward_s();
  all_to_all_.hidden_s += std::max(0.0, fc.f_s + backward_s - step.length_s());
  ++all_to_all_.overlapped_pairs;
  if (options_.build_trace) add_all_to_all_events(rank, forward, &backward, step, now);
  return true;
}

// A pass run alone: its all-to-all holds it up, all of it exposed; the trace shows where.
void Engine::account_lone_all_to_all(std::int32_t rank, const CompiledInstruction& ci, double start) {
  const StageCost& c = stage_[ci.stage];
  if (!c.all_to_all.any()) return;
  const bool forward = ci.op == Op::ForwardPass;
  all_to_all_.total_s += forward ? c.all_to_all.forward_s() : c.all_to_all.backward_s();
  if (!options_.build_trace) return;
  if (forward) {
    add_all_to_all_events(rank, ci, nullptr, overlapped_step(c.f_s - c.all_to_all.forward_s(), c.all_to_all, 0, {}),
                          start);
  } else {
    const double compute_s = backward_duration_s(ci) - c.all_to_all.backward_s();
    add_all_to_all_events(rank, ci, &ci, overlapped_step(0, {}, compute_s, c.all_to_all), start);
  }
}

// The all-to-all pieces of a step (or of a pass alone: `backward` then names the pass itself
// when it is a backward) as events on the collectives lane, with the bytes each rank sends.
void Engine::add_all_to_all_events(std::int32_t rank, const CompiledInstruction& forward,
                                   const CompiledInstruction* backward, const OverlappedStep& step, double start) {
  for (const AllToAllPiece& piece : step.pieces) {
    const CompiledInstruction& pass = piece.backward_pass && backward ? *backward : forward;
    const ExpertAllToAll& a2a = stage_[pass.stage].all_to_all;
    add_event(rank, traces::Lane::Collective, pass, start + piece.start_s, start + piece.end_s, "collective");
    traces::TraceEvent& e =
        lane_events_[static_cast<std::size_t>(rank) * traces::kNumLanes + static_cast<int>(traces::Lane::Collective)]
            .back();
    e.name = all_to_all_event_name(piece.kind);
    e.kind = traces::event_kind_from_name(e.name);
    // The dispatch's reverse carries BF16 gradients even when the dispatch sent FP8.
    e.bytes = piece.kind == AllToAllPiece::Kind::DispatchF ? a2a.dispatch_bytes : a2a.combine_bytes;
  }
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
      duration = cost.backward_pass_s() - effects.weight_gradient_saving_s(ci.micro_batch);
      if (ends_step) {
        duration = std::max(0.0, r.pair_end_s - now);
        r.pair_backward_pc = -1;
      } else if (any_all_to_all_) {
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
      duration = cost.w_s - effects.weight_gradient_saving_s(ci.micro_batch);
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
  double duration = 0;
  traces::Lane lane = traces::Lane::Compute;
  if (!timed_duration(rank, ci, starts_step, now, duration, lane)) return false;
  // The event starts when this rank got there, as a runtime records it.
  double event_start = now;
  if (!pass_barrier(rank, ci, now, event_start)) return false;
  const double end = now + duration;
  // After any barrier wait: the rules flip the stage's gradient-buffer flag (memory_rules.hpp).
  const MemoryChange memory = memory_change(ci.op, cost, grad_buffer_held_[ci.stage]);
  if (memory.grad_buffer_bytes > 0) change_memory(rank, memory.grad_buffer_bytes, now);
  const std::int64_t delta = memory.delta_bytes;
  // Allocations count from the start of an op, frees from its end.
  if (delta > 0) change_memory(rank, delta, now);
  if (options_.build_trace) {
    add_event(rank, lane, ci, event_start, end, lane == traces::Lane::Compute ? "compute" : "collective");
    add_tensor_parallel_event(rank, ci, cost, now);
  }
  if (delta < 0) change_memory(rank, delta, end);
  if (traces::counts_as_busy(lane)) r.busy_s += duration;
  if (is_compute_op(ci.op)) {
    if (r.first_compute_s < 0) r.first_compute_s = now;
    r.last_compute_end_s = end;
    r.compute_s += duration;
  }
  now = end + costs_.runtime.instruction_overhead_s;
  return true;
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

// No clock of the simulation can pass the sum of every instruction's longest cost and every
// transfer's: when that sum is not finite (or near it) the event loop would meet infinities,
// which it reads as "never" and reports as a deadlock.
void Engine::check_time_bound() const {
  const double overhead_s = costs_.runtime.instruction_overhead_s;
  // The longest an instruction can take, per (stage, op): a table, so that the walk below is
  // a lookup and an add per instruction.
  std::vector<double> longest(static_cast<std::size_t>(s_.num_stages) * kNumOps, 0.0);
  for (int stage = 0; stage < s_.num_stages; ++stage) {
    const StageCost& c = stage_[stage];
    const StageRuntimeEffects& e = effects_[stage];
    for (int op_index = 0; op_index < kNumOps; ++op_index) {
      double op_longest = 0;
      switch (static_cast<Op>(op_index)) {
        case Op::ForwardPass: op_longest = c.f_s; break;
        case Op::BackwardPass: op_longest = c.backward_pass_s(); break;
        case Op::BackwardInput: op_longest = c.b_s; break;
        case Op::BackwardWeight: op_longest = c.w_s; break;
        case Op::LoadMicroBatch: op_longest = c.load_s; break;
        case Op::ReduceGrads: op_longest = c.reduce_grads_s; break;
        case Op::ReduceTiedGrads: op_longest = c.reduce_tied_s; break;
        case Op::OptimizerStep: op_longest = c.optimizer_s; break;
        case Op::SendActivation:
        case Op::SendGrad: op_longest = e.send_s; break;
        case Op::RecvActivation:
        case Op::RecvGrad: op_longest = std::max(e.recv_s, e.recv_contended_s); break;
        case Op::WaitSendActivation:
        case Op::WaitSendGrad:
        case Op::WaitReduceGrads:
        case Op::Unshard:
        case Op::Reshard: break;
      }
      longest[static_cast<std::size_t>(stage) * kNumOps + op_index] = op_longest + overhead_s;
    }
  }
  // Four running sums, not one: the adds of one chain would wait for each other.
  std::array<double, 4> sums{costs_.runtime.step_overhead_s, 0.0, 0.0, 0.0};
  const std::size_t n = s_.instructions.size();
  for (std::size_t i = 0; i < n; ++i) {
    const CompiledInstruction& ci = s_.instructions[i];
    sums[i % 4] += longest[static_cast<std::size_t>(ci.stage) * kNumOps + static_cast<std::size_t>(ci.op)];
  }
  double bound_s = (sums[0] + sums[1]) + (sums[2] + sums[3]);
  for (std::size_t t = 0; t < s_.transfers.size(); ++t) {
    if (!links_mode_) {
      bound_s += costs_.c_s;
      continue;
    }
    bound_s += links_.unshared_time_s(static_cast<std::int32_t>(t));
  }
  if (!(bound_s <= kMaxSimulatedTimeS))
    throw CostOverflowError(
        fmt::format("the costs add up to {:g} s over the {} instructions of one iteration, more than "
                    "the simulator's clock holds ({:g} s)",
                    bound_s, s_.instructions.size(), kMaxSimulatedTimeS));
}

void Engine::deadlock() const {
  for (std::int32_t rank = 0; rank < s_.num_ranks; ++rank) {
    const RankState& r = ranks_[rank];
    // A rank at a barrier waits for the stuck one, not for a send.
    const bool at_barrier =
        (r.reached_barrier[0] && !r.passed_barrier[0]) || (r.reached_barrier[1] && !r.passed_barrier[1]);
    if (r.done || at_barrier) continue;
    const CompiledInstruction& ci = s_.instructions[r.pc];
    const Instruction instr{ci.op, ci.stage, ci.micro_batch};
    throw ScheduleError(s_.name + ": deadlock: rank " + std::to_string(rank) + ", step " +
                        std::to_string(s_.step_of(r.pc)) + ", instruction " + to_string(instr) +
                        " waits forever (its send is never posted)");
  }
  throw ScheduleError(s_.name + ": deadlock");
}

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

// Per stage its costs and effects; per rank its static memory and first instruction.
void Engine::prepare_stages() {
  costs_.check(s_.num_stages);
  links_mode_ = costs_.transfer_model == TransferModel::Links;
  stage_.resize(static_cast<std::size_t>(s_.num_stages));
  for (int s = 0; s < s_.num_stages; ++s) stage_[s] = costs_.stage(s);
  effects_.resize(static_cast<std::size_t>(s_.num_stages));
  for (int s = 0; s < s_.num_stages; ++s) effects_[s] = costs_.runtime.stage(s);
  grad_buffer_held_.assign(static_cast<std::size_t>(s_.num_stages), 0);
  find_overlapped_steps();
  weight_pass_start_s_.assign(static_cast<std::size_t>(s_.num_stages), 0.0);
  weight_pass_s_.assign(static_cast<std::size_t>(s_.num_stages), 0.0);

  ranks_.assign(static_cast<std::size_t>(s_.num_ranks), RankState{});
  for (int s = 0; s < s_.num_stages; ++s) {
    std::int64_t& held = ranks_[s_.stage_to_rank[s]].memory_bytes;
    if (__builtin_add_overflow(held, stage_[s].static_bytes, &held))
      throw UsageError(fmt::format("rank {}: its stages' static memory passes 2^63 bytes", s_.stage_to_rank[s]));
  }
  for (std::int32_t rank = 0; rank < s_.num_ranks; ++rank) {
    ranks_[rank].pc = s_.rank_begin[rank];
    ranks_[rank].peak_bytes = ranks_[rank].memory_bytes;
  }
}

// Per transfer its arrival (unknown yet) and waiters; the receive contention lists; the links.
void Engine::prepare_transfers() {
  const std::size_t num_transfers = s_.transfers.size();
  for (int s = 0; s < s_.num_stages && !contention_; ++s) contention_ = effects_[s].receives_contend();
  if (contention_) {
    undelivered_.assign(s_.links.size(), {});
    std::map<std::pair<int, int>, std::int32_t> link_of;
    for (std::size_t l = 0; l < s_.links.size(); ++l) link_of.emplace(s_.links[l], static_cast<std::int32_t>(l));
    reverse_link_.assign(s_.links.size(), -1);
    for (std::size_t l = 0; l < s_.links.size(); ++l)
      if (auto it = link_of.find({s_.links[l].second, s_.links[l].first}); it != link_of.end())
        reverse_link_[l] = it->second;
    received_s_.assign(num_transfers, kUnknown);
  }
  arrival_s_.assign(num_transfers, kUnknown);
  if (options_.build_trace) posted_s_.assign(num_transfers, 0.0);
  receiver_waiting_.assign(num_transfers, 0);
  if (links_mode_) {
    std::vector<std::int64_t> activation_bytes;
    activation_bytes.reserve(stage_.size());
    for (const StageCost& c : stage_) activation_bytes.push_back(c.activation_bytes);
    links_ = LinkModel::for_schedule(s_, activation_bytes, topology_, options_.share_links);
  }
}

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

// Which ranks each barrier waits for.
void Engine::prepare_barriers() {
  tied_member_.assign(static_cast<std::size_t>(s_.num_ranks), 0);
  for (std::int32_t rank = 0; rank < s_.num_ranks; ++rank) {
    // From the end, where the lowering puts them: a training program is read no further back
    // than its last step.
    bool steps = false, reduces_tied = false;
    for (std::int32_t i = s_.rank_begin[rank + 1] - 1; i >= s_.rank_begin[rank] && !(steps && reduces_tied); --i) {
      steps = steps || s_.instructions[i].op == Op::OptimizerStep;
      reduces_tied = reduces_tied || s_.instructions[i].op == Op::ReduceTiedGrads;
    }
    const bool holds_ends = s_.num_stages > 0 && (s_.stage_to_rank.front() == rank || s_.stage_to_rank.back() == rank);
    tied_member_[rank] = reduces_tied && holds_ends;
    if (costs_.runtime.optimizer_sync && steps) ++barriers_[kOptimizerBarrier].members;
    if (costs_.runtime.reduce_tied_sync && tied_member_[rank]) ++barriers_[kTiedBarrier].members;
  }
}

// Every rank done (else a deadlock), the iteration time, each rank's busy time, bubble, memory.
Summary Engine::summarize() const {
  Summary summary;
  summary.schedule = s_.name;
  summary.num_ranks = s_.num_ranks;
  summary.num_stages = s_.num_stages;
  summary.num_micro_batches = s_.num_micro_batches;
  summary.instructions = static_cast<std::int64_t>(s_.instructions.size());
  double iteration = 0;
  for (const RankState& r : ranks_) {
    if (!r.done) deadlock();
    iteration = std::max(iteration, r.clock_s);
  }
  if (!s_.instructions.empty()) iteration += costs_.runtime.step_overhead_s;
  summary.iteration_time_s = iteration;
  double bubble_sum = 0;
  for (std::int32_t rank = 0; rank < s_.num_ranks; ++rank) {
    const RankState& r = ranks_[rank];
    RankSummary rs;
    rs.rank = rank;
    rs.busy_s = r.busy_s;
    rs.bubble_fraction = traces::bubble_fraction_of(r.busy_s, iteration);
    rs.peak_memory_bytes = r.peak_bytes;
    if (r.first_compute_s >= 0)
      rs.internal_idle_s = std::max(0.0, r.last_compute_end_s - r.first_compute_s - r.compute_s);
    bubble_sum += rs.bubble_fraction;
    summary.ranks.push_back(rs);
  }
  summary.bubble_fraction = s_.num_ranks > 0 ? bubble_sum / s_.num_ranks : 0.0;
  summary.throughput_samples_per_s = iteration > 0 ? static_cast<double>(s_.num_micro_batches) *
                                                         costs_.micro_batch_size * costs_.data_parallel / iteration
                                                   : 0.0;
  return summary;
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
    // An overlapped step's all-to-all runs past its forward's tensor-parallel collectives.
    const std::size_t lane = b % traces::kNumLanes;
    const bool sends_unordered =
        (links_mode_ || costs_.runtime.send_ends_at_receive) && lane == static_cast<std::size_t>(traces::Lane::Send);
    const bool collectives_unordered = any_all_to_all_ && lane == static_cast<std::size_t>(traces::Lane::Collective);
    if (sends_unordered || collectives_unordered)
      std::stable_sort(bucket.begin(), bucket.end(),
                       [](const traces::TraceEvent& x, const traces::TraceEvent& y) { return x.ts_us < y.ts_us; });
    std::move(bucket.begin(), bucket.end(), std::back_inserter(trace_.events));
  }
  for (auto& bucket : rank_memory_) trace_.memory.insert(trace_.memory.end(), bucket.begin(), bucket.end());
  // The iteration outlasts the events by the step overhead; readers take it from here
  // (traces::iteration_time_us), as from a measured trace.
  if (costs_.runtime.step_overhead_s > 0) trace_.meta.run.step_time_s = iteration;
  return std::move(trace_);
}

}  // namespace

SimResult simulate(const CompiledSchedule& schedule, const CostModel& costs, const Topology& topology,
                   const SimOptions& options) {
  return Engine(schedule, costs, topology, options).run();
}

SimResult simulate(const Schedule& schedule, const CostModel& costs, const Topology& topology,
                   const SimOptions& options) {
  return simulate(compile(schedule), costs, topology, options);
}

}  // namespace pipescope::sim
