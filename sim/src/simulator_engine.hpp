// The simulator's event loop, shared by the files that make it up (each one job): the loop, the
// rank interpreter and its transfers and barriers (simulator.cpp, the hot path), the set-up
// (simulator_setup.cpp), overlapped F&B steps (simulator_overlap.cpp), the trace recorder
// (simulator_trace.cpp) and the summary (simulator_summary.cpp). Internal to pipescope::sim:
// nothing outside sim/src includes it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <limits>
#include <vector>

#include "pipescope/sim/simulator.hpp"
#include "link_model.hpp"
#include "memory_rules.hpp"

namespace pipescope::sim::event_loop {

inline constexpr double kUnknown = std::numeric_limits<double>::infinity();

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
inline constexpr int kOptimizerBarrier = 0;
inline constexpr int kTiedBarrier = 1;

// One simulation of a compiled schedule: the ranks' states, the transfers', the barriers', the
// heap of events and what the trace records.
class Engine {
 public:
  Engine(const CompiledSchedule& schedule, const CostModel& costs, const Topology& topology, const SimOptions& options)
      : s_(schedule), costs_(costs), topology_(topology), options_(options) {}

  SimResult run();

 private:
  // simulator_setup.cpp: per stage, rank, transfer and barrier, before the loop starts.
  void prepare_stages();
  void prepare_transfers();
  void prepare_barriers();
  void check_time_bound() const;

  // simulator.cpp, the hot path: the rank interpreter, with the functions below up to the
  // overlapped steps. Declared inline (those the compiler used to fold into run_rank always),
  // defined there and called nowhere else: inlined into one another as when the loop was one
  // file's unnamed namespace. Without it the loop ran 47 % more instructions (docs/BENCHMARKS.md).
  inline void run_rank(std::int32_t rank, double now);
  [[gnu::always_inline]] inline bool timed_duration(std::int32_t rank, const CompiledInstruction& ci, bool starts_step,
                                                    double& now, double& duration, traces::Lane& lane);
  [[gnu::always_inline]] inline bool run_timed(std::int32_t rank, const CompiledInstruction& ci, bool starts_step,
                                               double& now);
  [[gnu::always_inline]] inline bool run_untimed(std::int32_t rank, const CompiledInstruction& ci, double& now);
  inline void change_memory(std::int32_t rank, std::int64_t delta, double at_s);
  void note_weight_pass(std::int32_t stage, double start_s, double duration_s) {
    weight_pass_start_s_[static_cast<std::size_t>(stage)] = start_s;
    weight_pass_s_[static_cast<std::size_t>(stage)] = duration_s;
  }
  void push(double time, std::int32_t id, std::uint32_t version = 0) {
    heap_.push_back({time, id, version});
    std::push_heap(heap_.begin(), heap_.end(), EventLater{});
  }

  // Sends, arrivals and receives.
  [[gnu::always_inline]] inline bool receive(std::int32_t rank, const CompiledInstruction& ci, double& now);
  [[gnu::always_inline]] inline bool wait_for_data(std::int32_t rank, const CompiledInstruction& compute, double& now);
  [[gnu::always_inline]] inline int own_message_undelivered(std::int32_t peer, std::int32_t back_link, double now);
  [[gnu::always_inline]] inline void post_transfer(std::int32_t transfer, double now);
  inline void arrive(std::int32_t transfer, double arrival_s);
  [[gnu::always_inline]] inline void push_link_event(std::int32_t link_id);
  [[gnu::always_inline]] inline void finish_link_event(const LinkEvent& event);

  // The barriers (optimizer_sync, reduce_tied_sync).
  [[gnu::always_inline]] inline bool pass_barrier(std::int32_t rank, const CompiledInstruction& ci, double& now,
                                                  double& event_start);

  // simulator_overlap.cpp: overlapped F&B steps and the experts' all-to-all.
  void find_overlapped_steps();
  double backward_duration_s(const CompiledInstruction& ci) const;
  double delayed_weight_gradient_s(const CompiledInstruction& ci) const;
  bool lone_backward_is_a_step(const CompiledInstruction& ci) const;
  OverlappedStep lone_backward_step(const CompiledInstruction& ci) const;
  // A lone backward's length as a combined step with no forward; counts what it hides.
  double lone_backward_step_s(const CompiledInstruction& ci, double alone_s);
  bool begin_overlapped_step(std::int32_t rank, const CompiledInstruction& forward, double& now, double& duration);
  void account_lone_all_to_all(std::int32_t rank, const CompiledInstruction& ci, double start);

  // simulator_trace.cpp: the trace recorder.
  void prepare_trace();
  inline void add_event(std::int32_t rank, traces::Lane lane, const CompiledInstruction& ci, double start, double end,
                        const char* category);
  void add_send_event(std::int32_t transfer, double end_s);
  void add_tensor_parallel_event(std::int32_t rank, const CompiledInstruction& ci, const StageCost& cost, double start);
  void add_all_to_all_events(std::int32_t rank, const CompiledInstruction& forward, const CompiledInstruction* backward,
                             const OverlappedStep& step, double start);
  void add_all_to_all_args();
  traces::Trace assemble_trace(double iteration);

  // simulator_summary.cpp
  Summary summarize() const;
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
  DeferredWeights deferred_;                  // Megatron's deferred output-layer weight gradients, per instruction
  std::vector<std::int32_t> flushed_before_;  // per rank: the instruction whose flush has run (-1)
  // Runs the flush of deferred weight gradients due before instruction `pc` (if any), once.
  inline void run_flush_before(std::int32_t rank, std::int32_t pc, double& now);
  // A compute of `duration` from `start` on the rank: its first compute, its last end, its total.
  inline void count_compute(RankState& r, double start, double duration);
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

// An event of the trace on a rank's lane. Here, inline: the hot path records one per instruction
// when it builds a trace.
inline void Engine::add_event(std::int32_t rank, traces::Lane lane, const CompiledInstruction& ci, double start,
                              double end, const char* category) {
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

}  // namespace pipescope::sim::event_loop
