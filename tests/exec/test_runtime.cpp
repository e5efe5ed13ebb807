// The runtime on in-process ranks (threads) over the fake transport, with hand-built schedules.
// Scenario: tiny-gpt (2 blocks, hidden 32, vocab 40, seq 8; layers embed | blocks.0 blocks.1 |
// norm head, so the tied embedding/head weight lives on both ranks), 4 micro-batches, 2 steps.
// Expected: a 2-rank GPipe whose backwards run in REVERSE micro-batch order gives bit-identical
// losses and weights to the 1-rank gradient-accumulation run (order-independent accumulation,
// exact tied-gradient sum); the same with split backward (I then W) matches within 1e-6
// relative; a rank whose peer never sends fails after the 200 ms timeout with an error naming
// itself (rank 1), the step, the instruction (1RECV_F0) and the peer (rank 0).
#include <catch2/catch.hpp>

#include <thread>

#include "pipescope/exec/device.hpp"
#include "pipescope/exec/runtime.hpp"

using namespace pipescope;
using namespace pipescope::exec;
using namespace std::chrono_literals;

namespace {

constexpr int kMicroBatches = 4;

ModelSpec test_model() {
  ModelConfig c;
  c.name = "tiny-gpt";
  c.layers = 2;
  c.hidden = 32;
  c.vocab = 40;
  c.seq_len = 8;
  c.micro_batch_size = 2;
  c.seed = 5;
  return make_model_spec(c);
}

Instruction ins(Op op, int stage, int mb = kNone) { return Instruction{op, stage, mb, kNone, kNone}; }

void end_of_batch(Program& p, int stage) {
  p.push_back({ins(Op::ReduceTiedGrads, stage)});
  p.push_back({ins(Op::ReduceGrads, stage)});
  p.push_back({ins(Op::OptimizerStep, stage)});
}

Schedule single_rank_schedule() {
  Schedule s;
  s.name = "single";
  s.num_ranks = 1;
  s.num_stages = 1;
  s.num_micro_batches = kMicroBatches;
  s.stage_to_rank = {0};
  Program p;
  for (int m = 0; m < kMicroBatches; ++m)
    p.push_back({ins(Op::LoadMicroBatch, 0, m), ins(Op::ForwardPass, 0, m), ins(Op::BackwardPass, 0, m)});
  end_of_batch(p, 0);
  s.programs = {p};
  return s;
}

// GPipe on 2 ranks; backwards in reverse micro-batch order; optionally split into I and W.
Schedule two_rank_schedule(bool split_backward) {
  Schedule s;
  s.name = split_backward ? "gpipe-split" : "gpipe-reversed";
  s.num_ranks = 2;
  s.num_stages = 2;
  s.num_micro_batches = kMicroBatches;
  s.stage_to_rank = {0, 1};
  Program r0, r1;
  for (int m = 0; m < kMicroBatches; ++m) {
    r0.push_back({ins(Op::LoadMicroBatch, 0, m), ins(Op::ForwardPass, 0, m), ins(Op::SendActivation, 0, m)});
    r1.push_back({ins(Op::RecvActivation, 1, m), ins(Op::LoadMicroBatch, 1, m), ins(Op::ForwardPass, 1, m)});
  }
  for (int m = kMicroBatches - 1; m >= 0; --m) {
    if (split_backward) {
      r1.push_back({ins(Op::BackwardInput, 1, m), ins(Op::SendGrad, 1, m)});
      r0.push_back({ins(Op::RecvGrad, 0, m), ins(Op::BackwardInput, 0, m)});
    } else {
      r1.push_back({ins(Op::BackwardPass, 1, m), ins(Op::SendGrad, 1, m)});
      r0.push_back({ins(Op::RecvGrad, 0, m), ins(Op::BackwardPass, 0, m)});
    }
  }
  if (split_backward)
    for (int m = 0; m < kMicroBatches; ++m) {
      r1.push_back({ins(Op::BackwardWeight, 1, m)});
      r0.push_back({ins(Op::BackwardWeight, 0, m)});
    }
  end_of_batch(r0, 0);
  end_of_batch(r1, 1);
  s.programs = {r0, r1};
  return s;
}

struct RunResult {
  std::vector<double> losses;                 // per step
  std::map<std::string, at::Tensor> weights;  // by parameter name, after the last step
};

RunResult run_in_threads(const ModelSpec& model, const Schedule& schedule, const Partition& partition, int steps) {
  auto net = make_fake_network(schedule.num_ranks);
  std::vector<std::vector<StepResult>> results(static_cast<std::size_t>(schedule.num_ranks));
  std::vector<std::map<std::string, at::Tensor>> weights(static_cast<std::size_t>(schedule.num_ranks));
  std::vector<std::string> errors(static_cast<std::size_t>(schedule.num_ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < schedule.num_ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        auto transport = make_fake_transport(net, r);
        GridPosition pos;
        pos.pipe_rank = r;
        pos.pipeline_ranks = schedule.num_ranks;
        RuntimeOptions options;
        options.timeout = 10000ms;
        PipelineRuntime runtime(model, schedule, partition, *transport, pos, options);
        for (int step = 0; step < steps; ++step) results[r].push_back(runtime.run_step(step, step * kMicroBatches));
        for (int s : runtime.stages())
          for (const auto& p : runtime.stage_module(s).parameters()) weights[r][p.name] = p.tensor.detach().clone();
      } catch (const std::exception& e) {
        errors[r] = e.what();
        fake_network_fail_rank(*net, r);
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) REQUIRE(e.empty());
  RunResult out;
  for (int step = 0; step < steps; ++step) {
    double sum = 0, count = 0;
    for (int r = 0; r < schedule.num_ranks; ++r) {
      sum += results[r][step].loss_sum;
      count += results[r][step].loss_count;
    }
    out.losses.push_back(sum / count);
  }
  for (auto& w : weights) out.weights.insert(w.begin(), w.end());
  return out;
}

}  // namespace

TEST_CASE("pipelined runs reproduce the single-process run") {
  const ModelSpec model = test_model();
  REQUIRE(model.layers.size() == 5);
  const RunResult reference = run_in_threads(model, single_rank_schedule(), Partition{{0, 5}, {}, {}}, 2);
  const Partition two{{0, 1, 5}, {}, {}};
  REQUIRE(reference.losses[1] < reference.losses[0] + 1.0);

  SECTION("full backward, reversed backward order: bitwise") {
    const RunResult piped = run_in_threads(model, two_rank_schedule(false), two, 2);
    REQUIRE(piped.losses.size() == 2);
    for (int i = 0; i < 2; ++i) CHECK(piped.losses[i] == reference.losses[i]);
    REQUIRE(piped.weights.size() == reference.weights.size());
    for (const auto& [name, w] : reference.weights) {
      INFO(name);
      CHECK(at::equal(piped.weights.at(name), w));
    }
  }
  SECTION("split backward: within 1e-6 relative") {
    const RunResult piped = run_in_threads(model, two_rank_schedule(true), two, 2);
    for (int i = 0; i < 2; ++i) CHECK(piped.losses[i] == Approx(reference.losses[i]).epsilon(1e-6));
    for (const auto& [name, w] : reference.weights) {
      INFO(name);
      CHECK(at::allclose(piped.weights.at(name), w, 1e-6, 1e-7));
    }
  }
}

TEST_CASE("a rank whose peer is silent fails naming itself, the instruction and the peer") {
  const ModelSpec model = test_model();
  const Schedule schedule = two_rank_schedule(false);
  auto net = make_fake_network(2);
  auto transport = make_fake_transport(net, 1);
  GridPosition pos;
  pos.pipe_rank = 1;
  pos.pipeline_ranks = 2;
  RuntimeOptions options;
  options.timeout = 200ms;
  PipelineRuntime runtime(model, schedule, Partition{{0, 1, 5}, {}, {}}, *transport, pos, options);
  try {
    runtime.run_step(0, 0);
    FAIL("the step should have failed");
  } catch (const RuntimeError& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::StartsWith("rank 1: step 0"));
    CHECK_THAT(message, Catch::Contains("1RECV_F0"));
    CHECK_THAT(message, Catch::Contains("peer rank 0"));
    CHECK_THAT(message, Catch::Contains("timed out"));
  }
}

TEST_CASE("a step records compute, transfer and memory events") {
  // Scenario: one step of the 2-rank schedule; rank 0 records 4 F, 4 B, 4 SEND_F, 4 RECV_B,
  // and several memory samples with a positive peak; every event lies inside the step.
  install_counting_cpu_allocator();
  const ModelSpec model = test_model();
  const Schedule schedule = two_rank_schedule(false);
  auto net = make_fake_network(2);
  StepResult r0;
  std::thread other([&] {
    auto t = make_fake_transport(net, 1);
    GridPosition pos;
    pos.pipe_rank = 1;
    pos.pipeline_ranks = 2;
    PipelineRuntime runtime(model, schedule, Partition{{0, 1, 5}, {}, {}}, *t, pos, RuntimeOptions{});
    runtime.run_step(0, 0);
  });
  {
    auto t = make_fake_transport(net, 0);
    GridPosition pos;
    pos.pipeline_ranks = 2;
    PipelineRuntime runtime(model, schedule, Partition{{0, 1, 5}, {}, {}}, *t, pos, RuntimeOptions{});
    r0 = runtime.run_step(0, 0);
  }
  other.join();
  std::map<std::string, int> counts;
  for (const auto& e : r0.events) {
    ++counts[e.name];
    CHECK(e.ts_us >= 0);
    CHECK(e.end_us() <= r0.time_s * 1e6 + 1);
  }
  CHECK(counts["F"] == 4);
  CHECK(counts["B"] == 4);
  CHECK(counts["SEND_F"] == 4);
  CHECK(counts["RECV_B"] == 4);
  CHECK(counts["LOAD"] == 4);
  CHECK(counts["OPTIMIZER"] == 1);
  REQUIRE(r0.memory.size() > 1);
  CHECK(r0.peak_memory_bytes > 0);
}
