// PipelineEngine on a user-defined model: token ids and a boolean mask in, a tied embedding and
// head (layers: embed | block0 block1 block2 | head, vocab 24, hidden 16, micro-batch size 2),
// 4 micro-batches, fp32, one thread per rank; in-process ranks over the fake transport, and the
// example program over 2 real processes (Gloo on loopback).
// Expected:
// - 2-rank 1f1b gives bit for bit the losses of 1-rank gradient accumulation (data-parallel) for
//   3 steps: plain, with activation checkpointing every layer, with clipping to a global norm of
//   0.05 (active: the reported norm is above it, and equal on both ranks and both runs), and with
//   shapes that change every step (sequence length 5, 6, 7 sent with shape headers), and with
//   declared static shapes (no headers; hidden states and mask in one message); the
//   split-backward zb-h1 with checkpointing every 2 layers matches within 1e-6 relative.
// - shape headers (no declared shapes): only micro-batch 0 of each step carries one (rank 1's
//   RECV_F bytes 876, 780, 780, 780), every micro-batch with shapes_per_micro_batch (876 each),
//   same losses; sequence lengths 6 and 7 inside one batch fail on rank 0 naming stage 0,
//   micro-batch 1, output tensor 0 and the option, and train bit for bit with the option on.
// - eval_batch before any step returns exactly the first step's loss; the last stage's rank gets
//   4 outputs of shape [2, 6, 24], the other rank none; the same with zbv (4 stages on 2 ranks,
//   the forwards of its training schedule), the outputs then on rank 0.
// - split points {"block1"} give bounds {0, 2, 5}; measured layer costs are positive and split the
//   5 layers into 2 non-empty stages by "cost"; a custom SGD factory is what the stages use;
//   set_train_batch_size(16) with micro-batch size 2 gives 8 micro-batches.
// - user errors name the stage and the tensor: an undefined layer output ("stage 0", "output 1 of
//   layer 'block0'"),
//   a declared shape that the stage output does not match ("stage 0", "output tensor 0", the two
//   shapes), a schedule for another number of ranks, split points making 3 stages for a 1-stage
//   schedule, a loss on stage 0 of 2, an unknown split point.
// - example_train_custom_model --nproc-per-node 2 prints 6 losses equal bit for bit to its
//   --nproc-per-node 1 --schedule data-parallel run, falling (last < first); --recompute too;
//   a bad argument makes both workers fail: exit status 1 and a rank's
//   `example_train_custom_model: error: rank R: unknown argument` line (R is 0 or 1: whichever
//   rank reaches the arguments first; the other may instead lose its connection to it).
#include <catch2/catch.hpp>

#include <ATen/Parallel.h>
#include <sys/wait.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/exec/engine.hpp"

#include "example_runner.hpp"
#include "in_process_ranks.hpp"

using namespace pipescope;
using namespace pipescope::exec;
using namespace std::chrono_literals;

namespace {

constexpr int kVocab = 24, kHidden = 16, kBatch = 2;

MicroBatch sample(std::int64_t index, int seq_len) {
  auto row = at::arange(kBatch, at::kLong).unsqueeze(1), pos = at::arange(seq_len + 1, at::kLong).unsqueeze(0);
  auto tokens = (row * 7 + index * 5 + pos * (row + 1 + index % 3)).remainder(kVocab);
  auto mask = (pos.slice(1, 0, seq_len) < seq_len - index % 2).expand({kBatch, seq_len}).contiguous();
  return {{tokens.slice(1, 0, seq_len).contiguous(), mask}, tokens.slice(1, 1, seq_len + 1).contiguous()};
}

// `broken_output`: block0 returns an undefined second tensor.
PipelineModule test_module(bool broken_output = false) {
  PipelineModule m(11);
  m.add_tied("embed", "tok", "module.weight", [] {
    return make_layer(torch::nn::Embedding(kVocab, kHidden), [](torch::nn::Embedding& e, const TensorList& x) {
      return TensorList{e(x[0]), x[1]};
    });
  });
  for (int i = 0; i < 3; ++i)
    m.add("block" + std::to_string(i),
          [broken = broken_output && i == 0] {
            return make_layer(torch::nn::Linear(kHidden, kHidden),
                              [broken](torch::nn::Linear& fc, const TensorList& x) {
                                auto h = x[0] + at::tanh(fc(x[0])) * x[1].unsqueeze(-1);
                                return TensorList{h, broken ? at::Tensor() : x[1]};
                              });
          },
          {"Block"});
  m.add_tied("head", "tok", "module.weight", [] {
    return make_layer(torch::nn::Embedding(kVocab, kHidden),
                      [](torch::nn::Embedding& e, const TensorList& x) { return at::matmul(x[0], e->weight.t()); });
  });
  m.set_loss([](const TensorList& out, const at::Tensor& labels) {
    return at::cross_entropy_loss(out[0].reshape({-1, kVocab}), labels.reshape({-1}));
  });
  return m;
}

struct RankRun {
  std::vector<double> losses;
  std::vector<double> norms;
  std::vector<traces::TraceEvent> last_events;  // of the last train_batch
  EvalResult eval;
  std::string error;
};

// The tensors into each layer of test_module and its output, for sequence length 6;
// `wrong_boundary` >= 0 declares a hidden size of 8 there instead.
std::vector<std::vector<TensorSpec>> declared_shapes(int wrong_boundary = -1) {
  std::vector<std::vector<TensorSpec>> shapes;
  shapes.push_back({{{kBatch, 6}, at::kLong}, {{kBatch, 6}, at::kBool}});
  for (int b = 1; b <= 4; ++b)
    shapes.push_back({{{kBatch, 6, b == wrong_boundary ? 8 : kHidden}, at::kFloat}, {{kBatch, 6}, at::kBool}});
  shapes.push_back({{{kBatch, 6, kVocab}, at::kFloat}});
  return shapes;
}

// The sequence length of sample `index` of step `step`.
using SeqLenOf = std::function<int(int step, std::int64_t index)>;

// Runs `steps` train_batch calls on `ranks` in-process ranks; `seq_len_of` sizes the data.
std::vector<RankRun> train(
    int ranks, const std::string& schedule, EngineOptions options, int steps, bool eval_first = false,
    SeqLenOf seq_len_of = [](int, std::int64_t) { return 6; }, bool broken = false, bool static_shapes = false) {
  return testing::run_in_process_ranks<RankRun>(ranks, [&](int, Transport& transport, RankRun& run) {
    PipelineModule module = test_module(broken);
    if (static_shapes) module.set_static_shapes(declared_shapes());
    PipelineEngine engine(module, schedule, transport, options);
    if (eval_first) {
      std::int64_t next = 0;
      run.eval = engine.eval_batch([&] { return sample(next++, 6); }, true);
    }
    std::int64_t next = 0;
    for (int step = 0; step < steps; ++step) {
      run.losses.push_back(engine.train_batch([&] {
        const std::int64_t index = next++;
        return sample(index, seq_len_of(step, index));
      }));
      run.norms.push_back(engine.last_step().grad_norm);
      run.last_events = engine.last_step().events;
    }
  });
}

EngineOptions base_options() {
  EngineOptions o;
  o.micro_batches = 4;
  o.micro_batch_size = kBatch;
  o.partition = "uniform";
  o.timeout = 5000ms;
  return o;
}

}  // namespace

TEST_CASE("engine: 2-rank 1f1b reproduces 1-rank gradient accumulation bit for bit") {
  struct Case {
    std::string name;
    EngineOptions options;
    SeqLenOf seq_len_of = [](int, std::int64_t) { return 6; };
    bool static_shapes = false;
  };
  std::vector<Case> cases(5);
  cases[0].name = "plain";
  cases[1].name = "activation checkpointing every layer";
  cases[1].options.activation_checkpoint_interval = 1;
  cases[2].name = "clipping to norm 0.05";
  cases[2].options.gradient_clipping = 0.05;
  cases[3].name = "shapes changing every step";
  cases[3].seq_len_of = [](int step, std::int64_t) { return 5 + step; };
  cases[4].name = "declared static shapes (no headers; float and bool sent as one message)";
  cases[4].static_shapes = true;
  for (auto& c : cases) {
    INFO(c.name);
    EngineOptions o = base_options();
    o.activation_checkpoint_interval = c.options.activation_checkpoint_interval;
    o.gradient_clipping = c.options.gradient_clipping;
    const auto single = train(1, "data-parallel", o, 3, false, c.seq_len_of, false, c.static_shapes);
    const auto piped = train(2, "1f1b", o, 3, false, c.seq_len_of, false, c.static_shapes);
    REQUIRE(single[0].error.empty());
    INFO(piped[0].error << " | " << piped[1].error);
    REQUIRE(piped[0].error.empty());
    REQUIRE(piped[1].error.empty());
    REQUIRE(single[0].losses.size() == 3);
    for (int step = 0; step < 3; ++step) {
      CHECK(piped[0].losses[step] == single[0].losses[step]);
      CHECK(piped[1].losses[step] == single[0].losses[step]);
      if (o.gradient_clipping > 0) {
        CHECK(single[0].norms[step] > 0.05);
        CHECK(piped[0].norms[step] == single[0].norms[step]);
        CHECK(piped[1].norms[step] == single[0].norms[step]);
      }
    }
  }
}

// Shape headers (no declared shapes), 2-rank 1f1b, 4 micro-batches, sequence length 6: each
// activation message holds hidden [2, 6, 16] float (768 bytes) and mask [2, 6] bool (12 bytes),
// 780 bytes; the header's descriptor adds 12 words (count; dtype, rank, 3 sizes, name length;
// dtype, rank, 2 sizes, name length) = 96 bytes. By default only micro-batch 0 of each step
// carries it (876 bytes), micro-batches 1..3 send 780; per-micro-batch headers send 876 each time.
TEST_CASE("engine: shape headers go with the first micro-batch of each batch, or every one on request") {
  auto recv_bytes = [](const RankRun& run) {
    std::map<int, std::int64_t> bytes;  // micro-batch -> bytes of its RECV_F on the last step
    for (const auto& e : run.last_events)
      if (e.name == "RECV_F") bytes[e.micro_batch] = e.bytes;
    return bytes;
  };
  EngineOptions o = base_options();
  const auto per_batch = train(2, "1f1b", o, 2);
  INFO(per_batch[0].error << " | " << per_batch[1].error);
  REQUIRE(per_batch[1].error.empty());
  CHECK(recv_bytes(per_batch[1]) == std::map<int, std::int64_t>{{0, 876}, {1, 780}, {2, 780}, {3, 780}});
  o.shapes_per_micro_batch = true;
  const auto every = train(2, "1f1b", o, 2);
  REQUIRE(every[1].error.empty());
  CHECK(recv_bytes(every[1]) == std::map<int, std::int64_t>{{0, 876}, {1, 876}, {2, 876}, {3, 876}});
  CHECK(every[1].losses == per_batch[1].losses);

  // Sequence length 6 + (sample index % 2): shapes change inside a batch.
  const SeqLenOf varying = [](int, std::int64_t index) { return 6 + static_cast<int>(index % 2); };
  SECTION("shapes changing between micro-batches need per-micro-batch headers") {
    EngineOptions d = base_options();
    const auto failed = train(2, "1f1b", d, 1, false, varying);
    CHECK_THAT(failed[0].error,
               Catch::Contains("stage 0 (layers 0..") &&
                   Catch::Contains("micro-batch 1: output tensor 0 is [2, 7, 16] Float") &&
                   Catch::Contains(
                       "the shape header sent to stage 1 with micro-batch 0 of this batch says [2, 6, 16] Float") &&
                   Catch::Contains("EngineOptions::shapes_per_micro_batch"));
    CHECK_FALSE(failed[1].error.empty());
    d.shapes_per_micro_batch = true;
    const auto single = train(1, "data-parallel", d, 3, false, varying);
    const auto piped = train(2, "1f1b", d, 3, false, varying);
    REQUIRE(single[0].error.empty());
    INFO(piped[0].error << " | " << piped[1].error);
    REQUIRE(piped[0].error.empty());
    REQUIRE(piped[1].error.empty());
    for (int step = 0; step < 3; ++step) CHECK(piped[1].losses[step] == single[0].losses[step]);
  }
}

TEST_CASE("engine: split backward with activation checkpointing matches within 1e-6") {
  EngineOptions o = base_options();
  const auto single = train(1, "data-parallel", o, 3);
  o.activation_checkpoint_interval = 2;
  const auto split = train(2, "zb-h1", o, 3);
  INFO(split[0].error << " | " << split[1].error);
  REQUIRE(split[0].error.empty());
  REQUIRE(split[1].error.empty());
  for (int step = 0; step < 3; ++step) CHECK(split[1].losses[step] == Approx(single[0].losses[step]).epsilon(1e-6));
}

TEST_CASE("engine: eval_batch runs forwards and returns the last stage's outputs") {
  const auto runs = train(2, "1f1b", base_options(), 1, true);
  INFO(runs[0].error << " | " << runs[1].error);
  REQUIRE(runs[0].error.empty());
  REQUIRE(runs[1].error.empty());
  CHECK(runs[0].eval.loss == runs[0].losses[0]);
  CHECK(runs[1].eval.loss == runs[1].losses[0]);
  CHECK(runs[0].eval.outputs.empty());
  REQUIRE(runs[1].eval.outputs.size() == 4);
  for (const auto& out : runs[1].eval.outputs) {
    REQUIRE(out.size() == 1);
    CHECK(out[0].sizes() == at::IntArrayRef({kBatch, 6, kVocab}));
  }
  // zbv (V placement: rank 0 holds stages 0 and 3) has no inference schedule of its own: the
  // forwards of its training schedule run instead, the outputs coming back on rank 0.
  EngineOptions o = base_options();
  o.partition = "uniform";
  const auto v = train(2, "zbv", o, 1, true);
  INFO(v[0].error << " | " << v[1].error);
  REQUIRE(v[0].error.empty());
  CHECK(v[0].eval.loss == runs[0].losses[0]);
  CHECK(v[0].eval.outputs.size() == 4);
  CHECK(v[1].eval.outputs.empty());
}

TEST_CASE("engine: split points, optimizer factory and batch size") {
  auto net = make_fake_network(1);
  auto transport = make_fake_transport(net, 0);
  CHECK(test_module().split_at({"block1"}).bounds == std::vector<int>{0, 2, 5});
  CHECK_THROWS_WITH(test_module().split_at({"block9"}), Catch::Contains("split point 'block9' names no layer"));
  PipelineModule measured = test_module();
  const auto costs = measure_layer_costs(measured, sample(0, 6), 2);
  REQUIRE(costs.size() == 5);
  for (std::size_t i = 0; i < costs.size(); ++i) CHECK(measured.spec().layers[i].cost > 0);
  const Partition by_cost = measured.partition(2, "cost");
  REQUIRE(by_cost.bounds.size() == 3);
  CHECK(by_cost.bounds.front() == 0);
  CHECK(by_cost.bounds.back() == 5);
  CHECK(by_cost.bounds[1] > 0);
  CHECK(by_cost.bounds[1] < 5);

  EngineOptions o = base_options();
  o.optimizer = [](const std::vector<at::Tensor>& p) {
    return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1));
  };
  PipelineEngine engine(test_module(), "data-parallel", *transport, o);
  CHECK(dynamic_cast<torch::optim::SGD*>(&engine.runtime().optimizer(0)) != nullptr);
  CHECK(engine.train_batch_size() == 8);
  engine.set_train_batch_size(16);
  CHECK(engine.micro_batches() == 8);
  std::int64_t next = 0;
  const double loss = engine.train_batch([&] { return sample(next++, 6); });
  CHECK(next == 8);
  CHECK(std::isfinite(loss));
  CHECK_THROWS_WITH(engine.set_train_batch_size(15), Catch::Contains("not a multiple of micro_batch_size 2"));
}

TEST_CASE("engine: user errors name the stage and the tensor") {
  SECTION("an output that is not a tensor") {
    const auto runs = train(
        1, "data-parallel", base_options(), 1, false, [](int, std::int64_t) { return 6; }, /*broken=*/true);
    CHECK_THAT(runs[0].error,
               Catch::Contains("stage 0") && Catch::Contains("output 1 of layer 'block0' (layer 1) is not a tensor"));
  }
  SECTION("a shape mismatch between stages") {
    EngineOptions o = base_options();
    o.split_points = {"block1"};
    o.timeout = 1000ms;
    const auto runs = testing::run_in_process_ranks<RankRun>(2, [&](int, Transport& transport, RankRun&) {
      PipelineModule m = test_module();
      m.set_static_shapes(declared_shapes(/*wrong_boundary=*/2));
      PipelineEngine engine(m, "1f1b", transport, o);
      std::int64_t next = 0;
      engine.train_batch([&] { return sample(next++, 6); });
    });
    CHECK_THAT(runs[0].error, Catch::Contains("stage 0 (layers 0..1, 'embed' .. 'block0')") &&
                                  Catch::Contains("output tensor 0 has shape [2, 6, 16]") &&
                                  Catch::Contains("the input of layer 'block1' is declared as [2, 6, 8]"));
    CHECK_FALSE(runs[1].error.empty());
  }
  SECTION("a schedule for another number of ranks or stages") {
    auto net = make_fake_network(2);
    auto transport = make_fake_transport(net, 0);
    Schedule four = make_schedule("1f1b", ScheduleParams{4, 4, 1, false});
    CHECK_THROWS_WITH(PipelineEngine(test_module(), four, *transport, base_options()),
                      Catch::Contains("schedule '1f1b' is for 4 pipeline ranks, but the world has 2 rank(s)"));
    auto net1 = make_fake_network(1);
    auto single = make_fake_transport(net1, 0);
    EngineOptions o = base_options();
    o.split_points = {"block0", "block2"};
    CHECK_THROWS_WITH(
        PipelineEngine(test_module(), "data-parallel", *single, o),
        Catch::Contains("split points [block0, block2] make 3 stages, but schedule 'data-parallel' has 1 stages"));
  }
  SECTION("a loss function on a stage that is not the last") {
    auto net = make_fake_network(2);
    auto transport = make_fake_transport(net, 0);
    EngineOptions o = base_options();
    o.loss_stage = 0;
    CHECK_THROWS_AS(PipelineEngine(test_module(), "1f1b", *transport, o), UsageError);
    CHECK_THROWS_WITH(
        PipelineEngine(test_module(), "1f1b", *transport, o),
        Catch::Contains("the loss function is given for stage 0") && Catch::Contains("only the last stage, 1"));
  }
}

namespace {

using pipescope::exec::testing::ExampleRun;

ExampleRun run_example(const std::string& name, const std::string& args) {
  return pipescope::exec::testing::run_example_program(EXAMPLE_TRAIN_CUSTOM_MODEL_PATH, name, args);
}

}  // namespace

TEST_CASE("example_train_custom_model: 2 processes reproduce the single process bit for bit") {
  const ExampleRun single = run_example("custom-single", "--nproc-per-node 1 --schedule data-parallel");
  INFO(single.err);
  REQUIRE(single.status == 0);
  REQUIRE(single.losses.size() == 6);
  CHECK(single.losses.back() < single.losses.front());
  for (const std::string extra : {"", " --recompute"}) {
    const ExampleRun piped = run_example("custom-1f1b", "--nproc-per-node 2 --schedule 1f1b" + extra);
    INFO(extra << piped.err);
    REQUIRE(piped.status == 0);
    REQUIRE(piped.losses.size() == 6);
    for (std::size_t i = 0; i < 6; ++i) CHECK(piped.losses[i] == single.losses[i]);
  }
  const ExampleRun bad = run_example("custom-bad", "--nproc-per-node 2 --bogus");
  CHECK(bad.status == 1);
  CHECK_THAT(bad.err, Catch::Contains("example_train_custom_model: error: rank 0: unknown argument '--bogus'") ||
                          Catch::Contains("example_train_custom_model: error: rank 1: unknown argument '--bogus'"));
}
