// The measured trace of a traced step: each rank's record of the step (its events on its own
// clock, the args of its all-to-all events, the backward split and expert-call probes) and the
// one trace rank 0 writes from every rank's record, with the run described for calibration and
// compare.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "pipescope/exec/engine.hpp"
#include "pipescope/exec/expert_parallel.hpp"
#include "pipescope/traces/trace.hpp"
#include "moe/expert_calls.hpp"
#include "pprun/rank_trace_record.hpp"
#include "pprun/run_plan.hpp"

namespace pipescope::exec {

// A traced step, kept until the last step is done.
struct TracedStep {
  int step;
  double iteration_time_s;              // this rank's wall time of the step (rank 0's is the metrics')
  std::vector<double> stolen_time_s;    // per rank (rank 0 gathers them); empty when unknown
  std::vector<double> transport_cpu_s;  // likewise
  StepResult result;
  std::vector<PipelineRuntime::BackwardSplitTiming> probe;
  std::vector<traces::ExpertCallProbe> expert_call_probe;  // MoE models (moe/expert_call_probe.hpp)
  std::string path;
  std::vector<std::pair<std::size_t, std::string>> args;  // of result.events (the all-to-all ones)
};

// A step's events and memory samples on the rank's own steady clock, with their args and the
// backward split and expert-call probes, as the rank hands them to rank 0.
RankTraceRecord rank_trace_record(const StepResult& r, const std::vector<PipelineRuntime::BackwardSplitTiming>& probe,
                                  const std::vector<traces::ExpertCallProbe>& expert_call_probe,
                                  const std::vector<std::pair<std::size_t, std::string>>& args);

// The all-to-all exchanges of a step's MoE layers as events on the all-to-all lane (after the
// step's own events), each with its peers, the rows per peer and the routing histogram in args.
void append_all_to_all_events(StepResult& result, std::vector<std::pair<std::size_t, std::string>>& args,
                              int world_rank, const std::vector<AllToAllRecord>& records);

// The args of the step's passes, for events of `result` that have no args yet (call it before
// append_all_to_all_events: args stay in event order), one object per pass:
// - the passes of overlapped F&B steps name the other pass (`overlapped_with`, "3B1") and say when
//   they computed (`computing_us`: [from, to] pairs, microseconds from their own start); the rest of
//   their span they waited for their all-to-all or for the other pass;
// - the experts' calls of MoE layers (`expert_calls`: [{"layer", "expert", "rows", "us"}, ...]),
//   forward calls in a forward, backward calls in a backward.
void append_pass_args(const StepResult& result, std::vector<std::pair<std::size_t, std::string>>& args,
                      const std::vector<moe::ExpertCallRecord>& calls);

// Rank 0's trace of `traced` from every rank's record (records[r] is rank r's), the earliest
// event of any rank at 0. `bound_cores`: the ranks ran on their own shares of the cores.
traces::Trace measured_trace(const RunPlan& plan, const TracedStep& traced, const std::vector<RankTraceRecord>& records,
                             bool bound_cores);

}  // namespace pipescope::exec
