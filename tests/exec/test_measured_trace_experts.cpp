// The experts' calls and parameters in pprun's measured trace (pprun/measured_trace.hpp,
// moe/expert_calls.hpp), from hand-made step results.
// A step on the clock origin 1000 us: F over [0, 100] us, B over [200, 400] us.
// Expected:
// - append_pass_args puts a forward call that started at 1010 (10 in the step) in F's
//   args and a backward call that started at 1250 in B's, each {layer, expert, rows, us} with
//   us = end - start; a backward call inside F, and a call outside every pass, go nowhere; the
//   args are in event order (F's index 0, then B's 1), ahead of the all-to-all events' args.
// - the run description gives a MoeTransformerBlock layer its experts (4) and their parameters,
//   4 x (64 x 128 + 128 + 128 x 64 + 64) = 66304 at hidden 64 and --moe-ffn-hidden 128, and a
//   dense layer none.
// - an ExpertCallLog pairs a backward's begin and end by layer, expert and thread, drops an end
//   without a begin, and take_records empties it.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "moe/expert_calls.hpp"
#include "moe/moe_model.hpp"
#include "pipescope/traces/event_kind.hpp"
#include "pprun/measured_trace.hpp"

using namespace pipescope;
using namespace pipescope::exec;

namespace {

traces::TraceEvent expert_test_pass(const std::string& name, double ts_us, double dur_us) {
  traces::TraceEvent e;
  e.name = name;
  e.kind = traces::event_kind_from_name(name);
  e.category = "compute";
  e.ts_us = ts_us;
  e.dur_us = dur_us;
  return e;
}

}  // namespace

TEST_CASE("measured trace: each expert call is in the args of the pass that ran it") {
  StepResult step;
  step.origin_us = 1000;
  step.events = {expert_test_pass("F", 0, 100), expert_test_pass("B", 200, 200)};
  const std::vector<moe::ExpertCallRecord> calls = {
      {"blocks.1", 2, false, 37, 1010, 1030.5},  // F's
      {"blocks.1", 2, true, 37, 1250, 1290},     // B's
      {"blocks.1", 3, true, 5, 1020, 1040},      // a backward call inside a forward: none
      {"blocks.1", 3, false, 5, 1150, 1160},     // between the passes: none
  };
  std::vector<std::pair<std::size_t, std::string>> args;
  append_pass_args(step, args, calls);
  REQUIRE(args.size() == 2);
  CHECK(args[0].first == 0);
  CHECK(args[1].first == 1);
  const auto forward = nlohmann::json::parse(args[0].second).at("expert_calls");
  REQUIRE(forward.size() == 1);
  CHECK(forward[0] == nlohmann::json({{"layer", "blocks.1"}, {"expert", 2}, {"rows", 37}, {"us", 20.5}}));
  const auto backward = nlohmann::json::parse(args[1].second).at("expert_calls");
  REQUIRE(backward.size() == 1);
  CHECK(backward[0].at("us") == 40.0);

  AllToAllRecord exchange;
  exchange.kind = traces::EventKind::AllToAllDispatchForward;
  exchange.start_us = 1020;
  exchange.end_us = 1025;
  append_all_to_all_events(step, args, 0, {exchange});
  REQUIRE(args.size() == 3);
  CHECK(args[2].first == 2);
}

// An overlapped F&B step's pass with expert calls: one args object holds both, one entry per event.
TEST_CASE("measured trace: a pass of an overlapped step has its pair and its expert calls in one args entry") {
  StepResult step;
  step.origin_us = 1000;
  step.events = {expert_test_pass("F", 0, 100), expert_test_pass("B", 20, 200)};
  StepResult::ComputeSpans forward_spans;
  forward_spans.event = 0;
  forward_spans.overlapped_with = "1B0";
  forward_spans.computing_us = {{0, 30}, {60, 100}};  // from the step's origin
  step.overlapped_passes.push_back(forward_spans);
  const std::vector<moe::ExpertCallRecord> calls = {{"blocks.0", 1, false, 12, 1010, 1015},
                                                    {"blocks.0", 1, true, 12, 1050, 1070}};
  std::vector<std::pair<std::size_t, std::string>> args;
  append_pass_args(step, args, calls);
  REQUIRE(args.size() == 2);
  CHECK(args[0].first == 0);
  CHECK(args[1].first == 1);
  const auto forward = nlohmann::json::parse(args[0].second);
  CHECK(forward.at("overlapped_with") == "1B0");
  CHECK(forward.at("computing_us") == nlohmann::json({{0.0, 30.0}, {60.0, 100.0}}));
  CHECK(forward.at("expert_calls").size() == 1);
  // The backward call started inside both spans: the backward has it.
  const auto backward = nlohmann::json::parse(args[1].second);
  CHECK(backward.at("expert_calls").at(0).at("rows") == 12);
  CHECK_FALSE(backward.contains("overlapped_with"));
}

TEST_CASE("measured trace: a MoE block's experts and their parameters are in the run description") {
  RunPlan plan;
  plan.options.model = "tiny-moe";
  plan.schedule.name = "1f1b";
  plan.schedule.num_stages = 1;
  plan.partition.bounds = {0, 2};
  plan.model.config.hidden = 64;
  plan.model.config.experts = 4;
  plan.model.config.moe_ffn_hidden = 128;
  LayerSpec dense;
  dense.name = "embed";
  dense.type = "TokenEmbedding";
  dense.parameters = 100;
  LayerSpec block;
  block.name = "blocks.0";
  block.type = kMoeBlockType;
  block.parameters = 83456;
  plan.model.layers = {dense, block};
  TracedStep traced{0, 0.01, {}, {}, StepResult{}, {}, {}, "t.json", {}};
  const traces::Trace trace = measured_trace(plan, traced, {RankTraceRecord{}}, false);
  REQUIRE(trace.meta.run.layers);
  const auto& layers = *trace.meta.run.layers;
  REQUIRE(layers.size() == 2);
  CHECK_FALSE(layers[0].experts);
  CHECK_FALSE(layers[0].expert_parameters);
  CHECK(layers[1].experts == 4);
  CHECK(layers[1].expert_parameters == 66304);
}

TEST_CASE("an expert call log pairs a backward's two ends and drops an end without a beginning") {
  moe::ExpertCallLog log;
  log.begin_backward("blocks.0", 1, 100);
  log.end_backward("blocks.0", 2, 9, 150);  // another expert: no beginning
  log.end_backward("blocks.0", 1, 7, 180);
  log.record({"blocks.0", 1, false, 7, 10, 20});
  const auto records = log.take_records();
  REQUIRE(records.size() == 2);
  CHECK(records[0].backward);
  CHECK(records[0].expert == 1);
  CHECK(records[0].rows == 7);
  CHECK(records[0].start_us == 100);
  CHECK(records[0].end_us == 180);
  CHECK_FALSE(records[1].backward);
  CHECK(log.take_records().empty());
}

TEST_CASE("a timed expert call records its forward and, through autograd, its backward") {
  // An expert of one linear map on 6 rows of 4: a forward record now, a backward record (6
  // rows, after the forward) once the loss's gradient has passed through it; none without grad.
  moe::ExpertCallLog log;
  const at::Tensor weight = at::ones({4, 4}).requires_grad_(true);
  const at::Tensor rows = at::ones({6, 4}).requires_grad_(true);
  const auto expert = [&weight](const at::Tensor& x) { return at::matmul(x, weight); };
  at::Tensor out = moe::timed_expert_call(expert, rows, log, "blocks.3", 5);
  REQUIRE(log.take_records().size() == 1);
  out.sum().backward();
  const auto records = log.take_records();
  REQUIRE(records.size() == 1);
  CHECK(records[0].backward);
  CHECK(records[0].layer == "blocks.3");
  CHECK(records[0].expert == 5);
  CHECK(records[0].rows == 6);
  CHECK(records[0].end_us >= records[0].start_us);
  CHECK(rows.grad().sum().item<double>() == 6 * 4 * 4);
  {
    at::NoGradGuard no_grad;
    moe::timed_expert_call(expert, rows, log, "blocks.3", 5);
  }
  CHECK(log.take_records().size() == 1);
}
