// The expert-call probe (moe/expert_call_probe.hpp) on one in-process rank.
// Scenario: tiny-moe, 2 MoE blocks of 4 experts (top-2, FFN 32), hidden 16, seq 8, micro-batch
// size 2, all 5 layers on one stage, 2 micro-batches a step.
// Expected:
// - expert_probe_rows: a quarter, a half, once and twice the mean rows, rounded, at least 1,
//   each once (64 -> 16 32 64 128; 2.6 -> 1 3 5; 1 -> 1 2; 0 -> 1); mean_rows_per_call averages
//   a layer's forward calls only.
// - after a step, the probe gives blocks.0 (calls of 10 and 14 rows: mean 12) rows 3, 6, 12, 24
//   and blocks.1 (no calls: a micro-batch's even share, 2 x 8 x 2 / 4 = 8) rows 2, 4, 8, 16, a
//   forward and a backward entry each, on stage 0, with 5 timings above 0.
// - it changes nothing of the run: the next step's loss and weights equal those of a run without
//   the probe bit for bit, the process-wide random stream is where it was, the call log stays
//   empty, and in a bf16 probe the parameters keep their fp32 masters.
#include <catch2/catch.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include <map>
#include <string>
#include <vector>

#include "moe/expert_call_probe.hpp"
#include "pipescope/core/generators.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/exec/device.hpp"
#include "pipescope/exec/runtime.hpp"

using namespace pipescope;
using namespace pipescope::exec;

namespace {

constexpr int kProbeMicroBatches = 2;

ModelSpec probe_test_model() {
  ModelConfig c;
  c.name = "tiny-moe";
  c.layers = 2;
  c.hidden = 16;
  c.seq_len = 8;
  c.vocab = 32;
  c.micro_batch_size = 2;
  c.experts = 4;
  c.top_k = 2;
  c.moe_ffn_hidden = 32;
  c.seed = 11;
  return make_model_spec(c);
}

// One stage on one rank: the data-parallel schedule's program (core's generator).
Schedule one_stage_schedule() {
  ScheduleParams params;
  params.num_ranks = 1;
  params.num_micro_batches = kProbeMicroBatches;
  return data_parallel_schedule(params);
}

// One rank holding the whole model, on the fake transport (the runtime keeps the schedule's address).
struct OneRank {
  ModelSpec model = probe_test_model();
  Schedule schedule = one_stage_schedule();
  std::unique_ptr<Transport> transport = make_fake_transport(make_fake_network(1), 0);
  PipelineRuntime runtime{model, schedule, Partition{{0, 5}, {}, {}}, *transport, GridPosition{}, {}};
  std::shared_ptr<ComputeDevice> device = make_cpu_device();  // the runtime's is one as well

  double step(int index) {
    const StepResult r = runtime.run_step(index, static_cast<std::int64_t>(index) * kProbeMicroBatches);
    return r.loss_sum / r.loss_count;
  }
  std::vector<traces::ExpertCallProbe> probe(at::ScalarType dtype) {
    const std::vector<moe::ExpertCallRecord> calls = {
        {"blocks.0", 0, false, 10, 0, 1}, {"blocks.0", 3, false, 14, 0, 1}, {"blocks.0", 3, true, 100, 0, 1}};
    return moe::probe_expert_calls(runtime, model, *device, dtype, calls, 5);
  }
  std::map<std::string, at::Tensor> weights() {
    std::map<std::string, at::Tensor> out;
    for (const auto& p : runtime.stage_module(0).parameters()) out[p.name] = p.tensor.detach().clone();
    return out;
  }
};

}  // namespace

TEST_CASE("expert-call probe: rows from a quarter to twice a call's mean, each once") {
  CHECK(moe::expert_probe_rows(64) == std::vector<std::int64_t>{16, 32, 64, 128});
  CHECK(moe::expert_probe_rows(2.6) == std::vector<std::int64_t>{1, 3, 5});
  CHECK(moe::expert_probe_rows(1) == std::vector<std::int64_t>{1, 2});
  CHECK(moe::expert_probe_rows(0) == std::vector<std::int64_t>{1});
  const auto means = moe::mean_rows_per_call(
      {{"blocks.0", 0, false, 10, 0, 1}, {"blocks.0", 1, false, 13, 0, 1}, {"blocks.0", 1, true, 99, 0, 1}});
  REQUIRE(means.size() == 1);
  CHECK(means.at("blocks.0") == 11.5);
}

TEST_CASE("expert-call probe: each MoE layer's first expert at 4 row counts, forward and backward") {
  OneRank rank;
  rank.step(0);
  const auto probes = rank.probe(at::kFloat);
  REQUIRE(probes.size() == 16);
  const std::map<std::string, std::vector<std::int64_t>> expected_rows = {{"blocks.0", {3, 6, 12, 24}},
                                                                          {"blocks.1", {2, 4, 8, 16}}};
  std::map<std::string, std::vector<std::int64_t>> forward_rows, backward_rows;
  for (const auto& p : probes) {
    INFO(p.layer << (p.backward ? " backward " : " forward ") << p.rows);
    CHECK(p.stage == 0);
    REQUIRE(p.us.size() == 5);
    for (const double us : p.us) CHECK(us > 0);
    (p.backward ? backward_rows : forward_rows)[p.layer].push_back(p.rows);
  }
  CHECK(forward_rows == expected_rows);
  CHECK(backward_rows == expected_rows);
}

TEST_CASE("expert-call probe: the run goes on as without it, bit for bit") {
  OneRank probed, plain;
  CHECK(probed.step(0) == plain.step(0));
  moe::expert_call_log(*probed.model.expert_parallel).take_records();
  const at::Tensor random_state = at::detail::getDefaultCPUGenerator().get_state();
  const auto masters = probed.weights();
  probed.probe(at::kBFloat16);
  for (const auto& [name, w] : probed.weights()) {
    INFO(name);
    CHECK(w.scalar_type() == at::kFloat);
    CHECK(at::equal(w, masters.at(name)));
  }
  probed.probe(at::kFloat);
  CHECK(at::equal(at::detail::getDefaultCPUGenerator().get_state(), random_state));
  CHECK(moe::expert_call_log(*probed.model.expert_parallel).take_records().empty());
  CHECK(probed.step(1) == plain.step(1));
  const auto plain_weights = plain.weights();
  for (const auto& [name, w] : probed.weights()) {
    INFO(name);
    CHECK(at::equal(w, plain_weights.at(name)));
  }
}
