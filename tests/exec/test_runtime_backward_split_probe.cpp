// The backward-split probe (runtime/backward_split_probe.hpp) of a bf16 run: one rank, the mlp of
// 4 layers whose second layer notes the dtype of what it is given.
// Expected: after a bf16 step the probe (one repetition) times the full backward and its input
// and weight halves; every forward the probe runs hands the watched layer bf16 activations,
// computed on bf16 copies of the weights, as the run's steps do (until this was fixed the probe
// computed in fp32 on the masters); and afterwards the parameters are the fp32 masters the step
// left, bit for bit. In an fp32 run the same layer is handed fp32.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "in_process_ranks.hpp"
#include "pipescope/exec/engine.hpp"

using namespace pipescope;
using namespace pipescope::exec;
using namespace std::chrono_literals;

namespace {

// A layer that notes the dtype of its first input, then runs the layer it wraps.
class DtypeWatch : public Layer {
 public:
  DtypeWatch(std::shared_ptr<Layer> inner, std::shared_ptr<std::vector<at::ScalarType>> seen)
      : inner_(register_module("inner", std::move(inner))), seen_(std::move(seen)) {}
  TensorList forward_layers(const TensorList& inputs) override {
    seen_->push_back(inputs.at(0).scalar_type());
    return inner_->forward_layers(inputs);
  }

 private:
  std::shared_ptr<Layer> inner_;
  std::shared_ptr<std::vector<at::ScalarType>> seen_;
};

struct ProbeRun {
  std::string error;
  std::vector<at::ScalarType> step_dtypes;   // what the watched layer got in the step
  std::vector<at::ScalarType> probe_dtypes;  // and in the probe
  std::vector<PipelineRuntime::BackwardSplitTiming> timings;
  std::map<std::string, at::Tensor> before, after;  // the parameters around the probe
};

ProbeRun probe_after_a_step(at::ScalarType dtype) {
  ModelConfig c;
  c.layers = 4;
  c.hidden = 16;
  c.vocab = 8;
  c.micro_batch_size = 4;
  ModelSpec model = make_model_spec(c);
  auto seen = std::make_shared<std::vector<at::ScalarType>>();
  const auto build = model.layers.at(1).build;
  model.layers.at(1).build = [build, seen] { return std::make_shared<DtypeWatch>(build(), seen); };
  EngineOptions options;
  options.micro_batches = 2;
  options.retain_freed_cpu_memory = false;
  options.timeout = 20000ms;
  options.dtype = dtype;
  auto runs = testing::run_in_process_ranks<ProbeRun>(1, [&](int, Transport& world, ProbeRun& run) {
    PipelineEngine engine(PipelineModule(model), "data-parallel", world, options);
    engine.train_synthetic_batch();
    run.step_dtypes = *seen;
    seen->clear();
    const auto parameters = [&engine] {
      std::map<std::string, at::Tensor> out;
      for (const auto& p : engine.runtime().stage_module(0).parameters()) out[p.name] = p.tensor.detach().clone();
      return out;
    };
    run.before = parameters();
    run.timings = engine.runtime().probe_backward_split(1);
    run.after = parameters();
    run.probe_dtypes = *seen;
  });
  REQUIRE(runs.at(0).error.empty());
  return runs.at(0);
}

}  // namespace

TEST_CASE("a bf16 run's backward-split probe computes in bf16 and leaves the fp32 masters", "[runtime][precision]") {
  const ProbeRun run = probe_after_a_step(at::kBFloat16);
  REQUIRE_FALSE(run.step_dtypes.empty());
  for (const auto d : run.step_dtypes) CHECK(d == at::kBFloat16);
  REQUIRE(run.timings.size() == 1);
  CHECK(run.timings[0].own.full_us.size() == 1);
  CHECK(run.timings[0].own.input_us.size() == 1);
  CHECK(run.timings[0].own.weight_us.size() == 1);
  REQUIRE_FALSE(run.probe_dtypes.empty());
  for (const auto d : run.probe_dtypes) CHECK(d == at::kBFloat16);
  REQUIRE(run.after.size() == run.before.size());
  for (const auto& [name, tensor] : run.before) {
    INFO(name);
    CHECK(run.after.at(name).scalar_type() == at::kFloat);
    CHECK(at::equal(run.after.at(name), tensor));
  }
}

TEST_CASE("an fp32 run's backward-split probe computes in fp32", "[runtime][precision]") {
  const ProbeRun run = probe_after_a_step(at::kFloat);
  REQUIRE_FALSE(run.probe_dtypes.empty());
  for (const auto d : run.probe_dtypes) CHECK(d == at::kFloat);
}
