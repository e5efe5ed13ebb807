// Training precision (EngineOptions::dtype, RuntimeOptions::dtype / loss_scaling) on
// in-process ranks over the fake transport.
// Scenarios and what they expect:
// - bf16 on 2 pipeline ranks (1F1B, 4 micro-batches) against bf16 in one process, for the mlp
//   (declared shapes) and tiny-gpt (a tied embedding/head on both ranks): the same losses and
//   fp32 master weights, bit for bit, because every micro-batch runs the same bf16 ops and the
//   weight gradients join fp32 sums in micro-batch order.
// - bf16 against fp32 (same model, data and seed): not equal, but the losses of 5 steps stay
//   within 2% of each other (measured: below 0.04%), and between steps the parameters are fp32.
// - a bf16 run learns: the mlp's loss over 30 steps falls by more than a quarter (measured:
//   2.04 -> 1.00).
// - transfers in bf16 carry half the bytes of fp32 ones (the trace's send events).
// - a checkpoint of a bf16 run holds fp32 weights and AdamW moments; an fp32 engine resumes it
//   and its next loss is close to the bf16 run's (and a bf16 engine resumes its own exactly).
// - ranks given different dtypes are refused naming both; fp16 on the CPU is refused in one
//   line; a received header with another dtype is named (dtype_mismatch).
// - dynamic loss scaling: a power-of-two scale changes nothing (bit for bit), a scale that
//   overflows skips the step on every rank, leaves the weights as they were and backs off.
//   The same for tiny-moe, whose auxiliary load-balancing loss's gradient is scaled with the
//   loss's (by the runtime, with no setting by the caller): weights and losses bit for bit.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "in_process_ranks.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/exec/engine.hpp"
#include "fused_adamw.hpp"
#include "pipescope/exec/device.hpp"
#include "pprun/options.hpp"
#include "runtime/wire_format.hpp"

using namespace pipescope;
using namespace pipescope::exec;
using namespace std::chrono_literals;

namespace {

ModelSpec precision_mlp() {
  ModelConfig c;
  c.layers = 4;
  c.hidden = 32;
  c.vocab = 8;
  c.micro_batch_size = 8;
  return make_model_spec(c);
}

ModelSpec small_gpt() {
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

struct PrecisionRun {
  std::string error;
  std::vector<StepResult> steps;              // this rank's
  std::map<std::string, at::Tensor> weights;  // by parameter name, after the last step
};

EngineOptions options_in(at::ScalarType dtype, double learning_rate = 1e-3) {
  EngineOptions o;
  o.micro_batches = 4;
  o.retain_freed_cpu_memory = false;
  o.learning_rate = learning_rate;
  o.timeout = 20000ms;
  o.dtype = dtype;
  return o;
}

void keep_weights(PipelineEngine& engine, PrecisionRun& run) {
  for (int s : engine.stages())
    for (const auto& p : engine.runtime().stage_module(s).parameters()) run.weights[p.name] = p.tensor.detach().clone();
}

std::vector<PrecisionRun> train(const ModelSpec& model, int ranks, at::ScalarType dtype, int steps,
                                double learning_rate = 1e-3) {
  auto runs = testing::run_in_process_ranks<PrecisionRun>(ranks, [&](int, Transport& world, PrecisionRun& run) {
    // One process: the gradient-accumulation run (every micro-batch's forward and backward).
    const char* schedule = ranks == 1 ? "data-parallel" : "1f1b";
    PipelineEngine engine(PipelineModule(model), schedule, world, options_in(dtype, learning_rate));
    for (int step = 0; step < steps; ++step) run.steps.push_back(engine.train_synthetic_batch());
    keep_weights(engine, run);
  });
  for (const auto& r : runs) REQUIRE(r.error.empty());
  return runs;
}

// The mean loss of each step over the ranks that hold the last stage.
std::vector<double> losses(const std::vector<PrecisionRun>& runs) {
  std::vector<double> out(runs.front().steps.size(), 0.0);
  for (std::size_t step = 0; step < out.size(); ++step) {
    double sum = 0;
    int count = 0;
    for (const auto& r : runs) {
      sum += r.steps[step].loss_sum;
      count += r.steps[step].loss_count;
    }
    out[step] = sum / count;
  }
  return out;
}

std::map<std::string, at::Tensor> all_weights(const std::vector<PrecisionRun>& runs) {
  std::map<std::string, at::Tensor> out;
  for (const auto& r : runs) out.insert(r.weights.begin(), r.weights.end());
  return out;
}

std::int64_t send_bytes(const std::vector<PrecisionRun>& runs) {
  std::int64_t total = 0;
  for (const auto& r : runs)
    for (const auto& e : r.steps.back().events)
      if (e.category == "p2p" && e.bytes > 0 && e.name.find("SEND") != std::string::npos) total += e.bytes;
  return total;
}

}  // namespace

TEST_CASE("bf16 on 2 pipeline ranks equals bf16 in one process bit for bit", "[precision]") {
  for (const auto& model : {precision_mlp(), small_gpt()}) {
    INFO(model.config.name);
    const auto pipelined = train(model, 2, at::kBFloat16, 3);
    const auto single = train(model, 1, at::kBFloat16, 3);
    const auto a = losses(pipelined), b = losses(single);
    REQUIRE(a.size() == 3);
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
    const auto wa = all_weights(pipelined), wb = all_weights(single);
    REQUIRE(wa.size() == wb.size());
    for (const auto& [name, w] : wa) {
      INFO(name);
      REQUIRE(wb.count(name) == 1);
      CHECK(w.scalar_type() == at::kFloat);  // the masters, back in place between steps
      CHECK(at::equal(w, wb.at(name)));
    }
  }
}

TEST_CASE("bf16 differs from fp32 within a bound, and keeps fp32 weights between steps", "[precision]") {
  const auto fp32 = losses(train(precision_mlp(), 2, at::kFloat, 5));
  const auto bf16_runs = train(precision_mlp(), 2, at::kBFloat16, 5);
  const auto bf16 = losses(bf16_runs);
  bool any_different = false;
  for (std::size_t i = 0; i < fp32.size(); ++i) {
    INFO("step " << i << ": fp32 " << fp32[i] << ", bf16 " << bf16[i]);
    CHECK(std::abs(bf16[i] - fp32[i]) / fp32[i] < 0.02);
    any_different = any_different || bf16[i] != fp32[i];
  }
  CHECK(any_different);  // bf16 really computed in bf16
  for (const auto& [name, w] : all_weights(bf16_runs)) CHECK(w.scalar_type() == at::kFloat);
}

TEST_CASE("a bf16 run learns", "[precision]") {
  const auto curve = losses(train(precision_mlp(), 2, at::kBFloat16, 30, 1e-2));
  INFO("first loss " << curve.front() << ", last " << curve.back());
  CHECK(curve.back() < 0.75 * curve.front());
}

TEST_CASE("bf16 transfers between stages carry half the bytes of fp32 ones", "[precision]") {
  for (const auto& model : {precision_mlp(), small_gpt()}) {
    INFO(model.config.name);
    const std::int64_t fp32 = send_bytes(train(model, 2, at::kFloat, 1));
    const std::int64_t bf16 = send_bytes(train(model, 2, at::kBFloat16, 1));
    REQUIRE(fp32 > 0);
    CHECK(bf16 * 2 == fp32);
  }
}

TEST_CASE("the memory counters count a bf16 element as 2 bytes", "[precision]") {
  install_counting_cpu_allocator();
  const std::int64_t before = cpu_memory().current_bytes;
  at::Tensor t = at::empty({1000, 1000}, at::TensorOptions().dtype(at::kBFloat16));
  CHECK(cpu_memory().current_bytes - before == 2'000'000);
}

TEST_CASE("a bf16 checkpoint holds fp32 masters and resumes in fp32 and in bf16", "[precision]") {
  const std::string dir = (std::filesystem::temp_directory_path() / "pipescope_test_precision").string();
  std::filesystem::remove_all(dir);
  const ModelSpec model = precision_mlp();
  // 2 bf16 steps, a checkpoint, a third step: the reference.
  auto straight = testing::run_in_process_ranks<PrecisionRun>(2, [&](int, Transport& world, PrecisionRun& run) {
    PipelineEngine engine(PipelineModule(model), "1f1b", world, options_in(at::kBFloat16));
    for (int step = 0; step < 2; ++step) run.steps.push_back(engine.train_synthetic_batch());
    engine.save_checkpoint(dir, {{"test", "precision"}});
    keep_weights(engine, run);  // the masters the checkpoint holds
    run.steps.push_back(engine.train_synthetic_batch());
  });
  for (const auto& r : straight) REQUIRE(r.error.empty());
  auto resume_in = [&](at::ScalarType dtype) {
    auto runs = testing::run_in_process_ranks<PrecisionRun>(2, [&](int, Transport& world, PrecisionRun& run) {
      PipelineEngine engine(PipelineModule(model), "1f1b", world, options_in(dtype));
      engine.load_checkpoint(dir, *read_manifest(dir));
      keep_weights(engine, run);
      for (int s : engine.stages()) {
        auto& optimizer = engine.runtime().optimizer(s);
        for (const auto& [key, state] : optimizer.state()) {
          const auto& adam = static_cast<const torch::optim::AdamWParamState&>(*state);
          if (adam.exp_avg().scalar_type() != at::kFloat) throw std::runtime_error("an AdamW moment is not fp32");
        }
      }
      run.steps.push_back(engine.train_synthetic_batch());
    });
    for (const auto& r : runs) REQUIRE(r.error.empty());
    return runs;
  };
  const auto saved = all_weights(straight);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    INFO(compute_dtype_name(dtype));
    const auto resumed = resume_in(dtype);
    for (const auto& [name, w] : all_weights(resumed)) {
      INFO(name);
      CHECK(w.scalar_type() == at::kFloat);
      CHECK(at::equal(w, saved.at(name)));
    }
    const double reference = straight[1].steps.back().loss_sum, next = resumed[1].steps.back().loss_sum;
    if (dtype == at::kBFloat16)
      CHECK(next == reference);
    else
      CHECK(std::abs(next - reference) / reference < 0.02);
  }
}

TEST_CASE("ranks with different dtypes and fp16 on the CPU are refused", "[precision]") {
  auto runs = testing::run_in_process_ranks<PrecisionRun>(2, [](int rank, Transport& world, PrecisionRun&) {
    PipelineEngine engine(PipelineModule(precision_mlp()), "1f1b", world,
                          options_in(rank == 0 ? at::kFloat : at::kBFloat16));
  });
  for (const auto& r : runs) {
    CHECK_THAT(r.error, Catch::Contains("computes in") && Catch::Contains("every rank must be given the same dtype"));
  }
  CHECK_THAT(runs[0].error, Catch::Contains("rank 0 computes in fp32, rank 1 in bf16"));

  auto fp16 = testing::run_in_process_ranks<PrecisionRun>(1, [](int, Transport& world, PrecisionRun&) {
    PipelineEngine engine(PipelineModule(precision_mlp()), "data-parallel", world, options_in(at::kHalf));
  });
  CHECK_THAT(fp16[0].error, Catch::Contains("fp16 needs a CUDA device"));
  CHECK(fp16[0].error.find('\n') == std::string::npos);

  CHECK_THROWS_WITH(parse_compute_dtype("fp8", "option --dtype"), Catch::Contains("unknown dtype 'fp8'"));
  CHECK(parse_compute_dtype("bf16", "x") == at::kBFloat16);
  CHECK(compute_dtype_name(at::kHalf) == "fp16");
}

TEST_CASE("a received shape header must carry the compute dtype", "[precision]") {
  using runtime::dtype_mismatch;
  CHECK(dtype_mismatch({at::kBFloat16, at::kLong}, at::kBFloat16).empty());
  CHECK(dtype_mismatch({at::kFloat, at::kLong}, at::kFloat).empty());
  CHECK_THAT(dtype_mismatch({at::kLong, at::kFloat}, at::kBFloat16),
             Catch::Contains("tensor 1 is Float") && Catch::Contains("BFloat16"));
  CHECK_THAT(dtype_mismatch({at::kBFloat16}, at::kFloat), Catch::Contains("tensor 0 is BFloat16"));
  CHECK(runtime::wire_dtype(at::kFloat, at::kBFloat16) == at::kBFloat16);
  CHECK(runtime::wire_dtype(at::kLong, at::kBFloat16) == at::kLong);
  CHECK(runtime::wire_dtype(at::kDouble, at::kFloat) == at::kDouble);

  // A peer sending fp32 to a bf16 stage over headers (a model without declared shapes) is named.
  ModelSpec undeclared = precision_mlp();
  undeclared.boundary.clear();
  const Partition partition = PipelineModule(undeclared).partition(2, "uniform");
  ScheduleParams params;
  params.num_ranks = 2;
  params.num_micro_batches = 2;
  const Schedule schedule = make_schedule("1f1b", params);
  auto runs = testing::run_in_process_ranks<PrecisionRun>(2, [&](int rank, Transport& world, PrecisionRun&) {
    GridPosition position;
    position.pipe_rank = rank;
    position.pipeline_ranks = 2;
    RuntimeOptions options;
    options.timeout = 5000ms;
    options.dtype = rank == 0 ? at::kFloat : at::kBFloat16;
    PipelineRuntime runtime(undeclared, schedule, partition, world, position, options);
    runtime.run_step(0, 0);
  });
  CHECK_THAT(runs[1].error, Catch::Contains("from rank 0: tensor 0 is Float, but this stage computes in BFloat16"));
}

TEST_CASE("dynamic loss scaling follows GradScaler's rules", "[precision]") {
  LossScaleOptions o;
  o.initial_scale = 1024;
  o.growth_interval = 3;
  DynamicLossScaler scaler(o);
  CHECK(scaler.update(false));
  CHECK(scaler.update(false));
  CHECK(scaler.scale() == 1024);
  CHECK(scaler.update(false));
  CHECK(scaler.scale() == 2048);  // grown after 3 clean steps
  CHECK_FALSE(scaler.update(true));
  CHECK(scaler.scale() == 1024);  // backed off, step skipped
  CHECK(scaler.skipped_steps() == 1);
  CHECK(scaler.update(false));
  CHECK(scaler.update(false));
  CHECK(scaler.scale() == 1024);  // the count of clean steps started again after the skip
  o.backoff_factor = 1.5;
  CHECK_THROWS_WITH(DynamicLossScaler(o), Catch::Contains("backoff factor 1.5"));
}

TEST_CASE("loss scaling in the runtime: exact with a power of two, a step skipped on overflow", "[precision]") {
  const ModelSpec model = small_gpt();
  const Partition partition = PipelineModule(model).partition(2, "uniform");
  ScheduleParams params;
  params.num_ranks = 2;
  params.num_micro_batches = 4;
  const Schedule schedule = make_schedule("1f1b", params);
  // Steps on micro-batches 0..3 each time, so that a skipped step is followed by the same step.
  auto run_with = [&](bool scaling, double initial_scale, double backoff, int steps) {
    auto runs = testing::run_in_process_ranks<PrecisionRun>(2, [&](int rank, Transport& world, PrecisionRun& run) {
      GridPosition position;
      position.pipe_rank = rank;
      position.pipeline_ranks = 2;
      RuntimeOptions options;
      options.timeout = 20000ms;
      options.dtype = at::kBFloat16;
      options.loss_scaling = scaling;
      options.loss_scale.initial_scale = initial_scale;
      options.loss_scale.backoff_factor = backoff;
      PipelineRuntime runtime(model, schedule, partition, world, position, options);
      for (int step = 0; step < steps; ++step) {
        run.steps.push_back(runtime.run_step(step, 0));
        if (step == 0)
          for (int s : runtime.stages())
            for (const auto& p : runtime.stage_module(s).parameters()) run.weights[p.name] = p.tensor.detach().clone();
      }
    });
    INFO("rank 0: " << runs[0].error << "; rank 1: " << runs[1].error);
    for (const auto& r : runs) REQUIRE(r.error.empty());
    return runs;
  };
  const auto plain = run_with(false, 1, 0.5, 2);
  const auto scaled = run_with(true, 65536, 0.5, 2);
  CHECK(losses(plain) == losses(scaled));
  for (const auto& r : scaled) {
    CHECK(r.steps[0].loss_scale == 65536);
    CHECK_FALSE(r.steps[0].step_skipped);
  }
  for (const auto& [name, w] : all_weights(plain)) CHECK(at::equal(w, all_weights(scaled).at(name)));

  // 2^200 overflows fp32 and bf16: step 0 is skipped on both ranks and the weights stay the
  // initial ones; the scale backs off to 2^100 and step 1 (the same micro-batches) is step 0 of
  // an unscaled run.
  const auto overflowing = run_with(true, std::ldexp(1.0, 200), std::ldexp(1.0, -100), 2);
  const auto fresh = testing::run_in_process_ranks<PrecisionRun>(2, [&](int rank, Transport& world, PrecisionRun& run) {
    GridPosition position;
    position.pipe_rank = rank;
    position.pipeline_ranks = 2;
    PipelineRuntime runtime(model, schedule, partition, world, position, RuntimeOptions{});
    for (int s : runtime.stages())
      for (const auto& p : runtime.stage_module(s).parameters()) run.weights[p.name] = p.tensor.detach().clone();
  });
  for (const auto& r : overflowing) {
    CHECK(r.steps[0].step_skipped);
    CHECK(r.steps[0].loss_scale == std::ldexp(1.0, 200));
    CHECK_FALSE(r.steps[1].step_skipped);
    CHECK(r.steps[1].loss_scale == std::ldexp(1.0, 100));
  }
  for (const auto& [name, w] : all_weights(fresh)) CHECK(at::equal(w, all_weights(overflowing).at(name)));
  CHECK(losses(overflowing)[1] == losses(plain)[0]);
}

TEST_CASE("loss scaling scales a MoE layer's auxiliary loss gradient with the loss's", "[precision]") {
  ModelConfig c;
  c.name = "tiny-moe";
  c.layers = 2;
  c.hidden = 32;
  c.vocab = 40;
  c.seq_len = 8;
  c.micro_batch_size = 2;
  c.experts = 4;
  c.top_k = 2;
  c.moe_ffn_hidden = 16;
  c.seed = 7;
  ScheduleParams params;
  params.num_ranks = 2;
  params.num_micro_batches = 4;
  const Schedule schedule = make_schedule("1f1b", params);
  auto run_with = [&](bool scaling) {
    auto runs = testing::run_in_process_ranks<PrecisionRun>(2, [&](int rank, Transport& world, PrecisionRun& run) {
      const ModelSpec model = make_model_spec(c);  // a rank's own: its ExpertParallel is its own
      const Partition partition = PipelineModule(model).partition(2, "uniform");
      GridPosition position;
      position.pipe_rank = rank;
      position.pipeline_ranks = 2;
      RuntimeOptions options;
      options.timeout = 20000ms;
      options.loss_scaling = scaling;
      options.loss_scale.initial_scale = 65536;
      PipelineRuntime runtime(model, schedule, partition, world, position, options);
      for (int step = 0; step < 2; ++step) run.steps.push_back(runtime.run_step(step, step * 4));
      for (int s : runtime.stages())
        for (const auto& p : runtime.stage_module(s).parameters()) run.weights[p.name] = p.tensor.detach().clone();
    });
    INFO("rank 0: " << runs[0].error << "; rank 1: " << runs[1].error);
    for (const auto& r : runs) REQUIRE(r.error.empty());
    return runs;
  };
  const auto plain = run_with(false);
  const auto scaled = run_with(true);
  CHECK(losses(plain) == losses(scaled));
  for (const auto& r : scaled) CHECK_FALSE(r.steps[0].step_skipped);
  const auto scaled_weights = all_weights(scaled);
  int routers = 0;
  for (const auto& [name, w] : all_weights(plain)) {
    INFO(name);
    routers += name.find("router") != std::string::npos ? 1 : 0;
    CHECK(at::equal(w, scaled_weights.at(name)));
  }
  CHECK(routers == 2);  // the auxiliary loss's gradient reaches the routers (one a block)
}

TEST_CASE("pprun --dtype: parsed, checked and in --help", "[precision][options]") {
  CHECK(parse_run_options({}).dtype == "fp32");
  RunOptions bf16 = parse_run_options({"--dtype", "bf16"});
  CHECK(bf16.dtype == "bf16");
  CHECK_NOTHROW(check_run_options(bf16));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--dtype=fp8"})),
                    "option --dtype: unknown dtype 'fp8' (known: fp32, bf16, fp16)");
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--dtype", "fp16"})),
                    Catch::StartsWith("option --dtype fp16 needs --device cuda"));
  CHECK_THAT(run_options_help(), Catch::Contains("--dtype fp32|bf16|fp16") && Catch::Contains("(default fp32)"));
}
