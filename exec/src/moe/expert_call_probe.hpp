// The expert-call probe: after the last traced step, one expert of each MoE layer a rank holds is
// timed alone, forward and backward, on a quarter, a half, once and twice the rows its calls got
// in the traced steps. The run's own calls may not tell a call's fixed cost from its cost per row:
// the router balances the experts, so their rows vary too little to fit a slope through them
// (docs/ACCURACY.md, "Where E = 1's over-prediction comes from"), and a profile learnt at one
// expert parallelism E mis-prices the calls at another, where a call gets E times the rows of
// E = 1's. Calibration takes the cost per row from the probe (traces' ExpertCallProbe).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pipescope/exec/device.hpp"
#include "pipescope/exec/runtime.hpp"
#include "pipescope/traces/run_description.hpp"
#include "moe/expert_calls.hpp"

namespace pipescope::exec::moe {

// The rows the probe gives an expert whose calls got `mean_rows` rows each: a quarter, a half,
// once and twice that, rounded, at least 1, ascending, each row count once.
std::vector<std::int64_t> expert_probe_rows(double mean_rows);

// The mean rows of an expert's forward call, per MoE layer of `calls`.
std::map<std::string, double> mean_rows_per_call(const std::vector<ExpertCallRecord>& calls);

// For each MoE layer of each stage `runtime` holds, its first local expert's forward and its
// backward (input and weight gradients, as a step computes them), each at expert_probe_rows of
// the layer's mean rows per call in `calls` (or, where `calls` has none of the layer's, of a
// micro-batch's share of an expert when the router spreads tokens evenly): one untimed warm-up
// and `repetitions` timed runs per row count, on `device`'s clock, in `compute_dtype` as the
// steps compute. One entry per (stage, layer, pass, rows), stages ascending. The weights, their
// gradients, the optimizer and the random streams of the run are left as they were.
std::vector<traces::ExpertCallProbe> probe_expert_calls(PipelineRuntime& runtime, const ModelSpec& model,
                                                        ComputeDevice& device, at::ScalarType compute_dtype,
                                                        const std::vector<ExpertCallRecord>& calls, int repetitions);

}  // namespace pipescope::exec::moe
