// What a trace says about the run that produced it, beyond the schedule: the model, the
// machine, the step time and the executor's probes. `ppsim calibrate`, `ppsim compare` and the
// viewer read it; pprun and the simulator write it. On disk these are otherData fields of the
// trace (SPEC.md section 5), read and written only by the trace reader and writer: a field that
// is absent stays empty, one of the wrong type is a TraceError naming the file and the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pipescope::traces {

// One layer of the model as pprun split it (otherData "layers").
struct LayerDescription {
  std::string name;  // "blocks.3"
  std::string type;  // "MlpBlock"
  std::int64_t parameters = 0;
  // A mixture-of-experts layer's routed experts, all of them wherever they are placed, and
  // their parameters (part of `parameters`); absent for a dense layer and in older traces.
  std::optional<int> experts;
  std::optional<std::int64_t> expert_parameters;
  friend bool operator==(const LayerDescription&, const LayerDescription&) = default;
};

// Repeated timings of a full backward and of its two halves, in microseconds.
struct BackwardSplitTimes {
  std::vector<double> full_us;
  std::vector<double> input_us;
  std::vector<double> weight_us;
  friend bool operator==(const BackwardSplitTimes&, const BackwardSplitTimes&) = default;
};

// The executor's backward split probe of one stage, taken outside the timed iteration: the
// stage's own backward and, for the first stage, its layers after the first as an inner stage
// runs them (the first stage itself computes no input gradient). See sim/calibration.hpp.
struct BackwardSplitProbe {
  int stage = 0;
  BackwardSplitTimes own;
  std::optional<BackwardSplitTimes> inner;
  friend bool operator==(const BackwardSplitProbe&, const BackwardSplitProbe&) = default;
};

// The executor's expert-call probe of one MoE layer on one stage, taken outside the timed
// iteration: one local expert's forward (or its backward) on `rows` rows, timed `us.size()`
// times. The probe spreads the rows (a quarter to twice what a call got in the run), which the
// run's own calls, balanced by the router, hardly do: calibration takes a row's cost from it and
// so tells a call's fixed cost from its cost per row (sim/src/calibration/).
struct ExpertCallProbe {
  int stage = 0;
  std::string layer;  // the MoE layer ("blocks.2")
  bool backward = false;
  std::int64_t rows = 0;
  std::vector<double> us;
  friend bool operator==(const ExpertCallProbe&, const ExpertCallProbe&) = default;
};

// What the torch.profiler reader (torch_profiler.hpp) says of the run it read: the files it
// merged and the step it took from them (otherData "torch_profiler", an object with these keys).
struct TorchProfilerRun {
  std::vector<std::string> files;  // the per-rank trace files, in rank order
  // The ProfilerStep#N read (or the N-th repetition of the program where torch marked no
  // steps); none when the whole recording was read as one step (written as null).
  std::optional<int> step;
  // With a step: its ProfilerStep#N span's length and the CPU operators torch.profiler recorded
  // in it, each the mean of the ranks'. The profiler's own cost is paid per operator, inside
  // the durations (calibrate's --unprofiled-step-time takes it out).
  std::optional<double> step_duration_us;
  std::optional<double> operators_per_rank;
  friend bool operator==(const TorchProfilerRun&, const TorchProfilerRun&) = default;
};

// Every field is optional: plain Chrome traces and predicted traces carry few of them. The
// field names are the otherData keys.
struct RunDescription {
  // The run (pprun).
  std::optional<std::string> model;
  std::optional<int> data_parallel;
  std::optional<int> pipeline_ranks;
  std::optional<int> micro_batch_size;      // samples per micro-batch
  std::optional<double> gradient_clipping;  // max global gradient norm; 0: not clipped
  std::optional<std::string> device;        // "cpu" or "cuda"
  std::optional<std::string> dtype;         // compute dtype: "fp32", "bf16" or "fp16"
  std::optional<std::string> clock;         // "steady" or "steady+cuda-events"
  std::optional<int> threads_per_rank;
  std::optional<std::string> blas;
  std::optional<bool> bind_cores;
  std::optional<std::vector<std::string>> cores_per_rank;            // "0-3,8" per rank
  std::optional<std::vector<std::string>> transport_cores_per_rank;  // likewise
  // The model's layers and the partition into stages: stage s holds layers
  // [stage_bounds[s], stage_bounds[s + 1]).
  std::optional<std::vector<LayerDescription>> layers;
  std::optional<std::vector<int>> stage_bounds;
  std::optional<std::string> partition_method;
  // Activation recomputation: runs of this many layers of a stage kept as their input and
  // recomputed in the backward (1: every layer, full recomputation); 0: none.
  std::optional<int> recompute_layers;
  // Whether the runtime runs an overlapped F&B step (dualpipev's marked pairs) as one step, one
  // pass's experts' all-to-all beside the other's compute: said by the run, so that a trace
  // without such steps (1f1b) still tells calibration how this runtime runs them.
  std::optional<bool> overlapped_steps;
  // The step (pprun's events plus gathering the step's figures; the simulator's iteration with
  // its step overhead), in seconds.
  std::optional<double> step_time_s;
  // Per rank: time the host took from the rank's cores during the step, and the CPU time of
  // the rank's transport threads in the step.
  std::optional<std::vector<double>> stolen_time_s;
  std::optional<std::vector<double>> transport_cpu_s;
  std::optional<std::vector<BackwardSplitProbe>> backward_split_probe;
  std::optional<std::vector<ExpertCallProbe>> expert_call_probe;
  // A run read from torch.profiler's per-rank traces (absent for pprun's and the simulator's).
  std::optional<TorchProfilerRun> torch_profiler;

  friend bool operator==(const RunDescription&, const RunDescription&) = default;
};

}  // namespace pipescope::traces
