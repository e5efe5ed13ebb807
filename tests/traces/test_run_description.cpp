// The run description (otherData fields of SPEC.md section 5, typed). A trace carrying every
// field, the probe with and without its inner times, writes and reads back equal, with an
// unknown field still in extra. Every example trace (traces/examples, written by pprun and
// ppsim) reads into typed fields, leaves nothing of them in extra, and writes its otherData
// line back byte for byte. A field of the wrong type ("step_time_s": "n/a", a probe time "30")
// is one TraceError naming the file and the field; a null field is absent. A torch.profiler
// run's record ("torch_profiler": files, step, step length, operators) reads from and writes
// back to the object its traces have always carried, with or without a step.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "pipescope/traces/trace_io.hpp"

using namespace pipescope::traces;
namespace fs = std::filesystem;

namespace {

Trace described_trace() {
  Trace t;
  t.meta.source = "measured";
  t.meta.schedule = "zb-h1";
  t.meta.num_ranks = 2;
  t.meta.num_stages = 2;
  RunDescription& r = t.meta.run;
  r.model = "tiny-mlp";
  r.data_parallel = 1;
  r.pipeline_ranks = 2;
  r.micro_batch_size = 4;
  r.gradient_clipping = 0.0;
  r.device = "cpu";
  r.clock = "steady";
  r.threads_per_rank = 1;
  r.blas = "OpenBLAS";
  r.bind_cores = true;
  r.cores_per_rank = std::vector<std::string>{"0", "1"};
  r.transport_cores_per_rank = std::vector<std::string>{"0", "1"};
  r.layers = std::vector<LayerDescription>{{"blocks.0", "MlpBlock", 262656, std::nullopt, std::nullopt},
                                           {"head", "Linear", 5000000000, std::nullopt, std::nullopt},
                                           {"blocks.1", "MoeTransformerBlock", 83456, 4, 66304}};
  r.stage_bounds = std::vector<int>{0, 1, 2};
  r.partition_method = "parameters";
  r.recompute_layers = 1;
  r.step_time_s = 0.0125;
  r.stolen_time_s = std::vector<double>{0.001, 0.0};
  r.transport_cpu_s = std::vector<double>{0.25, 1e-9};
  r.backward_split_probe =
      std::vector<BackwardSplitProbe>{{0, {{100.5, 90}, {0.25, 0.5}, {70, 71}}, BackwardSplitTimes{{80}, {30}, {60}}},
                                      {1, {{200}, {100}, {100}}, std::nullopt}};
  r.expert_call_probe =
      std::vector<ExpertCallProbe>{{1, "blocks.1", false, 32, {40.5, 41}}, {1, "blocks.1", true, 256, {900}}};
  r.torch_profiler = TorchProfilerRun{{"run/rank0.json", "run/rank1.json"}, 3, 15000.25, 2500.5};
  t.meta.extra["cost_model"] = "uniform";
  TraceEvent e;
  e.name = "F";
  e.kind = event_kind_from_name(e.name);  // as a reader would parse it
  e.dur_us = 10;
  e.stage = 0;
  t.events.push_back(e);
  return t;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string other_data_line(const std::string& file_text) {
  const auto begin = file_text.find("\"otherData\"");
  return file_text.substr(begin, file_text.find('\n', begin) - begin);
}

}  // namespace

TEST_CASE("the run description round-trips through the trace file", "[run_description]") {
  const Trace t = described_trace();
  const std::string text = to_trace_json(t);
  const Trace back = parse_trace(text, "described.json");
  CHECK(back.meta.run == t.meta.run);
  CHECK(back.meta.extra == nlohmann::json{{"cost_model", "uniform"}});  // only the unknown field
  CHECK(to_trace_json(back) == text);
  // Under the otherData keys pprun always wrote, in their sorted order.
  CHECK_THAT(text, Catch::Contains(R"("backward_split_probe": [{"full_us":[100.5,90.0],"inner":{"full_us":[80.0],)"));
  CHECK_THAT(
      text, Catch::Contains(R"("cost_model": "uniform", "data_parallel": 1, "device": "cpu", "expert_call_probe": [)"));
  CHECK_THAT(text, Catch::Contains(R"("layers": [{"name":"blocks.0","parameters":262656,"type":"MlpBlock"},)"));
  CHECK_THAT(
      text,
      Catch::Contains(
          R"("expert_call_probe": [{"backward":false,"layer":"blocks.1","rows":32,"stage":1,"us":[40.5,41.0]},{"backward":true,)"));
  // A MoE layer's experts, only where there are some.
  CHECK_THAT(
      text,
      Catch::Contains(
          R"({"expert_parameters":66304,"experts":4,"name":"blocks.1","parameters":83456,"type":"MoeTransformerBlock"})"));
  CHECK_THAT(text, Catch::Contains(R"("pipeline_ranks": 2, "recompute_layers": 1,)"));

  Trace bare;  // a description without fields writes nothing
  CHECK_THAT(to_trace_json(bare), Catch::Contains(R"("iteration": 0},)"));
  CHECK(parse_trace(to_trace_json(bare), "bare.json").meta.run == RunDescription{});
}

TEST_CASE("the example traces read into typed fields and write their otherData back unchanged", "[run_description]") {
  int measured = 0;
  for (const auto& entry : fs::recursive_directory_iterator(fs::path(PIPESCOPE_SOURCE_DIR) / "traces" / "examples")) {
    if (entry.path().extension() != ".json") continue;
    const std::string text = read_file(entry.path());
    if (text.find("\"traceEvents\"") == std::string::npos) continue;
    INFO(entry.path().string());
    const Trace t = read_trace(entry.path().string());
    CHECK(t.meta.run.step_time_s.has_value());
    for (const char* typed :
         {"step_time_s", "model", "layers", "stage_bounds", "backward_split_probe", "cores_per_rank"})
      CHECK_FALSE(t.meta.extra.contains(typed));
    if (t.meta.source == "measured") {
      ++measured;
      CHECK(t.meta.run.model.has_value());
      CHECK(t.meta.run.layers.has_value());
      CHECK(t.meta.run.stage_bounds->size() == static_cast<std::size_t>(t.meta.num_stages) + 1);
      CHECK(t.meta.run.backward_split_probe.has_value());
    }
    CHECK(other_data_line(to_trace_json(t)) == other_data_line(text));
  }
  CHECK(measured >= 2);
}

TEST_CASE("a torch.profiler run's record reads from the otherData object it always was, and writes it back",
          "[run_description]") {
  // Two traces as the torch reader made them when the record was an extra field: a profiled
  // step with its figures, and a recording without step marks (step null, no figures).
  const nlohmann::json with_step = {{"files", {"run/rank0.json", "run/rank1.json"}},
                                    {"step", 1},
                                    {"step_duration_us", 15000.25},
                                    {"operators_per_rank", 2500.0}};
  const nlohmann::json without_step = {{"files", {"run/rank0.json"}}, {"step", nullptr}};
  for (const nlohmann::json& record : {with_step, without_step}) {
    Trace before;
    before.meta.source = "measured";
    before.meta.extra["torch_profiler"] = record;
    const std::string text = to_trace_json(before);
    INFO(other_data_line(text));
    const Trace back = parse_trace(text, "torch.json");
    REQUIRE(back.meta.run.torch_profiler);
    const TorchProfilerRun& run = *back.meta.run.torch_profiler;
    CHECK(run.files == record["files"].get<std::vector<std::string>>());
    CHECK(run.step == (record["step"].is_null() ? std::nullopt : std::optional<int>(1)));
    CHECK(run.step_duration_us ==
          (record.contains("step_duration_us") ? std::optional<double>(15000.25) : std::nullopt));
    CHECK(run.operators_per_rank ==
          (record.contains("operators_per_rank") ? std::optional<double>(2500) : std::nullopt));
    CHECK_FALSE(back.meta.extra.contains("torch_profiler"));
    CHECK(to_trace_json(back) == text);  // the same key and layout, byte for byte
  }
}

TEST_CASE("a run description field of the wrong type names the file and the field", "[run_description]") {
  auto with_other_data = [](const std::string& fields) {
    return R"({"otherData": {"format": "pipescope.trace/1", )" + fields + R"(}, "traceEvents": []})";
  };
  CHECK_THROWS_MATCHES(parse_trace(with_other_data(R"("step_time_s": "n/a")"), "run.json"), TraceError,
                       Catch::Message("run.json: otherData.step_time_s must be a number"));
  CHECK_THROWS_MATCHES(parse_trace(with_other_data(R"("data_parallel": 1.5)"), "run.json"), TraceError,
                       Catch::Message("run.json: otherData.data_parallel must be an integer"));
  CHECK_THROWS_MATCHES(parse_trace(with_other_data(R"("stage_bounds": [0, "2"])"), "run.json"), TraceError,
                       Catch::Message("run.json: otherData.stage_bounds[1] must be an integer"));
  CHECK_THROWS_MATCHES(parse_trace(with_other_data(R"("bind_cores": 1)"), "run.json"), TraceError,
                       Catch::Message("run.json: otherData.bind_cores must be true or false"));
  CHECK_THROWS_MATCHES(parse_trace(with_other_data(R"("layers": [{"name": "l0", "type": "Linear"}])"), "run.json"),
                       TraceError, Catch::Message("run.json: otherData.layers[0].parameters must be an integer"));
  CHECK_THROWS_MATCHES(
      parse_trace(with_other_data(R"("layers": [{"name": "l0", "type": "Moe", "parameters": 9, "experts": "4"}])"),
                  "run.json"),
      TraceError, Catch::Message("run.json: otherData.layers[0].experts must be an integer"));
  CHECK_THROWS_MATCHES(
      parse_trace(with_other_data(
                      R"("backward_split_probe": [{"stage": 0, "full_us": [80], "input_us": [30], "weight_us": [60],)"
                      R"( "inner": {"full_us": [80], "input_us": "30", "weight_us": [60]}}])"),
                  "probed.json"),
      TraceError, Catch::Message("probed.json: otherData.backward_split_probe[0].inner.input_us must be an array"));
  CHECK_THROWS_MATCHES(
      parse_trace(
          with_other_data(
              R"("expert_call_probe": [{"stage": 0, "layer": "blocks.1", "backward": 1, "rows": 8, "us": []}])"),
          "probed.json"),
      TraceError, Catch::Message("probed.json: otherData.expert_call_probe[0].backward must be true or false"));
  CHECK_THROWS_MATCHES(parse_trace(with_other_data(R"("backward_split_probe": {"stage": 0})"), "probed.json"),
                       TraceError, Catch::Message("probed.json: otherData.backward_split_probe must be an array"));
  CHECK_THROWS_MATCHES(
      parse_trace(with_other_data(R"("torch_profiler": {"files": ["r0.json"], "step": "1"})"), "torch.json"),
      TraceError, Catch::Message("torch.json: otherData.torch_profiler.step must be an integer"));
  CHECK_THROWS_MATCHES(parse_trace(with_other_data(R"("torch_profiler": {"step": 1})"), "torch.json"), TraceError,
                       Catch::Message("torch.json: otherData.torch_profiler.files must be an array"));
  CHECK_THROWS_MATCHES(parse_trace(with_other_data(R"("torch_profiler": ["r0.json"])"), "torch.json"), TraceError,
                       Catch::Message("torch.json: otherData.torch_profiler must be an object"));

  const Trace null_field = parse_trace(with_other_data(R"("model": null, "gradient_clipping": 0.5)"), "run.json");
  CHECK_FALSE(null_field.meta.run.model);
  CHECK(null_field.meta.run.gradient_clipping == 0.5);
  CHECK_FALSE(null_field.meta.extra.contains("model"));
}
