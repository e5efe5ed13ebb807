// Expert parallelism for mixture-of-experts layers (Megatron's placement): the E ranks of an
// expert-parallel group are E consecutive replicas of one pipeline rank (E divides the
// data-parallel size), each holding experts/E of every MoE layer's experts; tokens travel to
// their experts and back by all-to-all (dropless, per-rank split sizes). Expert gradients are
// summed over the expert data-parallel group (the replicas holding the same experts), the dense
// ones over the whole data-parallel group as before.
//
// A model's MoE layers share one ExpertParallel (ModelSpec::expert_parallel): it is made with the
// model spec, before any transport exists, and connected once the world is up (connect), before
// the runtime builds the stages. Unconnected, or with E = 1, every expert is local and no
// all-to-all runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "pipescope/exec/device.hpp"
#include "pipescope/exec/transport.hpp"
#include "pipescope/traces/event_kind.hpp"

namespace pipescope::exec {

// One all-to-all of a MoE layer, for the measured trace: a dispatch or a combine, in the
// forward (F) or in the backward (B): ALL_TO_ALL_DISPATCH_F, ALL_TO_ALL_COMBINE_F,
// ALL_TO_ALL_DISPATCH_B (the dispatch's backward, a combine's data flow), ALL_TO_ALL_COMBINE_B.
struct AllToAllRecord {
  traces::EventKind kind = traces::EventKind::Other;  // which exchange: ALL_TO_ALL_DISPATCH_F, ...
  double start_us = 0;                                // the steady clock, as the runtime's events (runtime/clock.hpp)
  double end_us = 0;
  std::int64_t bytes_sent = 0;
  std::int64_t bytes_received = 0;
  std::vector<int> peers;                       // world ranks of the group, in group order
  std::vector<std::int64_t> rows_sent;          // per peer (tokens, one row each)
  std::vector<std::int64_t> rows_received;      // per peer
  std::vector<std::int64_t> tokens_per_expert;  // the routing histogram of this rank's tokens (all experts)
  std::string layer;                            // the MoE layer's name ("blocks.2")
  int stage = -1;                               // the pass it served; -1 outside the runtime's passes
  int micro_batch = -1;
};

class ExpertParallel {
 public:
  // `size`: E, the ranks that share a layer's experts. `experts`: per MoE layer.
  ExpertParallel(int size, int experts);

  int size() const { return size_; }
  int experts() const { return experts_; }
  int experts_per_rank() const { return experts_ / size_; }
  // This rank's place in its group (0 until connected), and its experts [first, first + per rank).
  int rank() const { return rank_; }
  int first_expert() const { return rank_ * experts_per_rank(); }
  bool distributed() const { return group_ != nullptr; }

  // Builds the groups for the process at (replica, pipe_rank) of a num_replicas x pipeline_ranks
  // grid (world rank = replica x pipeline_ranks + pipe_rank): the expert-parallel group (E
  // consecutive replicas), then the expert data-parallel one (replicas with the same experts).
  // Every rank calls it at the same point, before the runtime. Throws UsageError when E does not
  // divide the replicas.
  void connect(Transport& world, int replica, int num_replicas, int pipe_rank, int pipeline_ranks,
               std::chrono::milliseconds timeout);
  // The group of the forward instructions' exchanges; the backward instructions' (a forward
  // recomputed inside a backward included) have one of their own, so that an overlapped F&B
  // step's two passes, on two threads, never issue collectives on one group: each group's
  // sequence is the same on every rank of the group, as they run the same instructions.
  Transport* group() const { return group_.get(); }
  Transport* backward_group() const { return backward_group_.get(); }
  Transport* group_for(bool backward) const { return backward ? backward_group() : group(); }
  // Null when no other replica holds the same experts.
  Transport* expert_data_parallel() const { return expert_data_parallel_.get(); }
  const std::vector<int>& group_world_ranks() const { return group_world_ranks_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // What the auxiliary load-balancing loss's gradient is multiplied by: the runtime sets it at
  // each step to what it scales each micro-batch's loss by (1 / (micro-batches x replicas),
  // times the loss scale with loss scaling), since the auxiliary loss is part of it.
  void set_aux_gradient_scale(double scale) { aux_gradient_scale_ = scale; }
  double aux_gradient_scale() const { return aux_gradient_scale_; }

  // The device the exchanged rows live on; set once, before the first exchange. Where it times
  // its own work (a GPU: an exchange starts on the device only once the compute queued before
  // it is done, and the host returns from a call before its kernels ran), the exchanges'
  // spans are the device's, in the clock of the passes' events; the CPU changes nothing.
  void time_on(std::shared_ptr<ComputeDevice> device) { device_ = std::move(device); }
  // How long a wait for an exchange may keep the core busy before it blocks (zero, the default:
  // it blocks at once). pprun sets it where each rank has cores of its own on the CPU: a rank
  // that sleeps in every exchange hands its core to the host hundreds of times a step
  // (docs/MOE-EXEC.md, "Waiting for an exchange"). An overlapped step's waiting pass never
  // spins: the other pass computes on the same core meanwhile.
  void set_spin_limit(std::chrono::microseconds limit) { spin_limit_ = limit; }
  std::chrono::microseconds spin_limit() const { return spin_limit_; }
  // The device's timing of an exchange about to be issued; none where the host's clock is the truth.
  std::unique_ptr<DeviceTiming> start_device_timing() const;

  // Thread-safe: the two passes of an overlapped step record from two threads. `timing`
  // (stopped once the exchanged rows are usable): its end replaces the record's, and its start
  // too unless `keeps_start` (an exchange that began on the host before its rows were issued:
  // the dispatch's count exchange, which the host waits for).
  void record(AllToAllRecord record, std::unique_ptr<DeviceTiming> timing = nullptr, bool keeps_start = false);
  // The records since the last call, oldest first; waits for the device where it timed them.
  std::vector<AllToAllRecord> take_records();

 private:
  int size_;
  int experts_;
  int rank_ = 0;
  std::unique_ptr<Transport> group_;
  std::unique_ptr<Transport> backward_group_;
  std::unique_ptr<Transport> expert_data_parallel_;
  std::vector<int> group_world_ranks_;
  std::chrono::milliseconds timeout_{60000};
  std::chrono::microseconds spin_limit_{0};
  double aux_gradient_scale_ = 1.0;
  struct DeviceSpan {
    std::unique_ptr<DeviceTiming> timing;  // null: the host's span stands
    bool keeps_start = false;
  };
  std::shared_ptr<ComputeDevice> device_;
  std::mutex mutex_;
  std::vector<AllToAllRecord> records_;
  std::vector<DeviceSpan> device_spans_;  // one per record
};

// Whether a parameter (StageModule's model-wide name, "layer3.expert5.fc1.weight") belongs to an
// expert of a MoE layer: those are reduced over the expert data-parallel group and stored in
// checkpoints by expert id.
bool is_expert_parameter(const std::string& name);
// The expert id in such a name (5 in "layer3.expert5.fc1.weight"); none for any other parameter.
std::optional<int> expert_id_of(const std::string& name);

}  // namespace pipescope::exec
