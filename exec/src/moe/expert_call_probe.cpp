// The expert-call probe (see expert_call_probe.hpp).
#include "moe/expert_call_probe.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "moe/moe_model.hpp"
#include "runtime/device_time.hpp"

namespace pipescope::exec::moe {
namespace {

// The shares of a call's mean rows the probe times: spread on both sides of what the run's calls
// got, 8 to 1 from the largest to the smallest, so that the slope is not lost in the noise.
constexpr std::array<double, 4> kRowShares = {0.25, 0.5, 1.0, 2.0};

// The probe's own random stream: drawing from the run's would change what the steps after a
// traced run draw (its data, a model's dropout).
constexpr std::uint64_t kProbeSeed = 0xE4E4'C0DE'0000'0001ull;

// A micro-batch's rows per expert where the router spreads the tokens evenly: each token goes to
// top-k experts, and an expert serves the E ranks of its expert-parallel group.
double balanced_rows_per_call(const ModelConfig& c) {
  return static_cast<double>(c.micro_batch_size) * c.seq_len * c.top_k * c.expert_parallel / c.experts;
}

// A 16-bit run's steps compute with 16-bit copies of the weights, and between steps the
// parameters hold their fp32 masters (runtime/compute_weights.hpp): while this lives the
// parameters compute with such copies, as in a step; then their masters are back.
class ComputeWeights {
 public:
  ComputeWeights(TensorList parameters, at::ScalarType compute_dtype) {
    at::NoGradGuard no_grad;
    for (auto& p : parameters) {
      if (p.scalar_type() == compute_dtype) continue;
      at::Tensor master = p.detach();
      p.set_data(master.to(compute_dtype));
      swapped_.emplace_back(std::move(p), std::move(master));
    }
  }
  ~ComputeWeights() {
    for (auto& [parameter, master] : swapped_) parameter.set_data(master);
  }
  ComputeWeights(const ComputeWeights&) = delete;
  ComputeWeights& operator=(const ComputeWeights&) = delete;

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> swapped_;  // (parameter, its master)
};

struct CallSamples {
  std::vector<double> forward_us, backward_us;
};

// The first local expert of `block` on `rows` random rows: its forward as the block calls it
// (autograd recording, the input a leaf that wants its gradient, as the routed rows do), then
// the backward of a random output gradient into the input and the expert's weights. Gradients
// are returned (autograd::grad), not accumulated into the weights' .grad, as a step computes
// them: nothing of the run changes. The first run warms up (allocations, first touches).
CallSamples time_expert_call(MoeBlock& block, ComputeDevice& device, std::int64_t rows, std::int64_t hidden,
                             int repetitions, at::Generator& generator) {
  const TensorList parameters = block.local_expert_parameters(0);
  const at::TensorOptions options = parameters.front().options();
  const at::Tensor input = at::randn({rows, hidden}, generator).to(options).requires_grad_(true);
  const at::Tensor output_grad = at::randn({rows, hidden}, generator).to(options);
  TensorList targets{input};
  targets.insert(targets.end(), parameters.begin(), parameters.end());
  CallSamples samples;
  for (int run = 0; run <= repetitions; ++run) {
    at::Tensor output;
    const double forward_us = runtime::device_time_us(device, [&] { output = block.run_local_expert(0, input); });
    const double backward_us =
        runtime::device_time_us(device, [&] { torch::autograd::grad({output}, targets, {output_grad}); });
    if (run == 0) continue;
    samples.forward_us.push_back(forward_us);
    samples.backward_us.push_back(backward_us);
  }
  return samples;
}

}  // namespace

std::vector<std::int64_t> expert_probe_rows(double mean_rows) {
  std::vector<std::int64_t> rows;
  for (const double share : kRowShares) {
    const std::int64_t r = std::max<std::int64_t>(1, std::llround(mean_rows * share));
    if (rows.empty() || rows.back() != r) rows.push_back(r);
  }
  return rows;
}

std::map<std::string, double> mean_rows_per_call(const std::vector<ExpertCallRecord>& calls) {
  std::map<std::string, std::pair<double, int>> sums;  // per layer: rows, calls
  for (const ExpertCallRecord& call : calls) {
    if (call.backward) continue;  // the same rows as its forward
    auto& [rows, count] = sums[call.layer];
    rows += static_cast<double>(call.rows);
    ++count;
  }
  std::map<std::string, double> means;
  for (const auto& [layer, sum] : sums) means[layer] = sum.first / sum.second;
  return means;
}

std::vector<traces::ExpertCallProbe> probe_expert_calls(PipelineRuntime& runtime, const ModelSpec& model,
                                                        ComputeDevice& device, at::ScalarType compute_dtype,
                                                        const std::vector<ExpertCallRecord>& calls, int repetitions) {
  const at::AutoGradMode recording(true);
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(kProbeSeed);
  const std::map<std::string, double> rows_per_call = mean_rows_per_call(calls);
  std::vector<traces::ExpertCallProbe> probes;
  for (const int stage : runtime.stages()) {
    StageModule& module = runtime.stage_module(stage);
    for (int index = module.first_layer(); index < module.end_layer(); ++index) {
      auto* block = dynamic_cast<MoeBlock*>(&module.layer(index));
      if (!block) continue;
      const std::string& layer = model.layers.at(static_cast<std::size_t>(index)).name;
      const auto found = rows_per_call.find(layer);
      const double mean_rows = found != rows_per_call.end() ? found->second : balanced_rows_per_call(model.config);
      const ComputeWeights weights(block->local_expert_parameters(0), compute_dtype);
      for (const std::int64_t rows : expert_probe_rows(mean_rows)) {
        CallSamples samples = time_expert_call(*block, device, rows, model.config.hidden, repetitions, generator);
        probes.push_back({stage, layer, false, rows, std::move(samples.forward_us)});
        probes.push_back({stage, layer, true, rows, std::move(samples.backward_us)});
      }
    }
  }
  return probes;
}

}  // namespace pipescope::exec::moe
