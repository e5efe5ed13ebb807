// Calibration's profile (calibration.hpp, profile.hpp): its file, its stages fitted to other
// stage counts, and the predictions it makes.
//
// End to end: traces simulated from known costs (1F1B and ZB-H1, m = 4) calibrate a profile
// whose predictions for ZB-H1 and 1F1B at m = 8 equal the simulations from the known costs.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/sim/calibration.hpp"
#include "pipescope/sim/prediction_interval.hpp"
#include "pipescope/sim/simulator.hpp"
#include "calibration_traces.hpp"

using namespace pipescope;
using namespace pipescope::sim;
using calibration_test::hand_made_trace;
using traces::Lane;

TEST_CASE("a calibrated profile round-trips through its file, new fields included") {
  const Profile p = calibrate({{hand_made_trace(false), "gpipe.json"}}).profile;
  const auto dir = std::filesystem::temp_directory_path() / "pipescope_test_calibration";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "p.json").string();
  write_profile(p, path);
  const Profile back = read_profile(path);
  CHECK(back == p);
  CHECK(back.stages[0].grad_buffer_bytes == 4000);
  Profile saving = p;
  saving.stages[1].grad_accumulate_s = 25e-6;
  write_profile(saving, path);
  CHECK(read_profile(path).stages[1].grad_accumulate_s == 25e-6);
  CHECK_FALSE(back.backward_split_measured);
  std::filesystem::remove_all(dir);
  // Profiles written before the optional fields existed still read, with zeros.
  const Profile old = parse_profile(
      R"({"format": "pipescope.profile/1", "transfer": {"latency_s": 0, "bandwidth_bytes_per_s": 1e9},
          "stages": [{"f_s": 1, "b_s": 1, "w_s": 1, "f_mem_bytes": 2, "b_mem_bytes": -1, "w_mem_bytes": -1,
                      "static_bytes": 0, "activation_bytes": 0, "optimizer_s": 0, "reduce_grads_s": 0}]})",
      "old.json");
  CHECK(old.backward_split_measured);
  CHECK(old.stages[0].send_s == 0);
  CHECK(old.stages[0].grad_buffer_bytes == 0);
  CHECK(old.stages[0].grad_accumulate_s == 0);
}

TEST_CASE("a profile of 2 stages fits schedules of 4 stages and of 1 stage") {
  Profile p;
  for (int s = 0; s < 2; ++s) {
    StageProfile sp;
    sp.stage = s;
    sp.f_s = 0.002 * (s + 1);
    sp.b_s = 0.004;
    sp.w_s = 0.002;
    sp.load_s = 0.001;
    sp.send_s = 0.0005;
    sp.f_mem_bytes = 1000;
    sp.w_mem_bytes = -1000;
    sp.static_bytes = 10001;
    sp.activation_bytes = 64;
    p.stages.push_back(sp);
  }
  const Profile four = profile_for_stages(p, 4, "p.json");
  REQUIRE(four.stages.size() == 4);
  CHECK(four.stages[0].f_s == Approx(0.001));
  CHECK(four.stages[2].f_s == Approx(0.002));
  CHECK(four.stages[0].load_s == Approx(0.001));
  CHECK(four.stages[1].load_s == 0);
  CHECK(four.stages[3].load_s == Approx(0.001));
  CHECK(four.stages[1].send_s == Approx(0.0005));
  CHECK(four.stages[0].static_bytes + four.stages[1].static_bytes == 10001);
  CHECK(four.stages[2].f_mem_bytes == 500);
  CHECK(four.stages[2].activation_bytes == 64);
  const Profile one = profile_for_stages(p, 1, "p.json");
  REQUIRE(one.stages.size() == 1);
  CHECK(one.stages[0].f_s == Approx(0.006));
  CHECK(one.stages[0].static_bytes == 20002);
  CHECK_THROWS_WITH(profile_for_stages(p, 3, "p.json"), Catch::Contains("p.json"));
}

// Layer by layer: 4 layers of 100, 300, 200, 200 parameters measured as stages [0, 2) and
// [2, 4) (400 parameters each). Split by parameters into 4 stages, every layer is a stage:
// layer 1 takes 3/4 of stage 0's F (0.002 s -> 0.0015 s) and of its static memory, and half of
// its activation memory (equal share per layer).
TEST_CASE("a profile with its model's layers fits other stage counts layer by layer") {
  Profile p;
  for (int s = 0; s < 2; ++s) {
    StageProfile sp;
    sp.stage = s;
    sp.f_s = 0.002 * (s + 1);
    sp.f_mem_bytes = 1000;
    sp.w_mem_bytes = -1000;
    sp.static_bytes = 4000;
    sp.load_s = 0.001;
    p.stages.push_back(sp);
  }
  p.layers = std::vector<ProfileLayer>{
      {"l0", "Linear", 100}, {"l1", "Linear", 300}, {"l2", "Linear", 200}, {"l3", "Linear", 200}};
  p.stage_bounds = std::vector<int>{0, 2, 4};
  p.partition_method = "parameters";
  const Profile four = profile_for_stages(p, 4, "p.json");
  REQUIRE(four.stages.size() == 4);
  CHECK(four.stages[0].f_s == Approx(0.0005));
  CHECK(four.stages[1].f_s == Approx(0.0015));
  CHECK(four.stages[2].f_s == Approx(0.002));
  CHECK(four.stages[1].static_bytes == 3000);
  CHECK(four.stages[1].f_mem_bytes == 500);
  CHECK(four.stages[1].w_mem_bytes == -500);
  CHECK(four.stages[1].load_s == 0);
  CHECK(four.stages[3].load_s == Approx(0.001));
}

// The first stage computes no input gradient: measured full backward 0.010 s, I 0, W 0.009 s;
// stage 1: full 0.010 s, I 0.005 s, W 0.008 s (shares 0.5 and 0.8). Cut into 4 stages, stage 1
// (the second half of measured stage 0, now behind stage 0) splits its 0.005 s full backward
// with stage 1's shares: I 0.0025 s, W 0.004 s; stage 0 keeps I 0, W 0.0045 s. The same with
// the model's layers (2 layers of equal size per measured stage).
TEST_CASE("a stage cut from the measured first stage computes input gradients behind another stage") {
  Profile p;
  p.backward_split_measured = true;
  for (int s = 0; s < 2; ++s) {
    StageProfile sp;
    sp.stage = s;
    sp.f_s = 0.002;
    sp.full_backward_s = 0.010;
    sp.b_s = s == 0 ? 0.0 : 0.005;
    sp.w_s = s == 0 ? 0.009 : 0.008;
    p.stages.push_back(sp);
  }
  auto check = [](const Profile& four) {
    REQUIRE(four.stages.size() == 4);
    CHECK(four.stages[0].b_s == Approx(0.0).margin(1e-12));
    CHECK(four.stages[0].w_s == Approx(0.0045));
    CHECK(four.stages[1].b_s == Approx(0.0025));
    CHECK(four.stages[1].w_s == Approx(0.004));
    CHECK(four.stages[1].full_backward_s == Approx(0.005));
    CHECK(four.stages[3].b_s == Approx(0.0025));
    CHECK(four.stages[3].w_s == Approx(0.004));
  };
  check(profile_for_stages(p, 4, "p.json"));
  p.layers = std::vector<ProfileLayer>{
      {"l0", "Linear", 100}, {"l1", "Linear", 100}, {"l2", "Linear", 100}, {"l3", "Linear", 100}};
  p.stage_bounds = std::vector<int>{0, 2, 4};
  p.partition_method = "parameters";
  check(profile_for_stages(p, 4, "p.json"));
}

TEST_CASE("calibrate from simulated 1F1B and ZB-H1 traces, then predict other micro-batch counts") {
  CostModel known;
  StageCost s0, s1;
  s0.f_s = 100e-6, s0.b_s = 150e-6, s0.w_s = 100e-6, s0.optimizer_s = 20e-6;
  s1.f_s = 200e-6, s1.b_s = 250e-6, s1.w_s = 150e-6, s1.optimizer_s = 20e-6;
  known.stages = {s0, s1};
  auto schedule = [](const char* name, int m) {
    ScheduleParams params;
    params.num_ranks = 2;
    params.num_micro_batches = m;
    return make_schedule(name, params);
  };
  auto trace_of = [&](const char* name) {
    traces::Trace t = simulate(schedule(name, 4), known).trace;
    t.meta.source = "measured";
    return t;
  };
  const traces::Trace one_f_one_b = trace_of("1f1b");
  const Calibration c = calibrate({{one_f_one_b, "1f1b.json"}, {trace_of("zb-h1"), "zb-h1.json"}});
  INFO(calibration_report(c));
  CHECK(c.profile.stages[0].f_s == Approx(100e-6));
  CHECK(c.profile.stages[1].w_s == Approx(150e-6));
  const CostModel measured = cost_model_from_profile(c.profile);
  const Topology topology = topology_from_profile(c.profile);
  for (const char* name : {"zb-h1", "1f1b", "gpipe"}) {
    const double predicted = simulate(schedule(name, 8), measured, topology).summary.iteration_time_s;
    const double direct = simulate(schedule(name, 8), known).summary.iteration_time_s;
    INFO(name);
    CHECK(predicted == Approx(direct).epsilon(1e-6));
  }
  // From the 1F1B trace alone the split is unknown: left unmeasured, ZB-H1 is refused, 1F1B is
  // not; estimated (the default), both are predicted.
  CalibrationOptions unsplit;
  unsplit.split_estimate = false;
  const Profile full_only = calibrate({{one_f_one_b, "1f1b.json"}}, unsplit).profile;
  CHECK_THROWS_WITH(check_profile_fits(full_only, compile(schedule("zb-h1", 8)), "p.json"), Catch::Contains("split"));
  CHECK_NOTHROW(check_profile_fits(full_only, compile(schedule("1f1b", 8)), "p.json"));
  const Profile estimated = calibrate({{one_f_one_b, "1f1b.json"}}).profile;
  CHECK_NOTHROW(check_profile_fits(estimated, compile(schedule("zb-h1", 8)), "p.json"));
}

// The runtime effects round-trip: traces simulated (1F1B, m = 4, 2 ranks) with 20 us between
// instructions, optimizer steps that wait for every rank (stage 0's optimizer 30 us, stage 1's
// 90 us), a tied-gradient reduction before it that waits for both ranks (10 us and 400 us of
// their own: rank 0 reaches the optimizer 390 us before rank 1, which shows its wait) and sends drawn until their receive completes calibrate a profile
// with those same four effects and the collectives' own times (not the waits), and its
// predictions of 1F1B and GPipe at m = 8 equal the simulations from the known costs.
TEST_CASE("calibration learns the time between instructions, the optimizer sync and rendezvous sends") {
  // Also the step's time after its last instruction (250 us; the trace records the step's
  // wall time as pprun's do).
  CostModel known;
  StageCost s0, s1;
  s0.f_s = 100e-6, s0.b_s = 150e-6, s0.w_s = 100e-6, s0.optimizer_s = 30e-6;
  s1.f_s = 200e-6, s1.b_s = 250e-6, s1.w_s = 150e-6, s1.optimizer_s = 90e-6;
  s0.reduce_tied_s = 10e-6, s1.reduce_tied_s = 400e-6;
  known.stages = {s0, s1};
  StageRuntimeEffects posting;
  posting.send_s = 5e-6;
  known.runtime.stages = {posting, posting};
  known.c_s = 40e-6;
  known.runtime.reduce_tied_sync = true;
  known.runtime.instruction_overhead_s = 20e-6;
  known.runtime.optimizer_sync = true;
  known.runtime.send_ends_at_receive = true;
  auto schedule = [](const char* name, int m) {
    ScheduleParams params;
    params.num_ranks = 2;
    params.num_micro_batches = m;
    return make_schedule(name, params);
  };
  known.runtime.step_overhead_s = 250e-6;
  traces::Trace measured = simulate(schedule("1f1b", 4), known).trace;
  measured.meta.source = "measured";
  const Calibration c = calibrate({{measured, "1f1b.json"}});
  INFO(calibration_report(c));
  const Profile& p = c.profile;
  CHECK(p.instruction_overhead_s == Approx(20e-6));
  CHECK(p.step_overhead_s == Approx(250e-6));
  CHECK(p.optimizer_sync);
  CHECK(p.reduce_tied_sync);
  CHECK(p.send_ends_at_receive);
  CHECK(p.stages[0].reduce_tied_s == Approx(10e-6));
  CHECK(p.stages[1].reduce_tied_s == Approx(400e-6));
  CHECK(p.stages[0].optimizer_s == Approx(30e-6));
  CHECK(p.stages[1].optimizer_s == Approx(90e-6));
  CHECK(p.stages[0].send_s == Approx(5e-6));
  CHECK(p.transfer.latency_s == Approx(40e-6));
  const CostModel from_profile = cost_model_from_profile(p);
  const Topology topology = topology_from_profile(p);
  for (const char* name : {"1f1b", "gpipe"}) {
    INFO(name);
    const double predicted = simulate(schedule(name, 8), from_profile, topology).summary.iteration_time_s;
    const double direct = simulate(schedule(name, 8), known).summary.iteration_time_s;
    CHECK(predicted == Approx(direct).epsilon(1e-6));
  }
}
