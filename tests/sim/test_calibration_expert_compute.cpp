// The experts' own compute of a MoE run (sim/src/calibration/collect_expert_calls.cpp,
// estimate_expert_compute.cpp) and the prediction at another expert parallelism from it
// (sim/src/profile_expert_compute.cpp).
// A hand-made trace laid out as pprun records tiny-moe at E = 2 with 2 data-parallel replicas:
// 2 pipeline ranks (ranks 0 and 1 of the trace, their EP peers 2 and 3 not in it), 2 stages,
// GPipe, 4 micro-batches; each stage holds 2 MoE blocks (4 experts each, 2 local at E = 2).
//   F: 300 us of its own; per layer a dispatch (60 us), the 2 local experts' forwards, a
//      combine (60 us). Expert j of layer l in micro-batch k gets 64 +- 8 (k + l) rows (j = 0: +,
//      j = 1: -: 128 rows per layer), and its forward takes 100 us + 2 us per row, its
//      backward 150 us + 5 us per row.
//   B: 500 us of its own, the same exchanges and the experts' backwards.
//   REDUCE_GRAD: 1000 us per stage. Layers: blocks.0-3 of 10000 parameters, 8000 of them the
//      4 experts'; at E = 2 = D no other replica holds a rank's experts, so the reduction was of
//      the 2 x 2000 dense parameters.
// Expected: the fits give 100 us + 2 us/row and 150 us + 5 us/row, 128 rows per layer; passes
// net of exchanges and calls: F 300 us, B 500 us.
// At E = 1 a pass puts back 4 calls of 32 rows per layer: F 300 + 2 x 4 x (100 + 64) us, B 500 +
// 2 x 4 x (150 + 160) us. The reduction was measured at one size, and every exchange sent the
// same bytes: no link bandwidth, so the experts' 2 x 8000 parameters add nothing to its 1 ms.
// The same trace with exchanges of 8 and 16 KiB taking 40 us + bytes / 409.6 MB/s gives the
// link: a parameter more costs 4 bytes x 2 x (2 - 1) / 2 / 409.6 MB/s, about 9.8 ns.
// At E = 2, 2 calls of 64 rows: F 300 + 2 x 2 x (100 + 128) us; the reduction stays 1 ms.
// The same trace with every call at 64 rows cannot tell a call's cost from a row's (per row
// alone); with the executor's expert-call probe at 16 to 128 rows (its own level 20 and 30 us
// above), it gives 100 us + 2 us/row and 150 us + 5 us/row again: the probe's slope, the run's level,
// also where the trace holding the probe was left out for the step's steal.
// A profile without the new fields predicts as before; a bad --expert-parallel is refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "calibration_traces.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/sim/calibration.hpp"
#include "pipescope/sim/profile.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace expert_compute_test {

using calibration_test::RankWriter;
using traces::Lane;

constexpr int kMicroBatches = 4;
constexpr double kExchangeUs = 60;
constexpr double kForwardCallUs = 100, kForwardRowUs = 2;
constexpr double kBackwardCallUs = 150, kBackwardRowUs = 5;

// kRowSpread: how far the routing moves a call's rows from 64 (0: every call gets 64).
int g_row_spread = 8;
int rows_of(int expert, int layer, int micro_batch) {
  return 64 + (expert == 0 ? 1 : -1) * g_row_spread * (micro_batch + layer);
}

// With varying_bytes, the exchanges of odd micro-batches send 16 KiB instead of 8 and take
// 40 us + bytes / kLinkBytesPerS (60 and 80 us).
constexpr double kLinkBytesPerS = 409.6e6;

double add_exchange(traces::Trace& t, int rank, const char* name, double at_us, const std::string& layer,
                    std::int64_t bytes = 8192) {
  traces::TraceEvent e;
  e.rank = rank;
  e.lane = static_cast<int>(Lane::AllToAll);
  e.name = name;
  e.kind = traces::event_kind_from_name(e.name);
  e.ts_us = at_us;
  e.dur_us = bytes == 8192 ? kExchangeUs : 40 + static_cast<double>(bytes) / kLinkBytesPerS * 1e6;
  e.bytes = bytes;
  t.events.push_back(e);
  t.args.push_back({t.events.size() - 1,
                    fmt::format(R"({{"layer": "{}", "peers": [{}, {}], "tokens_per_expert": [32, 32, 32, 32]}})", layer,
                                rank, rank + 2)});
  return e.end_us();
}

// A pass of `own_us` holding, per layer, a dispatch, its 2 local experts' calls and a combine.
void pass_with_experts(RankWriter& w, const char* pass, int stage, int k, double own_us, bool backward,
                       bool varying_bytes) {
  const std::int64_t bytes = varying_bytes && k % 2 == 1 ? 16384 : 8192;
  const double start_us = w.now_us;
  double at_us = start_us;
  nlohmann::json calls = nlohmann::json::array();
  for (int i = 0; i < 2; ++i) {
    const int l = backward ? 1 - i : i;
    const std::string layer = fmt::format("blocks.{}", 2 * stage + l);
    at_us += own_us / 4;
    at_us =
        add_exchange(w.trace, w.rank, backward ? "ALL_TO_ALL_COMBINE_B" : "ALL_TO_ALL_DISPATCH_F", at_us, layer, bytes);
    for (int j = 0; j < 2; ++j) {
      const int rows = rows_of(j, 2 * stage + l, k);
      const double us = backward ? kBackwardCallUs + kBackwardRowUs * rows : kForwardCallUs + kForwardRowUs * rows;
      calls.push_back({{"layer", layer}, {"expert", j}, {"rows", rows}, {"us", us}});
      at_us += us;
    }
    at_us =
        add_exchange(w.trace, w.rank, backward ? "ALL_TO_ALL_DISPATCH_B" : "ALL_TO_ALL_COMBINE_F", at_us, layer, bytes);
    at_us += own_us / 4;
  }
  w.op(pass, Lane::Compute, stage, k, at_us - start_us);
  w.trace.args.push_back({w.trace.events.size() - 1, nlohmann::json{{"expert_calls", calls}}.dump()});
}

traces::Trace expert_calls_trace(bool varying_bytes = false) {
  traces::Trace t;
  t.meta.source = "measured";
  t.meta.schedule = "gpipe";
  t.meta.num_ranks = 2;
  t.meta.num_stages = 2;
  t.meta.num_micro_batches = kMicroBatches;
  t.meta.run.data_parallel = 2;
  t.meta.run.model = "tiny-moe";
  t.meta.run.layers.emplace();
  for (int l = 0; l < 4; ++l)
    t.meta.run.layers->push_back({fmt::format("blocks.{}", l), "MoeTransformerBlock", 10000, 4, 8000});
  t.meta.run.stage_bounds = std::vector<int>{0, 2, 4};
  t.meta.run.partition_method = "parameters";
  RankWriter r0{t, 0}, r1{t, 1};
  for (int k = 0; k < kMicroBatches; ++k) {
    pass_with_experts(r0, "F", 0, k, 300, false, varying_bytes);
    r0.send("SEND_F", 0, k, 20, calibration_test::kLatencyUs);
  }
  for (int k = 0; k < kMicroBatches; ++k) {
    r1.now_us = std::max(r1.now_us, r0.now_us);
    r1.op("RECV_F", Lane::Recv, 1, k, 5);
    pass_with_experts(r1, "F", 1, k, 300, false, varying_bytes);
  }
  for (int k = 0; k < kMicroBatches; ++k) {
    pass_with_experts(r1, "B", 1, k, 500, true, varying_bytes);
    r1.send("SEND_B", 1, k, 20, calibration_test::kLatencyUs);
  }
  for (int k = 0; k < kMicroBatches; ++k) {
    r0.now_us = std::max(r0.now_us, r1.now_us);
    r0.op("RECV_B", Lane::Recv, 0, k, 5);
    pass_with_experts(r0, "B", 0, k, 500, true, varying_bytes);
  }
  r0.op("REDUCE_GRAD", Lane::Collective, 0, -1, 1000);
  r1.op("REDUCE_GRAD", Lane::Collective, 1, -1, 1000);
  r0.op("OPTIMIZER", Lane::Collective, 0, -1, 30);
  r1.op("OPTIMIZER", Lane::Collective, 1, -1, 30);
  return t;
}

// The trace with every call at 64 rows (a router that balances exactly), and the executor's
// expert-call probe at 16 to 128 rows on each stage's layers: 120 us + 2 us a row forward,
// 180 us + 5 us a row backward (its level above the passes' calls, as an expert run alone may be).
traces::Trace balanced_trace_with_probe() {
  g_row_spread = 0;
  traces::Trace t = expert_calls_trace();
  g_row_spread = 8;
  auto& probe = t.meta.run.expert_call_probe.emplace();
  for (int stage = 0; stage < 2; ++stage)
    for (const std::int64_t rows : {16, 32, 64, 128}) {
      const std::string layer = fmt::format("blocks.{}", 2 * stage);
      const double forward_us = 120 + kForwardRowUs * static_cast<double>(rows);
      const double backward_us = 180 + kBackwardRowUs * static_cast<double>(rows);
      probe.push_back({stage, layer, false, rows, {forward_us + 1, forward_us, forward_us - 1}});
      probe.push_back({stage, layer, true, rows, {backward_us, backward_us + 3, backward_us - 3}});
    }
  return t;
}

const Calibration& expert_calibration() {
  static const Calibration c = calibrate({{expert_calls_trace(), "moe-e2.json"}});
  return c;
}

// One MoE layer's expert calls in a pass at E (X = 4 experts, 128 rows).
double layer_forward_s(int expert_parallel) {
  const double calls = 4.0 / expert_parallel;
  return calls * (kForwardCallUs + kForwardRowUs * 128 / calls) * 1e-6;
}
double layer_backward_s(int expert_parallel) {
  const double calls = 4.0 / expert_parallel;
  return calls * (kBackwardCallUs + kBackwardRowUs * 128 / calls) * 1e-6;
}

}  // namespace expert_compute_test

using namespace expert_compute_test;

TEST_CASE("calibration recovers a MoE run's expert cost per call and per row, and its passes net of the calls") {
  const Profile& p = expert_calibration().profile;
  REQUIRE(p.expert_compute);
  const ExpertComputeProfile& x = *p.expert_compute;
  CHECK(x.expert_parallel == 2);
  CHECK(x.experts == 4);
  CHECK(x.rows_per_layer == Approx(128));
  CHECK(x.forward.call_s == Approx(kForwardCallUs * 1e-6));
  CHECK(x.forward.row_s == Approx(kForwardRowUs * 1e-6));
  CHECK(x.backward.call_s == Approx(kBackwardCallUs * 1e-6));
  CHECK(x.backward.row_s == Approx(kBackwardRowUs * 1e-6));
  CHECK_FALSE(x.forward.per_row_only);
  CHECK(x.forward.samples == 2 * kMicroBatches * 2 * 2);
  CHECK(x.expert_parameters_per_layer == 8000);
  CHECK(x.reduce_s_per_parameter == 0);  // no link bandwidth measured
  REQUIRE(p.stages.size() == 2);
  for (const StageProfile& s : p.stages) {
    CHECK(s.moe_layers == 2);
    CHECK(s.f_s == Approx(300e-6));
    CHECK(s.full_backward_s == Approx(500e-6));
    CHECK(s.reduce_grads_s == Approx(1000e-6));
  }
  CHECK(parse_profile(to_profile_json(p), "p.json") == p);
}

TEST_CASE("a profile from E = 2 predicts E = 1's expert calls and its larger gradient reduction") {
  const Profile& p = expert_calibration().profile;
  const CostModel e1 = cost_model_from_profile(p, 1);
  const CostModel e2 = cost_model_from_profile(p, 2);
  REQUIRE(e1.stages.size() == 2);
  for (int s = 0; s < 2; ++s) {
    // E = 1: 4 calls of 32 rows per layer, no exchange; the experts' 2 x 8000 parameters join
    // the reduction over both replicas, at no measured cost per byte.
    CHECK(e1.stages[s].f_s == Approx(300e-6 + 2 * layer_forward_s(1)));
    CHECK(e1.stages[s].backward_pass_s() == Approx(500e-6 + 2 * layer_backward_s(1)));
    CHECK(e1.stages[s].f_s == Approx((300 + 2 * 4 * (100 + 2 * 32)) * 1e-6));
    CHECK(e1.stages[s].reduce_grads_s == Approx(1000e-6));
    // E = 2: the measured run again, 2 calls of 64 rows per layer and the exchanges.
    CHECK(e2.stages[s].f_s == Approx(300e-6 + 2 * layer_forward_s(2) + 2 * 2 * kExchangeUs * 1e-6));
    CHECK(e2.stages[s].backward_pass_s() == Approx(500e-6 + 2 * layer_backward_s(2) + 2 * 2 * kExchangeUs * 1e-6));
    CHECK(e2.stages[s].reduce_grads_s == Approx(1000e-6));
  }
}

TEST_CASE(
    "with exchanges whose time follows their bytes, E = 1's reduction adds the experts' gradients over that link") {
  const Calibration c = calibrate({{expert_calls_trace(true), "moe-e2-bytes.json"}});
  REQUIRE(c.profile.all_to_all);
  const AllToAllCost* link = c.profile.all_to_all->cost_of(2);
  REQUIRE(link);
  CHECK(link->bandwidth_bytes_per_s == Approx(kLinkBytesPerS));
  REQUIRE(c.profile.expert_compute);
  const double per_parameter_s = 4.0 * 2 * (2 - 1) / 2 / kLinkBytesPerS;
  CHECK(c.profile.expert_compute->reduce_s_per_parameter == Approx(per_parameter_s));
  const CostModel e1 = cost_model_from_profile(c.profile, 1);
  const CostModel e2 = cost_model_from_profile(c.profile, 2);
  for (int s = 0; s < 2; ++s) {
    CHECK(e1.stages[s].reduce_grads_s == Approx(1000e-6 + 2 * 8000 * per_parameter_s));
    CHECK(e2.stages[s].reduce_grads_s == Approx(1000e-6));
  }
}

TEST_CASE("with every call at one size, the probe's rows tell a call's cost from a row's") {
  traces::Trace without_probe = balanced_trace_with_probe();
  without_probe.meta.run.expert_call_probe.reset();
  const Calibration alone = calibrate({{without_probe, "moe-e2-balanced.json"}});
  REQUIRE(alone.profile.expert_compute);
  CHECK(alone.profile.expert_compute->forward.per_row_only);  // 228 us at 64 rows: 3.56 us a row
  CHECK(alone.profile.expert_compute->forward.row_s == Approx(228e-6 / 64));

  const Calibration probed = calibrate({{balanced_trace_with_probe(), "moe-e2-probed.json"}});
  REQUIRE(probed.profile.expert_compute);
  const ExpertComputeProfile& x = *probed.profile.expert_compute;
  // The probe's slope, and the level of the run's own calls (not the probe's 120 and 180 us).
  CHECK(x.forward.row_s == Approx(kForwardRowUs * 1e-6));
  CHECK(x.forward.call_s == Approx(kForwardCallUs * 1e-6));
  CHECK(x.backward.row_s == Approx(kBackwardRowUs * 1e-6));
  CHECK(x.backward.call_s == Approx(kBackwardCallUs * 1e-6));
  CHECK_FALSE(x.forward.per_row_only);
  CHECK(x.forward.probe_samples == 8);
  CHECK(parse_profile(to_profile_json(probed.profile), "p.json") == probed.profile);
  CHECK(std::any_of(probed.notes.begin(), probed.notes.end(), [](const std::string& n) {
    return n.find("the cost per row from the probe's 8 row counts") != std::string::npos;
  }));
  // At E = 1, 4 calls of 32 rows a layer: what the run's costs give, where the per-row fit
  // alone would charge 4 x 32 x 3.56 us.
  const CostModel e1 = cost_model_from_profile(probed.profile, 1);
  CHECK(e1.stages[0].f_s == Approx((300 + 2 * 4 * (100 + 2 * 32)) * 1e-6));

  // The probe runs after the step: a trace left out for the step's steal still gives it.
  traces::Trace disturbed = balanced_trace_with_probe();
  disturbed.meta.run.stolen_time_s = std::vector<double>{1.0, 1.0};
  const Calibration kept_probe =
      calibrate({{without_probe, "moe-e2-balanced.json"}, {disturbed, "moe-e2-probed-stolen.json"}});
  REQUIRE(kept_probe.profile.expert_compute);
  CHECK(kept_probe.profile.expert_compute->forward.probe_samples == 8);
  CHECK(kept_probe.profile.expert_compute->forward.row_s == Approx(kForwardRowUs * 1e-6));

  traces::Trace bad = balanced_trace_with_probe();
  (*bad.meta.run.expert_call_probe)[3].us = {-1};
  CHECK_THROWS_WITH(calibrate({{bad, "bad.json"}}),
                    "bad.json: otherData.expert_call_probe[3].us: must hold numbers >= 0");
}

TEST_CASE("a profile without expert compute predicts as before, and a bad expert parallelism is refused") {
  Profile p = expert_calibration().profile;
  p.expert_compute.reset();
  const CostModel e1 = cost_model_from_profile(p, 1);
  for (const StageCost& s : e1.stages) {
    CHECK(s.f_s == Approx(300e-6));
    CHECK(s.reduce_grads_s == Approx(1000e-6));
  }
  const Profile& with = expert_calibration().profile;
  CHECK_THROWS_WITH(check_expert_parallel(with, 3, "p.json"),
                    "--expert-parallel 3: does not divide the 4 experts of tiny-moe (profile p.json)");
  CHECK_THROWS_WITH(check_expert_parallel(with, 4, "p.json"), Catch::Contains("--expert-parallel 4"));

  nlohmann::json bad = nlohmann::json::parse(to_profile_json(with));
  bad["expert_compute"]["forward"]["row_s"] = -1;
  CHECK_THROWS_WITH(parse_profile(bad.dump(), "p.json"),
                    "p.json: expert_compute.forward.row_s: must be a number from 0 to 1e+06");
  bad = nlohmann::json::parse(to_profile_json(with));
  bad["expert_compute"]["expert_parallel"] = 3;
  CHECK_THROWS_WITH(parse_profile(bad.dump(), "p.json"),
                    "p.json: expert_compute.expert_parallel: 3 does not divide the 4 experts");
}
