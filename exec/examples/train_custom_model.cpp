// Trains a user-defined language model with PipelineEngine, as pprun is started:
//   example_train_custom_model --nproc-per-node 2 [--schedule 1f1b] [--steps 6] [--recompute]
// Rank 0 prints "step I loss X" per step (X at full precision).
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdio>
#include <string>

#include "pipescope/core/errors.hpp"
#include "pipescope/exec/distributed.hpp"
#include "pipescope/exec/engine.hpp"

using namespace pipescope::exec;

constexpr int kVocab = 32, kHidden = 32, kSeqLen = 8, kBatch = 4, kBlocks = 4;

// Micro-batch `index`: arithmetic token sequences (labels: the next token) and a boolean mask
// hiding the last `index % 3` positions. The same on every rank, no randomness.
MicroBatch make_sample(std::int64_t index) {
  auto row = at::arange(kBatch, at::kLong).unsqueeze(1), pos = at::arange(kSeqLen + 1, at::kLong).unsqueeze(0);
  auto tokens = (row * 5 + index * 3 + pos * (row + 1 + index % 4)).remainder(kVocab);
  auto mask = (pos.slice(1, 0, kSeqLen) < kSeqLen - index % 3).expand({kBatch, kSeqLen}).contiguous();
  return {{tokens.slice(1, 0, kSeqLen).contiguous(), mask}, tokens.slice(1, 1, kSeqLen + 1).contiguous()};
}

PipelineModule make_model() {
  PipelineModule model(/*seed=*/7);
  // The token embedding shares its weight with the output head: one tied weight, two stages.
  model.add_tied("embed", "tokens", "module.weight", [] {
    return make_layer(torch::nn::Embedding(kVocab, kHidden),
                      [](torch::nn::Embedding& e, const TensorList& x) { return TensorList{e(x[0]), x[1]}; });
  });
  for (int i = 0; i < kBlocks; ++i)
    model.add("block" + std::to_string(i), [] {
      return make_layer(torch::nn::Linear(kHidden, kHidden), [](torch::nn::Linear& fc, const TensorList& x) {
        auto update = at::tanh(fc(x[0])) * x[1].unsqueeze(-1);  // masked positions keep their state
        return TensorList{x[0] + update, x[1]};                 // the mask travels along, no gradient
      });
    });
  model.add_tied("head", "tokens", "module.weight", [] {
    return make_layer(torch::nn::Embedding(kVocab, kHidden),
                      [](torch::nn::Embedding& e, const TensorList& x) { return at::matmul(x[0], e->weight.t()); });
  });
  model.set_loss([](const TensorList& out, const at::Tensor& labels) {
    return at::cross_entropy_loss(out[0].reshape({-1, kVocab}), labels.reshape({-1}));
  });
  return model;
}

int main(int argc, char** argv) {
  return run_pipeline_processes(argc, argv, [](ProcessContext& context) {
    std::string schedule = "1f1b";
    int steps = 6;
    EngineOptions options;
    options.micro_batches = 4;
    options.device = context.device;  // the CPU unless ProcessOptions::device says cuda
    options.gradient_clipping = 1.0;
    options.optimizer = [](const std::vector<at::Tensor>& parameters) {
      return std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.5).momentum(0.9));
    };
    const auto& args = context.args;
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--schedule" && i + 1 < args.size()) schedule = args[++i];
      else if (args[i] == "--steps" && i + 1 < args.size()) steps = std::stoi(args[++i]);
      else if (args[i] == "--recompute") options.activation_checkpoint_interval = 1;
      else throw pipescope::UsageError("unknown argument '" + args[i] + "' (--schedule NAME, --steps N, --recompute)");
    }
    PipelineEngine engine(make_model(), schedule, *context.world, options);
    std::int64_t next_sample = 0;
    engine.set_data_loader([&next_sample] { return make_sample(next_sample++); });
    for (int step = 0; step < steps; ++step) {
      const double loss = engine.train_batch();
      if (context.rank == 0) std::printf("step %d loss %.17g\n", step, loss);
    }
  });
}
