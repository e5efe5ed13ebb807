// A model saved from Python as TorchScript (tests/exec/data/scripted_mlp.pt: inp, block0,
// block1, head; 12 features, 5 classes) trained by PipelineEngine through the example program
// example_train_torchscript_model over real processes (Gloo on loopback), 4 micro-batches of
// [4, 12], SGD 0.1 with momentum, 6 steps, one thread per rank.
// Expected:
// - split at block1, 2 processes with 1f1b print 6 losses equal bit for bit to 1 process with
//   --schedule data-parallel (both segments on one stage), falling (last < first / 2; about
//   1.618 to 0.211); the traced copy of the model (traced_mlp.pt) gives the same losses; the
//   split-backward zb-h1 matches within 1e-6 relative; split at block0,head (3 segments on 2
//   stages) matches too.
// - transformer.pt (two pre-norm transformer blocks through scaled_dot_product_attention, input
//   [4, 6, 12]) split at block1: 2 processes with 1f1b print the same 6 losses bit for bit as 1
//   process, all finite, and the last below the first.
// - a split point naming no submodule fails on every rank before training: exit status 1, no
//   loss printed, and the loader's line `... rank R: TorchScript model '...scripted_mlp.pt':
//   split point 'blockX' names no submodule of the model (forward calls: inp, block0, block1, head)`
//   (R is 0 or 1: the rank that fails first; the other may only lose its connection to it).
// - an input shape the model cannot take fails with the cause on the same line ("mat1 and mat2
//   shapes cannot be multiplied (4x13 and 12x16)"), not the interpreter's traceback header.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "example_runner.hpp"

namespace {

using pipescope::exec::testing::ExampleRun;

std::string data_file(const std::string& name) {
  return (std::filesystem::path(PIPESCOPE_SOURCE_DIR) / "tests" / "exec" / "data" / name).string();
}

ExampleRun run_torchscript_example(const std::string& name, const std::string& args) {
  return pipescope::exec::testing::run_example_program(EXAMPLE_TRAIN_TORCHSCRIPT_MODEL_PATH, name, args);
}

}  // namespace

TEST_CASE("example_train_torchscript_model: 2 processes reproduce the single process") {
  const std::string mlp = data_file("scripted_mlp.pt");
  const ExampleRun single =
      run_torchscript_example("ts-single", mlp + " --split-points block1 --nproc-per-node 1 --schedule data-parallel");
  INFO(single.err);
  REQUIRE(single.status == 0);
  REQUIRE(single.losses.size() == 6);
  CHECK(single.losses.back() < single.losses.front() / 2);

  struct Variant {
    std::string label, args;
    bool bitwise;
  };
  const std::vector<Variant> variants = {
      {"1f1b", mlp + " --split-points block1 --schedule 1f1b", true},
      {"traced", data_file("traced_mlp.pt") + " --split-points block1 --schedule 1f1b", true},
      {"3-segments", mlp + " --split-points block0,head --schedule 1f1b", true},
      {"zb-h1", mlp + " --split-points block1 --schedule zb-h1", false},
  };
  for (const auto& variant : variants) {
    const ExampleRun piped = run_torchscript_example("ts-" + variant.label, variant.args + " --nproc-per-node 2");
    INFO(variant.label << ": " << piped.err);
    REQUIRE(piped.status == 0);
    REQUIRE(piped.losses.size() == 6);
    for (std::size_t i = 0; i < 6; ++i) {
      if (variant.bitwise)
        CHECK(piped.losses[i] == single.losses[i]);
      else
        CHECK(std::abs(piped.losses[i] - single.losses[i]) <= 1e-6 * std::abs(single.losses[i]));
    }
  }
}

TEST_CASE("example_train_torchscript_model: a transformer using scaled_dot_product_attention trains") {
  const std::string transformer = data_file("transformer.pt") + " --split-points block1 --input-shape 4,6,12";
  const ExampleRun single =
      run_torchscript_example("ts-transformer-single", transformer + " --nproc-per-node 1 --schedule data-parallel");
  INFO(single.err);
  REQUIRE(single.status == 0);
  REQUIRE(single.losses.size() == 6);
  for (const double loss : single.losses) CHECK(std::isfinite(loss));
  CHECK(single.losses.back() < single.losses.front());

  const ExampleRun piped =
      run_torchscript_example("ts-transformer-1f1b", transformer + " --nproc-per-node 2 --schedule 1f1b");
  INFO(piped.err);
  REQUIRE(piped.status == 0);
  REQUIRE(piped.losses.size() == 6);
  for (std::size_t i = 0; i < 6; ++i) CHECK(piped.losses[i] == single.losses[i]);
}

TEST_CASE("example_train_torchscript_model: bad split points and inputs fail with the loader's line") {
  const std::string mlp = data_file("scripted_mlp.pt");
  const ExampleRun bad = run_torchscript_example("ts-bad-split", mlp + " --split-points blockX --nproc-per-node 2");
  CHECK(bad.status == 1);
  CHECK(bad.losses.empty());
  const std::string split_error = ": TorchScript model '" + mlp +
                                  "': split point 'blockX' names no submodule of the model (forward calls: inp, "
                                  "block0, block1, head)\n";
  CHECK_THAT(bad.err, Catch::Contains("example_train_torchscript_model: error: rank 0" + split_error) ||
                          Catch::Contains("example_train_torchscript_model: error: rank 1" + split_error));

  const ExampleRun wrong_shape =
      run_torchscript_example("ts-bad-shape", mlp + " --split-points block1 --input-shape 4,13 --nproc-per-node 1");
  CHECK(wrong_shape.status == 1);
  // LibTorch 2.15 names the operator first ("RuntimeError: addmm: mat1 and mat2 ..."), 1.13 did not.
  CHECK_THAT(wrong_shape.err, Catch::Contains("rank 0: TorchScript model '" + mlp +
                                              "': segment 0 fails on the example inputs: RuntimeError: "));
  CHECK_THAT(wrong_shape.err, Catch::Contains("mat1 and mat2 shapes cannot be multiplied (4x13 and 12x16)\n"));
}
