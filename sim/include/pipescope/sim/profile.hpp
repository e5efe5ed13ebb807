// Measured costs (`pipescope.profile/1`): what `ppsim calibrate` extracts from a run of pprun
// and `ppsim simulate --profile FILE` reads back, closing the loop between prediction and
// measurement. One JSON object:
//   {"format": "pipescope.profile/1", "micro_batch_size": 1, "data_parallel": 1,
//    "transfer": {"latency_s": 5e-6, "bandwidth_bytes_per_s": 2.5e10},
//    "stages": [{"stage": 0, "f_s": .., "b_s": .., "w_s": .., "f_mem_bytes": .., "b_mem_bytes": ..,
//                "w_mem_bytes": .., "static_bytes": .., "activation_bytes": ..,
//                "optimizer_s": .., "reduce_grads_s": ..}, ...]}
// Optional fields (calibration.hpp; absent means 0): per stage "load_s", "reduce_tied_s",
// "full_backward_s", "send_s", "recv_s", "grad_buffer_bytes", "grad_accumulate_s", "moe_layers",
// and "recv_contended_s" (absent means recv_s); top level "all_to_all" (AllToAllProfile below: a
// MoE run's all-to-all costs and routing imbalance), "expert_compute" (ExpertComputeProfile
// below: its experts' cost per call and per row, and their gradients), "backward_split":
// "measured" (default), "unmeasured" (b_s holds the whole backward, w_s is 0: schedules with
// BackwardInput/BackwardWeight are refused) or "estimated" (b_s and w_s split the measured full
// backward as "backward_split_estimate" says: BackwardSplitEstimate below); top level
// "step_speed_spread" and "run_speed_spread" (StepSpeedSpread, RunSpeedSpread below: the interval of a prediction); top level "instruction_overhead_s" (program time
// between two instructions of a rank), "optimizer_sync" (true: the first optimizer step of
// each rank waits for every rank's, clipping by the global norm), "reduce_tied_sync" (true:
// the tied-gradient all-reduce of the first and last stage's ranks waits for both), "send_ends_at_receive"
// (true: a send's event lasts until its receive completed); costs.hpp says what they do.
// What the executor said about the run and what the calibration read (members of Profile: the
// model's "layers", "stage_bounds", "partition_method", "model", the record "calibration", and
// "inner_backward_split") are typed fields too, read and written only by profile.cpp. Unknown
// fields, and a known one of a shape this version does not read, are kept in `extra` and
// written back as they were.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipescope/sim/costs.hpp"
#include "pipescope/sim/topology.hpp"

namespace pipescope::sim {

struct StageProfile {
  int stage = 0;
  double f_s = 0;
  double b_s = 0;
  double w_s = 0;
  std::int64_t f_mem_bytes = 0;
  std::int64_t b_mem_bytes = 0;
  std::int64_t w_mem_bytes = 0;
  std::int64_t static_bytes = 0;
  std::int64_t activation_bytes = 0;
  double optimizer_s = 0;
  double reduce_grads_s = 0;
  double load_s = 0;
  double reduce_tied_s = 0;
  double full_backward_s = 0;   // 0: b_s + w_s
  double send_s = 0;            // StageRuntimeEffects::send_s
  double recv_s = 0;            // StageRuntimeEffects::recv_s
  double recv_contended_s = 0;  // StageRuntimeEffects::recv_contended_s; recv_s where a profile does not say
  std::int64_t grad_buffer_bytes = 0;
  double grad_accumulate_s = 0;  // StageRuntimeEffects::grad_accumulate_s
  // The stage's layers that run the experts' all-to-all (Profile::all_to_all): its f_s and b_s
  // are then net of it. Absent from a file: 0.
  int moe_layers = 0;

  friend bool operator==(const StageProfile&, const StageProfile&) = default;
};

// How a profile learnt from full backwards alone splits them into input and weight gradients:
// an estimate, not a measurement. Each stage listed has b_s = input_share x B x (1 + overhead)
// and w_s = (1 - input_share) x B x (1 + overhead), its measured B in full_backward_s. The
// uncertainties are the half-widths of the ranges the estimate may be off by; a prediction
// that uses the split is simulated at both ends of them (prediction_interval.hpp).
struct BackwardSplitEstimate {
  double input_share = 0.5;  // of a full backward's work, the input gradient's
  double overhead = 0;       // what I + W cost beyond B, as a fraction of B
  double input_share_uncertainty = 0.1;
  double overhead_uncertainty = 0.1;
  std::vector<int> stages;  // the measured stages whose split is estimated
  std::string basis;        // where input_share and overhead came from, for messages

  friend bool operator==(const BackwardSplitEstimate&, const BackwardSplitEstimate&) = default;
};

// How much faster or slower the calibration's steps ran than the profile's means: the relative
// standard deviation, over the traced steps, of each step's operations' time over the same
// operations at the profile's means. A prediction's interval comes from it.
struct StepSpeedSpread {
  double relative_sd = 0;
  int steps = 0;  // traced steps it was measured over

  friend bool operator==(const StepSpeedSpread&, const StepSpeedSpread&) = default;
};

// How much one run's speed differs from another's on the same host, as a whole: the relative
// standard deviation of the runs' mean step speeds. Measured when the calibration read traces of
// two runs or more (`runs` of them); from one run it cannot be seen (every step of a run shares
// its host's condition), and `runs` is 1: the figure is the one calibrate was told to assume
// (--run-spread). A prediction's interval holds it twice: the calibration run's and the measured run's.
struct RunSpeedSpread {
  double relative_sd = 0;
  int runs = 0;

  friend bool operator==(const RunSpeedSpread&, const RunSpeedSpread&) = default;
};

// A layer of the measured model as the executor reported it (traces' RunDescription::layers).
struct ProfileLayer {
  std::string name;
  std::string type;
  std::int64_t parameters = 0;

  friend bool operator==(const ProfileLayer&, const ProfileLayer&) = default;
};

// What `ppsim calibrate` recorded of its inputs (top level "calibration"); each field absent
// from a file stays absent when it is written back. `extra`: the record's other fields.
struct CalibrationRecord {
  std::optional<std::vector<std::string>> traces;     // the measured traces, as given
  std::optional<std::int64_t> traces_left_out;        // disturbed traces left out (written when > 0)
  std::optional<std::vector<std::string>> schedules;  // the schedules they ran
  std::optional<std::vector<int>> micro_batches;      // their micro-batch counts, ascending
  std::optional<int> num_ranks;                       // pipeline ranks of the measured run
  std::optional<std::int64_t> outliers;               // samples reported as outliers
  std::optional<std::string> duration_statistic;      // "median" or "mean"
  std::optional<double> profiler_overhead_factor;     // --unprofiled-step-time's scale of the costs
  nlohmann::json extra = nlohmann::json::object();

  friend bool operator==(const CalibrationRecord&, const CalibrationRecord&) = default;
};

// How a stage cut from the first one, behind another stage, splits its backward: the shares
// of a full backward the executor's probe measured for the first stage's later layers
// (calibration.hpp, kInnerBackwardSplitField).
struct InnerBackwardSplit {
  double input = 0;
  double weight = 0;

  friend bool operator==(const InnerBackwardSplit&, const InnerBackwardSplit&) = default;
};

// One all-to-all of `group_size` ranks, as calibration fitted it to the measured events' bytes
// and durations: latency_s + bytes / bandwidth_bytes_per_s (a bandwidth of 0: the bytes did not
// explain the durations, which are the latency alone).
struct AllToAllCost {
  int group_size = 2;
  double latency_s = 0;
  double bandwidth_bytes_per_s = 0;
  std::int64_t samples = 0;  // events it was fitted to

  double time_s(double bytes) const {
    return latency_s + (bandwidth_bytes_per_s > 0 ? bytes / bandwidth_bytes_per_s : 0.0);
  }
  friend bool operator==(const AllToAllCost&, const AllToAllCost&) = default;
};

// The experts' all-to-all of a mixture-of-experts run (top level "all_to_all"), learnt from the
// ALL_TO_ALL_* events of its traces. A stage's f_s and b_s hold its passes net of their
// all-to-all; cost_model_from_profile adds each MoE layer's dispatch and combine back, at the
// cost of the expert-parallel size simulated (none at E = 1).
struct AllToAllProfile {
  int expert_parallel = 1;          // E of the measured run
  int experts = 0;                  // routed experts per MoE layer (the routing histogram's length)
  std::vector<std::string> layers;  // the model's layers that ran an all-to-all
  // Bytes a rank sends to the other ranks of its group in one layer's all-to-all of each kind,
  // per micro-batch (the rows it keeps for its own experts cross no link).
  double dispatch_f_bytes = 0;
  double combine_f_bytes = 0;
  double dispatch_b_bytes = 0;
  double combine_b_bytes = 0;
  double imbalance = 1;             // the busiest expert's tokens over the mean, per routing histogram
  double rank_load = 1;             // the busiest expert-parallel rank's tokens over the mean (at E)
  std::vector<AllToAllCost> costs;  // one per group size measured
  // Whether the measured runtime ran an overlapped F&B step's two passes at once
  // (RuntimeEffects::overlapped_steps).
  bool overlapped_steps = false;
  // A rank's mean wait in an exchange for its group's last member to arrive: a cost of the
  // ranks meeting, added to every exchange at E > 1 (the measured passes are net of it). 0 in
  // profiles whose passes kept it.
  double member_wait_s = 0;
  // CPU time the transport's threads ran per exchange on the rank's own core (pprun
  // --bind-cores), taken from the compute that runs beside the exchange in an overlapped F&B
  // step; 0: unmeasured, or the transport has cores of its own.
  double transport_cpu_per_exchange_s = 0;

  // The cost of a group of `group_size`, or nullptr when none was measured.
  const AllToAllCost* cost_of(int group_size) const {
    for (const AllToAllCost& c : costs)
      if (c.group_size == group_size) return &c;
    return nullptr;
  }
  friend bool operator==(const AllToAllProfile&, const AllToAllProfile&) = default;
};

// One expert's forward or backward on the CPU or GPU, as calibration fitted it to the experts'
// calls of the measured passes: call_s + rows x row_s. An expert this small costs per call as
// much as per row, so a pass's expert time follows the number of local experts (X / E) as well
// as the rows. `per_row_only`: the rows did not vary enough to tell the two apart (or the fit
// gave a negative cost per call), and call_s is 0. `probe_samples`: the row counts of pprun's
// expert-call probe that gave row_s (call_s is then what the run's calls leave at their rows).
struct ExpertCallCost {
  double call_s = 0;
  double row_s = 0;
  std::int64_t samples = 0;  // calls it was fitted to
  bool per_row_only = false;
  std::int64_t probe_samples = 0;

  double time_s(double rows) const { return call_s + rows * row_s; }
  friend bool operator==(const ExpertCallCost&, const ExpertCallCost&) = default;
};

// The routed experts' own compute and gradients of a mixture-of-experts run (top level
// "expert_compute"), learnt from the expert calls pprun records in its passes and from the
// run description's expert parameters. A stage's f_s and b_s hold its passes net of their
// expert calls; cost_model_from_profile puts back, per MoE layer and pass, the X / E calls a
// rank makes at the expert-parallel size simulated, and adds the experts' gradients to the
// data-parallel reduction where D / E replicas hold the same experts.
struct ExpertComputeProfile {
  int expert_parallel = 1;  // E of the measured run
  int experts = 1;          // routed experts per MoE layer (X)
  // Rows a rank's local experts got in one MoE layer's forward, together (the mean): at any E
  // about tokens x top_k of a micro-batch, as dropless routing brings the rows of E replicas'
  // micro-batches to X / E experts.
  double rows_per_layer = 0;
  ExpertCallCost forward;
  ExpertCallCost backward;
  // The routed experts' parameters of one MoE layer, all X of them (0: unknown, no reduction
  // added), and what a parameter more costs the data-parallel reduction over the profile's
  // data_parallel replicas: its gradient's bytes over the measured link (0 when no link was
  // measured or the replicas were not reduced).
  std::int64_t expert_parameters_per_layer = 0;
  double reduce_s_per_parameter = 0;

  friend bool operator==(const ExpertComputeProfile&, const ExpertComputeProfile&) = default;
};

struct Profile {
  int micro_batch_size = 1;
  int data_parallel = 1;
  LinkSpec transfer{1e10, 0.0};
  std::vector<StageProfile> stages;  // ordered by stage, 0 .. n-1
  // False when the traces had no separate timing of the input and weight gradients.
  bool backward_split_measured = true;
  double instruction_overhead_s = 0;
  double step_overhead_s = 0;
  bool optimizer_sync = false;
  bool reduce_tied_sync = false;
  bool send_ends_at_receive = false;
  // Set when the split of a full backward was estimated (backward_split_measured is false).
  std::optional<BackwardSplitEstimate> backward_split_estimate;
  std::optional<StepSpeedSpread> step_speed_spread;
  std::optional<RunSpeedSpread> run_speed_spread;
  // What the executor said about the run (calibration's record_run): the model's layers, the
  // measured stages' bounds (stage s holds layers [stage_bounds[s], stage_bounds[s + 1])) and
  // the method that partitioned them; they let profile_for_stages split the layers again.
  std::optional<std::vector<ProfileLayer>> layers;
  std::optional<std::vector<int>> stage_bounds;
  std::optional<std::string> partition_method;
  std::optional<std::string> model;  // the model's name
  std::optional<CalibrationRecord> calibration;
  std::optional<InnerBackwardSplit> inner_backward_split;
  std::optional<AllToAllProfile> all_to_all;           // a MoE run's all-to-all; none for a dense model
  std::optional<ExpertComputeProfile> expert_compute;  // a MoE run's expert calls; none for older profiles
  // Fields this version does not know (or not in that shape), written back as they were.
  nlohmann::json extra = nlohmann::json::object();

  friend bool operator==(const Profile& a, const Profile& b) {
    return a.micro_batch_size == b.micro_batch_size && a.data_parallel == b.data_parallel &&
           a.backward_split_measured == b.backward_split_measured &&
           a.instruction_overhead_s == b.instruction_overhead_s && a.step_overhead_s == b.step_overhead_s &&
           a.optimizer_sync == b.optimizer_sync && a.reduce_tied_sync == b.reduce_tied_sync &&
           a.send_ends_at_receive == b.send_ends_at_receive && a.backward_split_estimate == b.backward_split_estimate &&
           a.step_speed_spread == b.step_speed_spread && a.run_speed_spread == b.run_speed_spread &&
           a.transfer.bandwidth_bytes_per_s == b.transfer.bandwidth_bytes_per_s &&
           a.transfer.latency_s == b.transfer.latency_s && a.stages == b.stages && a.layers == b.layers &&
           a.stage_bounds == b.stage_bounds && a.partition_method == b.partition_method && a.model == b.model &&
           a.calibration == b.calibration && a.inner_backward_split == b.inner_backward_split &&
           a.all_to_all == b.all_to_all && a.expert_compute == b.expert_compute && a.extra == b.extra;
  }
};

inline constexpr std::string_view kProfileFormat = "pipescope.profile/1";

// Throws UsageError whose message starts with `source` and names the field:
// "p.json: stages[2].f_s: must be a number >= 0".
Profile parse_profile(std::string_view text, const std::string& source);
Profile read_profile(const std::string& path);
std::string to_profile_json(const Profile& profile);
// Atomic: never leaves a partial file.
void write_profile(const Profile& profile, const std::string& path);

// Costs (Links transfer model) and the topology whose every link is the measured one. A MoE
// profile's all-to-all is added to its stages' passes at `expert_parallel` ranks (0: the
// measured E; 1: none); check_expert_parallel says whether the profile can.
CostModel cost_model_from_profile(const Profile& profile, int expert_parallel = 0);
// Throws UsageError naming `source` and the option when `expert_parallel` does not fit the
// profile: below 1, E > 1 for a dense profile, not dividing the experts or the data-parallel
// replicas, or a group size whose all-to-all was not measured.
void check_expert_parallel(const Profile& profile, int expert_parallel, const std::string& source);
Topology topology_from_profile(const Profile& profile);

}  // namespace pipescope::sim
