// The planner: for a model on a cluster, enumerate tensor-, context-, pipeline- and data-parallel
// sizes (tp x cp x pp x dp = GPUs), chunks, micro-batch size and count, schedule, recomputation,
// sequence parallelism and precision; refuse what does not divide, drop what does not fit in
// memory; rank the rest by simulated throughput, folding configurations that are the same run. Schedules are compiled once per shape and simulated
// once per cost model, without traces, so that thousands of configurations take seconds.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pipescope/sim/model.hpp"
#include "pipescope/sim/profile.hpp"
#include "pipescope/sim/simulator.hpp"

namespace pipescope::sim {

struct PlanRequest {
  ModelSpec model;
  DeviceSpec device;
  Topology topology;  // GPUs per node and links; the layout comes from each config
  int num_gpus = 64;
  int global_batch = 512;          // samples per iteration over all replicas
  std::int64_t max_mem_bytes = 0;  // per GPU; 0 means the device's memory
  // "zb-auto" may be added: it is searched per configuration with that configuration's costs
  // and the memory limit (in both placements), so it costs more than the others.
  std::vector<std::string> schedules{"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv"};
  std::vector<int> micro_batch_sizes{1, 2, 4, 8};
  std::vector<int> interleave_chunks{2, 4};  // for interleaved-1f1b and looped-bfs
  // Megatron's --microbatch-group-size-per-vp-stage for the schedules that take one
  // (interleaved-1f1b); 0: each candidate's pipeline size, Megatron's default.
  int microbatch_group_size = 0;
  // Tensor-parallel sizes T: each must fit in a node and divide the heads, the key/value heads
  // and the FFN width (tensor_parallel_problem); the others are refused with that reason.
  std::vector<int> tensor_parallel_sizes{1, 2, 4, 8};
  std::vector<Recomputation> recomputations{Recomputation::none, Recomputation::selective, Recomputation::full};
  // The module sets the selective rows try (Megatron's --recompute-modules), in the order of
  // preference among equal runs; empty: options.recompute_modules alone.
  std::vector<std::uint8_t> recompute_module_sets;
  // Sequence parallelism, tried where T > 1 (it has nothing to split at T = 1).
  std::vector<bool> sequence_parallel_options{false, true};
  // Context-parallel sizes C: each must split the sequence in 2C equal chunks
  // (context_parallel_problem); the others are refused with that reason.
  std::vector<int> context_parallel_sizes{1};
  // The exchanges context parallelism's rows try where C > 1 (Megatron's --cp-comm-type): each
  // is refused where it cannot run the model (context_parallel_problem: a2a needs a TP rank's
  // heads to divide by C, p2p and all_gather full attention). Empty: options.context_parallel_comm alone.
  std::vector<ContextParallelComm> context_parallel_comms;
  // Expert-parallel sizes E of a MoE model: each must divide the experts and, with the expert TP
  // size, the stage's T x C x d GPUs (expert_parallel_problem); the others are refused with that
  // reason. Empty: options.expert_parallel alone.
  std::vector<int> expert_parallel_sizes;
  // Expert tensor-parallel sizes (within a node, dividing the experts' FFN); empty:
  // options.expert_tensor_parallel alone (0: each row's tensor-parallel size).
  std::vector<int> expert_tensor_parallel_sizes;
  // Precisions tried: BF16 (Fp8Format::none) and/or an FP8 format.
  std::vector<Fp8Format> precisions{Fp8Format::none};
  // What every configuration takes beyond the searched sizes: the Megatron options of
  // ParallelConfig (TP communication overlap, the parameter gather's overlap, buckets, the
  // attention backend, the context-parallel exchange, FP8 parameters, layout options).
  ParallelConfig options;
  // Also try, for each pipeline x chunks, Megatron's uneven layouts where they describe the model
  // and differ from the even split (layout_choices): the embedding and the loss counted as layers
  // (--account-for-embedding/loss-in-pipeline-split), and the first and the last pipeline rank one
  // layer per chunk lighter than the others (--decoder-first/last-pipeline-num-layers). Only
  // where `options` names no layout of its own, and not with a profile.
  bool search_layouts = false;
  bool zero1 = true;                           // shard the optimizer state over the data-parallel group
  bool overlap_grad_reduce = false;            // ParallelConfig::overlap_grad_reduce, for every configuration
  bool async_tensor_parallel_backward = true;  // ParallelConfig's, for every configuration
  // Rank by the steady state of back-to-back iterations (steady_state.hpp), not one isolated
  // iteration; costs with a runtime that synchronises every optimizer step are refused.
  bool steady_state = false;
  int max_pipeline = 0;  // 0: up to the number of layers
  // 0: simulate every configuration. K > 0: only the best K rows are wanted, so
  // configurations are simulated in the order of a lower bound on their iteration time (the
  // busiest rank's compute plus its reductions and optimizer step) and the search stops when
  // that bound exceeds the K-th best simulated time; the first K rows are the same as with 0.
  std::size_t keep_best = 0;
  // Measured costs instead of model + device (`ppsim plan --profile`): the pipeline size,
  // data-parallel size and micro-batch size are the profile's (check_profile_request says
  // why a request asks for more); schedules, chunks (stages re-split layer by layer,
  // profile_for_stages) and the micro-batch count global_batch / (dp x mbs) are searched.
  // Recomputation is never considered (a profile measures runs without it); MFU and tokens/s
  // are 0 (the profile knows neither FLOPs nor sequence length). max_mem_bytes 0: no limit.
  std::optional<Profile> profile;
  std::string profile_source;  // the file, for messages
};

struct PlanCandidate {
  std::string schedule;
  ParallelConfig parallel;
  int num_micro_batches = 0;
};

struct PlanRow {
  PlanCandidate candidate;
  // Other choices that gave this very run (same sizes, the same compute order on every rank, the
  // same time and memory), folded into this row: "zb-h1", "recompute selective", ...
  std::vector<std::string> equivalents;
  // The rank programs' order of forwards and backwards (program_signature): rows fold only
  // within one.
  std::uint64_t program_signature = 0;
  double iteration_time_s = 0;
  double throughput_samples_per_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs / (GPUs x peak FLOP/s x time)
  double bubble_fraction = 0;
  std::int64_t peak_memory_bytes = 0;  // on the rank that needs most
};

struct PlanResult {
  std::vector<PlanRow> rows;  // fitting configurations, best throughput first
  std::int64_t limit_bytes = 0;
  int considered = 0;  // configurations enumerated
  int simulated = 0;   // those that fit in memory (a rank's peak is found before simulating)
  int dropped_for_memory = 0;
  // The schedule, the split or tensor parallelism could not honour the configuration; a
  // tensor-parallel size that does not divide the GPUs counts once (it has no layout).
  int refused = 0;
  int pruned = 0;                     // not simulated: their lower bound cannot reach the best keep_best
  int folded = 0;                     // rows folded into an equal one (PlanRow::equivalents)
  std::vector<std::string> refusals;  // why configurations were refused, one line per distinct reason
  // The refusals counted by what refused them ("the schedule", "tensor parallelism", ...), for
  // one summary line.
  std::map<std::string, int> refusals_by_cause;
};

// "refused 536: 300 by the schedule, 236 by tensor parallelism" (empty when nothing was refused).
std::string refusal_summary(const PlanResult& result);

// Pipeline ranks of the run a profile was measured on: the calibration's record
// (Profile::calibration, num_ranks) or, without it, one rank per measured stage.
int profile_pipeline_ranks(const Profile& profile);
// Processes of that run: pipeline ranks x data-parallel replicas.
int plan_profile_world_size(const Profile& profile);
// The micro-batch count of the calibrated run (the first, when several were calibrated
// together); 0 when the profile does not record it.
int profile_measured_micro_batches(const Profile& profile);
// The model the profile measured (Profile::model, recorded by ppsim calibrate), or "profiled model".
std::string profile_model_name(const Profile& profile);

// Throws UsageError, naming the profile and the option, when `request` asks the profile for
// what it cannot describe: another world size (num_gpus other than its pipeline ranks x
// data-parallel replicas), another micro-batch size, recomputation, tensor parallelism, or a
// global batch that is not a multiple of data-parallel x micro-batch size.
void check_profile_request(const PlanRequest& request);

// Every configuration the request allows (before tensor-parallel, memory and schedule checks):
// for each T dividing num_gpus, every pp x dp = num_gpus / T.
std::vector<PlanCandidate> enumerate_candidates(const PlanRequest& request);

// `progress(done, total)` is called now and then (the CLI draws a bar with it).
PlanResult plan(const PlanRequest& request, const std::function<void(std::size_t, std::size_t)>& progress = {});

// One candidate simulated in full, with its trace (for `ppsim plan --top K --trace-dir`).
// The layer layouts the search tries for `pipeline` x `chunks` stages of `layers` layers: the
// request's own (the even split where it names none), then, with search_layouts, each of
// Megatron's uneven layouts above that describes the model and puts a different number of layers
// on some stage than those before it.
std::vector<LayoutOptions> layout_choices(const PlanRequest& request, int layers, int pipeline, int chunks);

SimResult simulate_candidate(const PlanRequest& request, const PlanCandidate& candidate, bool build_trace = true);

// A lower bound on the iteration time: no rank can finish before its own compute, gradient
// reductions and optimizer step are done.
double iteration_time_lower_bound_s(const CostModel& costs, const std::vector<int>& stage_to_rank, int num_ranks,
                                    int num_micro_batches);

// A hash of every rank's order of forwards and backwards by stage and micro-batch (a
// BackwardInput counted as a BackwardPass, a BackwardWeight left out: where it runs shows in the
// time and the memory). Two configurations with the same sizes, signature, time and memory are
// one run (at one pipeline rank 1f1b, zb-h1 and zb-h2 are).
std::uint64_t program_signature(const CompiledSchedule& schedule);

// FLOPs of one sample's forward and backward (F + B + W over every layer and the head).
double model_flops_per_sample(const ModelSpec& model);

}  // namespace pipescope::sim
