// The measured trace of a traced step (pprun/measured_trace.hpp), from hand-made step results.
// Expected:
// - rank_trace_record puts a step's events and memory samples on the rank's steady clock (each
//   ts_us + origin_us = 1000), keeps the args by event index, and turns the probe into the
//   trace's form: stage 1's inner part, which it lacks, is left out; stage 0's is kept; the
//   expert-call probe's entries go in as they are.
// - append_all_to_all_events adds an exchange after the step's own events on the Collective
//   lane, relative to the step's origin (1000 + 30 -> 30), lasting end - start (12 us; never
//   below 0), with its peers, rows and routing histogram in args under the event's index (2).
// - measured_trace takes records[r] as rank r: 2 ranks, names "rank 0" and "rank 1", rank 1's
//   events after rank 0's, the earliest event or sample of any rank at 0 (rank 1's at 400 of
//   the shared clock, so rank 0's event at 1000 lands at 600), one core list per rank, both
//   ranks' probes in rank order (the backward split's and the expert-call one's), the plan's
//   schedule, layers, bounds and options, the step's time, and no stolen or transport CPU time
//   when the step has none; records without expert-call entries (models without experts) leave
//   expert_call_probe out.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "pipescope/traces/event_kind.hpp"
#include "pprun/measured_trace.hpp"

using namespace pipescope;
using namespace pipescope::exec;

namespace {

traces::TraceEvent measured_test_event(int rank, const std::string& name, double ts_us, double dur_us) {
  traces::TraceEvent e;
  e.rank = rank;
  e.lane = 0;
  e.name = name;
  e.kind = traces::event_kind_from_name(name);
  e.category = "compute";
  e.ts_us = ts_us;
  e.dur_us = dur_us;
  return e;
}

StepResult measured_test_step(int rank) {
  StepResult r;
  r.origin_us = 1000;
  r.events = {measured_test_event(rank, "F0", 0, 5), measured_test_event(rank, "B0", 10, 8)};
  r.memory = {{rank, 2, 4096}};
  return r;
}

RunPlan measured_test_plan() {
  RunPlan plan;
  plan.options.model = "tiny-gpt";
  plan.options.dtype = "bf16";
  plan.options.partition_method = "uniform";
  plan.options.recompute_layers = 2;
  plan.schedule.name = "1f1b";
  plan.schedule.num_stages = 2;
  plan.schedule.num_micro_batches = 4;
  plan.world_size = 2;
  plan.pipeline_ranks = 2;
  plan.partition.bounds = {0, 1, 2};
  for (const char* name : {"blocks.0", "blocks.1"}) {
    LayerSpec layer;
    layer.name = name;
    layer.type = "TransformerBlock";
    layer.parameters = 640;
    plan.model.layers.push_back(layer);
  }
  return plan;
}

}  // namespace

TEST_CASE("measured trace: a rank's record is on its own clock, with its args and probe") {
  const StepResult step = measured_test_step(0);
  PipelineRuntime::BackwardSplitTiming first{0, {{4.0}, {1.0}, {3.0}}, {{2.0}, {0.5}, {1.5}}};
  PipelineRuntime::BackwardSplitTiming last{1, {{6.0}, {2.0}, {4.0}}, {}};
  const std::vector<traces::ExpertCallProbe> expert_calls = {{1, "blocks.1", false, 16, {3.0, 3.5}},
                                                             {1, "blocks.1", true, 16, {7.0, 7.5}}};
  const RankTraceRecord record = rank_trace_record(step, {first, last}, expert_calls, {{1, R"({"layer":"blocks.0"})"}});
  REQUIRE(record.events.size() == 2);
  CHECK(record.events[0].ts_us == 1000);
  CHECK(record.events[1].ts_us == 1010);
  CHECK(record.events[1].dur_us == 8);
  REQUIRE(record.memory.size() == 1);
  CHECK(record.memory[0].ts_us == 1002);
  REQUIRE(record.args.size() == 1);
  CHECK(record.args[0].event == 1);
  CHECK(record.args[0].json == R"({"layer":"blocks.0"})");
  REQUIRE(record.backward_split_probe.size() == 2);
  CHECK(record.backward_split_probe[0].stage == 0);
  CHECK(record.backward_split_probe[0].own.full_us == std::vector<double>{4.0});
  REQUIRE(record.backward_split_probe[0].inner.has_value());
  CHECK(record.backward_split_probe[0].inner->weight_us == std::vector<double>{1.5});
  CHECK(record.backward_split_probe[1].stage == 1);
  CHECK_FALSE(record.backward_split_probe[1].inner.has_value());
  // Compared as one bool: LibTorch's logging header would print the vectors and cannot.
  const bool same_expert_calls = record.expert_call_probe == expert_calls;
  CHECK(same_expert_calls);
}

TEST_CASE("measured trace: an all-to-all exchange follows the step's events on the all-to-all lane") {
  StepResult step = measured_test_step(1);
  std::vector<std::pair<std::size_t, std::string>> args;
  AllToAllRecord exchange;
  exchange.kind = traces::EventKind::AllToAllCombineBackward;
  exchange.start_us = 1030;
  exchange.end_us = 1042;
  exchange.bytes_sent = 512;
  exchange.bytes_received = 256;
  exchange.peers = {1, 3};
  exchange.rows_sent = {2, 6};
  exchange.rows_received = {4, 4};
  exchange.tokens_per_expert = {3, 5};
  exchange.layer = "blocks.1";
  AllToAllRecord backwards = exchange;  // a clock that stepped back: no negative duration
  backwards.end_us = 1020;
  append_all_to_all_events(step, args, 3, {exchange, backwards});
  REQUIRE(step.events.size() == 4);
  const traces::TraceEvent& e = step.events[2];
  CHECK(e.rank == 3);
  CHECK(e.lane == static_cast<int>(traces::Lane::AllToAll));
  CHECK(e.name == "ALL_TO_ALL_COMBINE_B");
  CHECK(e.kind == traces::EventKind::AllToAllCombineBackward);
  CHECK(e.category == "collective");
  CHECK(e.ts_us == 30);
  CHECK(e.dur_us == 12);
  CHECK(e.bytes == 512);
  CHECK(step.events[3].dur_us == 0);
  REQUIRE(args.size() == 2);
  CHECK(args[0].first == 2);
  CHECK(args[1].first == 3);
  const auto a = nlohmann::json::parse(args[0].second);
  CHECK(a.at("layer") == "blocks.1");
  CHECK(a.at("peers") == nlohmann::json({1, 3}));
  CHECK(a.at("rows_sent") == nlohmann::json({2, 6}));
  CHECK(a.at("rows_received") == nlohmann::json({4, 4}));
  CHECK(a.at("bytes_received") == 256);
  CHECK(a.at("tokens_per_expert") == nlohmann::json({3, 5}));
}

TEST_CASE("measured trace: rank 0's trace from every rank's record, the earliest event at 0") {
  const RunPlan plan = measured_test_plan();
  TracedStep traced{7, 0.25, {}, {}, measured_test_step(0), {}, {}, "t.json", {}};
  RankTraceRecord rank0 = rank_trace_record(traced.result, {}, {}, {});
  rank0.cores = "0";
  rank0.transport_cores = "0";
  rank0.backward_split_probe = {{0, {{4.0}, {1.0}, {3.0}}, std::nullopt}};
  rank0.expert_call_probe = {{0, "blocks.0", false, 8, {2.0}}};
  RankTraceRecord rank1 = rank_trace_record(measured_test_step(1), {}, {}, {});
  for (auto& e : rank1.events) e.ts_us -= 600;  // rank 1's step started earlier on the shared clock
  for (auto& m : rank1.memory) m.ts_us -= 600;
  rank1.cores = "1";
  rank1.transport_cores = "1";
  rank1.backward_split_probe = {{1, {{6.0}, {2.0}, {4.0}}, std::nullopt}};
  rank1.expert_call_probe = {{1, "blocks.1", true, 16, {5.0}}};

  const traces::Trace trace = measured_trace(plan, traced, {rank0, rank1}, true);
  CHECK(trace.meta.source == "measured");
  CHECK(trace.meta.schedule == "1f1b");
  CHECK(trace.meta.num_ranks == 2);
  CHECK(trace.meta.num_stages == 2);
  CHECK(trace.meta.num_micro_batches == 4);
  CHECK(trace.meta.iteration == 7);
  CHECK(trace.rank_names == std::vector<std::string>{"rank 0", "rank 1"});
  REQUIRE(trace.events.size() == 4);
  CHECK(trace.events[0].rank == 0);
  CHECK(trace.events[0].ts_us == 600);
  CHECK(trace.events[2].rank == 1);
  CHECK(trace.events[2].ts_us == 0);
  CHECK(trace.events[3].ts_us == 10);
  REQUIRE(trace.memory.size() == 2);
  CHECK(trace.memory[1].ts_us == 2);

  const traces::RunDescription& run = trace.meta.run;
  CHECK(run.model == "tiny-gpt");
  CHECK(run.dtype == "bf16");
  CHECK(run.clock == "steady");
  CHECK(run.data_parallel == 1);
  CHECK(run.pipeline_ranks == 2);
  CHECK(run.gradient_clipping == 0.0);
  CHECK(run.step_time_s == 0.25);
  CHECK(run.bind_cores == true);
  CHECK(run.cores_per_rank == std::vector<std::string>{"0", "1"});
  CHECK(run.transport_cores_per_rank == std::vector<std::string>{"0", "1"});
  REQUIRE(run.backward_split_probe.has_value());
  REQUIRE(run.backward_split_probe->size() == 2);
  CHECK((*run.backward_split_probe)[1].stage == 1);
  REQUIRE(run.expert_call_probe.has_value());
  REQUIRE(run.expert_call_probe->size() == 2);
  CHECK((*run.expert_call_probe)[0].layer == "blocks.0");
  CHECK((*run.expert_call_probe)[1].layer == "blocks.1");
  CHECK((*run.expert_call_probe)[1].backward);
  CHECK_FALSE(run.stolen_time_s.has_value());
  CHECK_FALSE(run.transport_cpu_s.has_value());
  REQUIRE(run.layers.has_value());
  REQUIRE(run.layers->size() == 2);
  CHECK(run.layers->at(1).name == "blocks.1");
  CHECK(run.layers->at(1).type == "TransformerBlock");
  CHECK(run.layers->at(1).parameters == 640);
  CHECK(run.stage_bounds == std::vector<int>{0, 1, 2});
  CHECK(run.partition_method == "uniform");
  CHECK(run.recompute_layers == 2);
}

TEST_CASE("measured trace: a step's stolen and transport CPU time are kept per rank") {
  const RunPlan plan = measured_test_plan();
  TracedStep traced{3, 0.5, {0.01, 0.0}, {0.002, 0.003}, measured_test_step(0), {}, {}, "t.json", {}};
  const RankTraceRecord rank0 = rank_trace_record(traced.result, {}, {}, {});
  const RankTraceRecord rank1 = rank_trace_record(measured_test_step(1), {}, {}, {});
  const traces::Trace trace = measured_trace(plan, traced, {rank0, rank1}, false);
  CHECK(trace.meta.run.stolen_time_s == std::vector<double>{0.01, 0.0});
  CHECK(trace.meta.run.transport_cpu_s == std::vector<double>{0.002, 0.003});
  CHECK(trace.meta.run.bind_cores == false);
  CHECK_FALSE(trace.meta.run.backward_split_probe.has_value());
  CHECK_FALSE(trace.meta.run.expert_call_probe.has_value());
  CHECK(trace.events.front().ts_us == 0);  // both ranks' steps started together
}
