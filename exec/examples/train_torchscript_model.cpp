// Trains a model saved from Python as TorchScript with PipelineEngine, started like pprun:
//   example_train_torchscript_model MODEL.pt --split-points block1[,head...] --nproc-per-node 2
//       [--schedule 1f1b] [--steps 6] [--input-shape 4,12] [--classes 5]
// The model takes one float tensor of --input-shape and its first output holds --classes scores
// in the last dimension (exec/examples/save_scripted_model.py's MLP with its defaults). The file
// is split into segments at the split points; the engine spreads the segments over its stages.
// Rank 0 prints "step I loss X" per step (X at full precision).
#include <torch/optim/sgd.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "pipescope/core/errors.hpp"
#include "pipescope/exec/distributed.hpp"
#include "pipescope/exec/engine.hpp"
#include "pipescope/exec/torchscript_model.hpp"

using namespace pipescope::exec;

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::istringstream fields(text);
  for (std::string part; std::getline(fields, part, ',');) parts.push_back(part);
  return parts;
}

// Micro-batch `index`: row r of the input is a smooth pattern of (r, index) and its label is
// r % classes, so the rows are separable and the loss can fall. The same on every rank.
MicroBatch make_sample(std::int64_t index, const std::vector<std::int64_t>& input_shape, std::int64_t classes) {
  const std::int64_t rows = input_shape.front(), row_size = at::empty(input_shape).numel() / rows;
  auto row = at::arange(rows, at::kDouble).unsqueeze(1), column = at::arange(row_size, at::kDouble).unsqueeze(0);
  auto input = at::sin(0.7 * (row + 1) * (column + 1) + 0.05 * index).to(at::kFloat).reshape(input_shape);
  return {{input}, at::arange(rows, at::kLong).remainder(classes)};
}

int main(int argc, char** argv) {
  return run_pipeline_processes(argc, argv, [](ProcessContext& context) {
    std::string model_path, schedule = "1f1b";
    int steps = 6;
    std::vector<std::int64_t> input_shape{4, 12};
    std::int64_t classes = 5;
    TorchScriptSplitOptions split;
    const auto& args = context.args;
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--split-points" && i + 1 < args.size()) split.split_points = split_commas(args[++i]);
      else if (args[i] == "--schedule" && i + 1 < args.size()) schedule = args[++i];
      else if (args[i] == "--steps" && i + 1 < args.size()) steps = std::stoi(args[++i]);
      else if (args[i] == "--classes" && i + 1 < args.size()) classes = std::stoll(args[++i]);
      else if (args[i] == "--input-shape" && i + 1 < args.size()) {
        input_shape.clear();
        for (const auto& size : split_commas(args[++i])) input_shape.push_back(std::stoll(size));
      } else if (model_path.empty() && args[i].rfind("--", 0) != 0) model_path = args[i];
      else throw pipescope::UsageError("unknown argument '" + args[i] +
                                       "' (MODEL.pt --split-points A,B --schedule NAME --steps N --input-shape B,F --classes C)");
    }
    if (model_path.empty()) throw pipescope::UsageError("no MODEL.pt given");
    split.example_inputs = make_sample(0, input_shape, classes).inputs;
    EngineOptions options;
    options.device = context.device;  // the CPU unless ProcessOptions::device says cuda
    options.micro_batches = 4;
    options.optimizer = [](const std::vector<at::Tensor>& parameters) {
      return std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.1).momentum(0.9));
    };
    PipelineEngine engine(PipelineModule(load_torchscript_model(model_path, split)), schedule, *context.world, options);
    std::int64_t next_sample = 0;
    engine.set_data_loader([&] { return make_sample(next_sample++, input_shape, classes); });
    for (int step = 0; step < steps; ++step) {
      const double loss = engine.train_batch();
      if (context.rank == 0) std::printf("step %d loss %.17g\n", step, loss);
    }
  });
}
