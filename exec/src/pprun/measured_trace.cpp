// The measured trace of a traced step (measured_trace.hpp).
#include "pprun/measured_trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "moe/moe_model.hpp"
#include "threads.hpp"

namespace pipescope::exec {

RankTraceRecord rank_trace_record(const StepResult& r, const std::vector<PipelineRuntime::BackwardSplitTiming>& probe,
                                  const std::vector<traces::ExpertCallProbe>& expert_call_probe,
                                  const std::vector<std::pair<std::size_t, std::string>>& args) {
  RankTraceRecord record;
  record.events = r.events;
  for (traces::TraceEvent& e : record.events) e.ts_us += r.origin_us;
  for (const auto& [index, text] : args) record.args.push_back({index, text});
  record.memory = r.memory;
  for (traces::MemorySample& m : record.memory) m.ts_us += r.origin_us;
  for (const auto& t : probe) {
    traces::BackwardSplitProbe entry{t.stage, {t.own.full_us, t.own.input_us, t.own.weight_us}, std::nullopt};
    if (!t.inner.full_us.empty())
      entry.inner = traces::BackwardSplitTimes{t.inner.full_us, t.inner.input_us, t.inner.weight_us};
    record.backward_split_probe.push_back(std::move(entry));
  }
  record.expert_call_probe = expert_call_probe;
  return record;
}

void append_all_to_all_events(StepResult& result, std::vector<std::pair<std::size_t, std::string>>& args,
                              int world_rank, const std::vector<AllToAllRecord>& records) {
  for (const auto& r : records) {
    traces::TraceEvent e;
    e.rank = world_rank;
    e.lane = static_cast<int>(traces::Lane::AllToAll);
    e.kind = r.kind;
    e.name = traces::event_kind_name(r.kind);
    e.category = "collective";
    e.ts_us = r.start_us - result.origin_us;
    e.dur_us = std::max(0.0, r.end_us - r.start_us);
    e.bytes = r.bytes_sent;
    e.stage = r.stage;
    e.micro_batch = r.micro_batch;
    args.emplace_back(result.events.size(), nlohmann::json{{"layer", r.layer},
                                                           {"peers", r.peers},
                                                           {"rows_sent", r.rows_sent},
                                                           {"rows_received", r.rows_received},
                                                           {"bytes_received", r.bytes_received},
                                                           {"tokens_per_expert", r.tokens_per_expert}}
                                                .dump());
    result.events.push_back(std::move(e));
  }
}

namespace {

using ArgsOfEvent = std::vector<nlohmann::json>;  // per event of the step: an object, or null for none

// The passes of the step's overlapped F&B steps: the other pass and when this one computed.
void add_overlapped_pass_args(const StepResult& result, ArgsOfEvent& of_event) {
  for (const StepResult::ComputeSpans& pass : result.overlapped_passes) {
    const double start_us = result.events.at(pass.event).ts_us;
    nlohmann::json computing = nlohmann::json::array();
    for (const auto& [from_us, to_us] : pass.computing_us) computing.push_back({from_us - start_us, to_us - start_us});
    nlohmann::json& args = of_event.at(pass.event);
    args["overlapped_with"] = pass.overlapped_with;
    args["computing_us"] = std::move(computing);
  }
}

// Each expert call in the forward or backward that ran it (a forward call in a forward, a
// backward call in a backward; in an overlapped F&B step the two passes' spans overlap, their
// kinds tell them apart).
void add_expert_call_args(const StepResult& result, const std::vector<moe::ExpertCallRecord>& calls,
                          ArgsOfEvent& of_event) {
  for (const auto& call : calls) {
    const double start_us = call.start_us - result.origin_us;
    for (std::size_t i = 0; i < result.events.size(); ++i) {
      const traces::TraceEvent& e = result.events[i];
      const bool forward = e.kind == traces::EventKind::Forward;
      const bool backward = e.kind == traces::EventKind::Backward || e.kind == traces::EventKind::BackwardInput;
      if ((call.backward ? !backward : !forward) || start_us < e.ts_us || start_us > e.ts_us + e.dur_us) continue;
      of_event[i]["expert_calls"].push_back(
          {{"layer", call.layer}, {"expert", call.expert}, {"rows", call.rows}, {"us", call.end_us - call.start_us}});
      break;
    }
  }
}

}  // namespace

void append_pass_args(const StepResult& result, std::vector<std::pair<std::size_t, std::string>>& args,
                      const std::vector<moe::ExpertCallRecord>& calls) {
  ArgsOfEvent of_event(result.events.size());
  add_overlapped_pass_args(result, of_event);
  add_expert_call_args(result, calls, of_event);
  // Readers find an event's args by bisection: in event order, one entry per event.
  for (std::size_t i = 0; i < of_event.size(); ++i)
    if (!of_event[i].is_null()) args.emplace_back(i, of_event[i].dump());
}

namespace {

// Whether this run's overlapped F&B steps ran as one (RuntimeOptions::overlap_paired_passes):
// only where the experts exchange tokens on the CPU, and, when the schedule has such steps, as
// rank 0's step shows (the runtime runs them one after the other where it cannot pair them).
bool ran_overlapped_steps(const RunPlan& plan, const StepResult& rank0) {
  const RunOptions& o = plan.options;
  if (o.no_overlap_moe_comm || o.device != "cpu" || o.expert_parallel < 2) return false;
  for (const Program& program : plan.schedule.programs)
    for (const Step& step : program)
      for (const Instruction& instr : step)
        if (instr.overlaps_next_backward) return rank0.overlapped_pairs > 0;
  return true;
}

}  // namespace

traces::Trace measured_trace(const RunPlan& plan, const TracedStep& traced, const std::vector<RankTraceRecord>& records,
                             bool bound_cores) {
  const int world_size = static_cast<int>(records.size());
  traces::Trace trace;
  trace.meta.source = "measured";
  trace.meta.schedule = plan.schedule.name;
  trace.meta.num_ranks = world_size;
  trace.meta.num_stages = plan.schedule.num_stages;
  trace.meta.num_micro_batches = plan.schedule.num_micro_batches;
  trace.meta.iteration = traced.step;
  traces::RunDescription& run = trace.meta.run;
  run.model = plan.options.model;
  run.data_parallel = plan.options.data_parallel;
  run.pipeline_ranks = plan.pipeline_ranks;
  run.device = plan.options.device;
  run.dtype = plan.options.dtype;
  run.clock = plan.options.device == "cuda" ? "steady+cuda-events" : "steady";
  // Calibration reads these: throughput is per sample, and an optimizer step waits for every
  // rank only when gradients are clipped globally.
  run.micro_batch_size = plan.options.micro_batch_size;
  run.gradient_clipping = 0.0;
  run.threads_per_rank = plan.options.threads_per_rank;
  run.blas = blas_description();
  // The step as --metrics has it: the events, then gathering the step's figures on rank 0
  // (calibration learns that part; readers take it as the iteration time).
  run.step_time_s = traced.iteration_time_s;
  // The backward split and expert-call probes, read by `ppsim calibrate` (sim/calibration.hpp);
  // viewers and compare ignore them. So do the cores each rank computed and communicated on,
  // bound or not: step times depend on how ranks share them.
  std::vector<traces::BackwardSplitProbe> split;
  std::vector<traces::ExpertCallProbe> expert_calls;
  std::vector<std::string> cores, transport_cores;
  for (const RankTraceRecord& record : records) {
    append_rank_trace(trace, record);
    split.insert(split.end(), record.backward_split_probe.begin(), record.backward_split_probe.end());
    expert_calls.insert(expert_calls.end(), record.expert_call_probe.begin(), record.expert_call_probe.end());
    cores.push_back(record.cores);
    transport_cores.push_back(record.transport_cores);
  }
  run.cores_per_rank = cores;
  run.transport_cores_per_rank = transport_cores;
  run.bind_cores = bound_cores;
  // Time the hypervisor took from each rank's cores during the step: calibration leaves
  // disturbed traces out, compare says so (stolen_time.hpp).
  if (!traced.stolen_time_s.empty()) run.stolen_time_s = traced.stolen_time_s;
  // CPU time of each rank's transport threads in the step: on a shared core it delays the
  // computation (thread_cpu_time.hpp); calibration reports it per message.
  if (!traced.transport_cpu_s.empty()) run.transport_cpu_s = traced.transport_cpu_s;
  if (!split.empty()) run.backward_split_probe = split;
  if (!expert_calls.empty()) run.expert_call_probe = expert_calls;  // models with experts only
  // The model's layers and their split: calibration predicts other stage counts layer by layer.
  run.layers.emplace();
  // A MoE block's experts too: their share of the stage's gradients depends on E.
  for (const auto& l : plan.model.layers) {
    traces::LayerDescription layer{l.name, l.type, l.parameters, std::nullopt, std::nullopt};
    if (l.type == kMoeBlockType) {
      layer.experts = plan.model.config.experts;
      layer.expert_parameters = moe_block_expert_parameters(plan.model.config);
    }
    run.layers->push_back(std::move(layer));
  }
  run.stage_bounds = plan.partition.bounds;
  run.partition_method = plan.options.partition_method;
  run.recompute_layers = plan.options.recompute_layers;
  run.overlapped_steps = ran_overlapped_steps(plan, traced.result);
  double origin = std::numeric_limits<double>::infinity();
  for (const auto& e : trace.events) origin = std::min(origin, e.ts_us);
  for (const auto& m : trace.memory) origin = std::min(origin, m.ts_us);
  for (auto& e : trace.events) e.ts_us -= origin;
  for (auto& m : trace.memory) m.ts_us -= origin;
  for (int r = 0; r < world_size; ++r) trace.rank_names.push_back(fmt::format("rank {}", r));
  return trace;
}

}  // namespace pipescope::exec
