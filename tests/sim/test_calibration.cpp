// Calibration from measured traces (calibration.hpp): what it estimates from the hand-made
// traces of calibration_traces.hpp.
//
// Expected profile: F 101 / 200 us, full backward 150 / 300 us, load 10 us, send 19 us, recv
// 5 us, latency 50 us, 1 us between instructions, sends drawn until their data arrives (their
// events end at the arrival), optimizer steps independent (rank 1's ends before rank 0's starts), f_mem 1100 / 2576 B, gradient buffers 4000 / 6000 B, static 10000 /
// 20000 B, backward split unmeasured. A second trace of a split schedule (I 60/120 us, W 90/180
// us) measures the split; pooled medians then mix both traces. With the mean statistic the
// 400 us outlier enters stage 0's F (160.2 us), memory stays the median.
// otherData.transport_cpu_s of 1 and 2 ms over each rank's 10 messages: reported as 100 and
// 200 us per message.
// Stage 0's B of micro-batch 0 at 120 us, the others at 150 us: B 150 us and a gradient
// accumulation time of 30 us, which the simulator takes off micro-batch 0's B again (and a cut
// in two halves); the profile file keeps it.
// Probes of three runs at different speeds: the split is each run's shares' median, not the
// pooled samples' (which a slow run's warm-up sample would skew).
// A trace whose otherData says the host took 10% of a rank's step (steal) is left out, with a
// note naming it; --max-stolen 1 keeps it; when every trace is disturbed: one error naming the first.
// Receives of arrived data that meet their rank's own message to the sender undelivered get
// their own cost (recv_contended_s): 5 us against the others' 2 us in an edited GPipe trace.
// From full backwards alone (the GPipe trace: B 150 / 300 us) the split is estimated: half each
// (equal FLOPs), no overhead for pprun's traces, marked as such and round-tripped by the file;
// a prediction of ZB-H1 from it carries the estimate's corners as its interval.
// Step speeds: three steps of the same trace at 100%, 110% and 90% speed give a spread of 10%.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
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
using calibration_test::has_outlier;
using calibration_test::kLatencyUs;
using calibration_test::kLateRecvUs;
using traces::Lane;

TEST_CASE("calibration takes a message's send and receive costs from every stage's transfers") {
  // Stage 1 finds 4 of its activations there and takes each in 5 us; stage 0 finds one of its
  // gradients there (the others it waits for) and takes it in 15 us. The receive's own cost is
  // the transport's: one estimate from all 5 (median 5 us), not stage 0's single sample.
  const Calibration c = calibrate({{hand_made_trace(false, -1, 15), "gpipe.json"}});
  REQUIRE(c.profile.stages.size() == 2);
  CHECK(c.profile.stages[0].recv_s == Approx(5e-6));
  CHECK(c.profile.stages[1].recv_s == Approx(5e-6));
  CHECK(c.profile.stages[0].send_s == Approx(19e-6));
  const auto pooled = std::find_if(c.quantities.begin(), c.quantities.end(), [](const CalibratedQuantity& q) {
    return q.name == "receive of arrived data (all stages)";
  });
  REQUIRE(pooled != c.quantities.end());
  CHECK(pooled->samples == 5);
  CHECK(pooled->mean == Approx((4 * 5 + 15) / 5.0 * 1e-6));
}

TEST_CASE("receives that meet their rank's own message to the sender undelivered have their own cost") {
  // In the GPipe trace, stage 1's receives of arrived data (micro-batches 1-4) all begin while
  // its gradient of the micro-batch before is still on its way back, and stage 0's first one
  // while its forward of micro-batch 4 is: both ways at once, 5 us each. Stage 0's others wait
  // for their data; from micro-batch 3 on they are moved 100 us later (with what follows them),
  // after every activation was taken, and made 2 us: receives of arrived data, one way only.
  traces::Trace trace = hand_made_trace(false);
  double moved_from_us = 0;
  for (const auto& e : trace.events)
    if (e.name == "RECV_B" && e.micro_batch == 3) moved_from_us = e.ts_us;
  for (auto& e : trace.events) {
    if (e.rank != 0 || e.ts_us < moved_from_us) continue;
    e.ts_us += 100;
    if (e.name == "RECV_B") e.dur_us = 2;
  }
  const Calibration c = calibrate({{trace, "gpipe.json"}});
  CHECK(c.profile.stages[0].recv_s == Approx(2e-6));
  CHECK(c.profile.stages[1].recv_s == Approx(2e-6));
  CHECK(c.profile.stages[0].recv_contended_s == Approx(5e-6));
  CHECK(c.profile.stages[1].recv_contended_s == Approx(5e-6));
  const auto both_ways = std::find_if(c.quantities.begin(), c.quantities.end(), [](const CalibratedQuantity& q) {
    return q.name == "receive of arrived data, own message to the sender undelivered";
  });
  REQUIRE(both_ways != c.quantities.end());
  CHECK(both_ways->samples == 5);
  // The profile file keeps the cost; one written before it existed charges recv_s for both.
  const Profile back = parse_profile(to_profile_json(c.profile), "p.json");
  CHECK(back.stages[0].recv_contended_s == Approx(5e-6));
  nlohmann::json old = nlohmann::json::parse(to_profile_json(c.profile));
  for (auto& stage : old["stages"]) stage.erase("recv_contended_s");
  CHECK(parse_profile(old.dump(), "old.json").stages[0].recv_contended_s == Approx(2e-6));
  // Without both kinds, one cost for both, and a note says so.
  const Calibration plain = calibrate({{hand_made_trace(false), "gpipe.json"}});
  CHECK(plain.profile.stages[0].recv_contended_s == plain.profile.stages[0].recv_s);
}

TEST_CASE("calibration takes medians of a hand-made trace and reports outliers") {
  CalibrationOptions unsplit;
  unsplit.split_estimate = false;
  const Calibration c = calibrate({{hand_made_trace(false), "gpipe.json"}}, unsplit);
  const Profile& p = c.profile;
  REQUIRE(p.stages.size() == 2);
  const StageProfile& s0 = p.stages[0];
  const StageProfile& s1 = p.stages[1];
  CHECK(s0.f_s == Approx(101e-6));
  CHECK(s1.f_s == Approx(200e-6));
  CHECK(s0.b_s == Approx(150e-6));  // the whole backward: the split is unknown
  CHECK(s0.w_s == 0);
  CHECK(s1.b_s == Approx(300e-6));
  CHECK_FALSE(p.backward_split_measured);
  CHECK(s0.load_s == Approx(10e-6));
  CHECK(s0.optimizer_s == Approx(30e-6));
  CHECK(s0.send_s == Approx(19e-6));
  CHECK(s1.send_s == Approx(19e-6));
  CHECK(p.instruction_overhead_s == Approx(1e-6));
  CHECK_FALSE(p.send_ends_at_receive);
  CHECK_FALSE(p.optimizer_sync);
  CHECK(s1.recv_s == Approx(kLateRecvUs * 1e-6));
  CHECK(p.transfer.latency_s == Approx(kLatencyUs * 1e-6));
  CHECK(s0.activation_bytes == 512);
  CHECK(has_outlier(c, "stage 0 F", 400e-6));
  CHECK_FALSE(has_outlier(c, "stage 0 F", 98e-6));
  CHECK_FALSE(c.notes.empty());
}

TEST_CASE("calibration with the mean statistic takes outliers into durations, not into memory") {
  CalibrationOptions options;
  options.duration_statistic = parse_duration_statistic("mean");
  const Calibration c = calibrate({{hand_made_trace(false), "gpipe.json"}}, options);
  const Profile& p = c.profile;
  CHECK(p.stages[0].f_s == Approx((100 + 98 + 102 + 101 + 400) / 5.0 * 1e-6));  // 160.2 us, the outlier in
  CHECK(p.stages[1].f_s == Approx(200e-6));
  CHECK(p.stages[0].f_mem_bytes == 1100);
  CHECK(has_outlier(c, "stage 0 F", 400e-6));
  REQUIRE(p.calibration);
  CHECK(p.calibration->duration_statistic == "mean");
  const std::string report = calibration_report(c);
  CHECK_THAT(report, Catch::Contains("durations: mean of the samples"));
  CHECK_THAT(report, Catch::Contains("included in the means"));
  CHECK(calibrate({{hand_made_trace(false), "gpipe.json"}}).profile.calibration.value().duration_statistic == "median");
  CHECK_THROWS_WITH(parse_duration_statistic("average"), Catch::Contains("--statistic") && Catch::Contains("average"));
}

TEST_CASE("calibration learns memory deltas, the gradient buffer and static memory") {
  const Profile p = calibrate({{hand_made_trace(false), "gpipe.json"}}).profile;
  CHECK(p.stages[0].f_mem_bytes == 1100);
  CHECK(p.stages[0].b_mem_bytes + p.stages[0].w_mem_bytes == -1100);
  CHECK(p.stages[1].f_mem_bytes == 2576);
  CHECK(p.stages[0].grad_buffer_bytes == 4000);
  CHECK(p.stages[1].grad_buffer_bytes == 6000);
  CHECK(p.stages[0].static_bytes == 10000);
  CHECK(p.stages[1].static_bytes == 20000);
}

TEST_CASE("calibration pools several traces and takes the split from I and W events") {
  const Calibration c = calibrate({{hand_made_trace(false), "gpipe.json"}, {hand_made_trace(true, 110), "zb.json"}});
  const Profile& p = c.profile;
  CHECK(p.backward_split_measured);
  CHECK(p.stages[0].b_s == Approx(60e-6));
  CHECK(p.stages[0].w_s == Approx(90e-6));
  CHECK(p.stages[0].full_backward_s == Approx(150e-6));
  CHECK(p.stages[1].b_s == Approx(120e-6));
  CHECK(p.stages[1].w_s == Approx(180e-6));
  // F of stage 0: 98, 100, 101, 102, 400 and five times 110: median 110.
  CHECK(p.stages[0].f_s == Approx(110e-6));
  // The input gradient holds the received gradient (+512 B) until W frees everything.
  CHECK(p.stages[0].b_mem_bytes == 512);
  CHECK(p.stages[0].w_mem_bytes == -1612);
  CHECK(p.calibration.value().traces.value().size() == 2);
}

TEST_CASE("calibration takes the split from the executor's probe") {
  traces::Trace t = hand_made_trace(false);
  t.meta.run.backward_split_probe = {
      {0, {{100, 100, 100}, {40, 40, 40}, {70, 70, 70}}, {{{80, 80}, {30, 30}, {60, 60}}}},
      {1, {{200}, {100}, {100}}, std::nullopt}};
  const Profile p = calibrate({{t, "probed.json"}}).profile;
  CHECK(p.backward_split_measured);
  CHECK(p.stages[0].b_s == Approx(150e-6 * 0.4));
  CHECK(p.stages[0].w_s == Approx(150e-6 * 0.7));
  CHECK(p.stages[0].full_backward_s == Approx(150e-6));
  CHECK(p.stages[1].b_s == Approx(150e-6));
  // The first stage's later layers, probed as an inner stage runs them: shares 30/80, 60/80.
  REQUIRE(p.inner_backward_split);
  CHECK(p.inner_backward_split->input == Approx(0.375));
  CHECK(p.inner_backward_split->weight == Approx(0.75));
  // On disk under its own name (kInnerBackwardSplitField).
  CHECK(nlohmann::json::parse(to_profile_json(p))[std::string(kInnerBackwardSplitField)]["input"].get<double>() ==
        Approx(0.375));

  // A time that is not a number does not read (test_run_description.cpp); a negative one is refused here.
  (*t.meta.run.backward_split_probe)[0].inner = traces::BackwardSplitTimes{{80}, {-30}, {60}};
  CHECK_THROWS_WITH(calibrate({{t, "probed.json"}}),
                    Catch::Contains("probed.json") && Catch::Contains("backward_split_probe[0].inner.input_us"));
}

TEST_CASE("the probe's split is taken run by run: runs differ in speed") {
  // Three runs at 1x, 2x and 3x the time, each probe's first full backward slow (warm-up):
  // within every run the halves are 50% and 90% of a full backward. Pooled over the runs, the
  // medians would say 10 of 30 us (33%): the slow first samples of the slow runs lift the full
  // backward's median alone.
  std::vector<MeasuredTrace> runs;
  for (double speed : {1.0, 2.0, 3.0}) {
    traces::Trace t = hand_made_trace(false);
    t.meta.run.backward_split_probe = {
        {0,
         {{100 * speed, 10 * speed, 10 * speed}, {5 * speed, 5 * speed, 5 * speed}, {9 * speed, 9 * speed, 9 * speed}},
         std::nullopt},
        {1, {{200}, {100}, {100}}, std::nullopt}};
    runs.push_back({t, fmt::format("run{}.json", speed)});
  }
  const Profile p = calibrate(runs).profile;
  CHECK(p.stages[0].b_s == Approx(150e-6 * 0.5));
  CHECK(p.stages[0].w_s == Approx(150e-6 * 0.9));
}

// One measured stage (one rank, one GPU): it computes no input gradient (I 0, W 0.009 s of a
// 0.010 s full backward), and the executor's probe of its later layers says an inner stage
// splits 0.5 / 0.8. Cut into 2 stages, stage 1 (behind stage 0 now) splits its 0.005 s full
// backward so: I 0.0025 s, W 0.004 s; stage 0 keeps I 0, W 0.0045 s.
TEST_CASE("a stage cut from a single measured stage splits as the probe of its later layers says") {
  Profile p;
  p.backward_split_measured = true;
  StageProfile sp;
  sp.f_s = 0.002;
  sp.full_backward_s = 0.010;
  sp.b_s = 0.0;
  sp.w_s = 0.009;
  p.stages.push_back(sp);
  const Profile without = profile_for_stages(p, 2, "p.json");
  CHECK(without.stages[1].b_s == Approx(0.0).margin(1e-12));  // nothing says otherwise
  p.inner_backward_split = InnerBackwardSplit{0.5, 0.8};
  const Profile two = profile_for_stages(p, 2, "p.json");
  REQUIRE(two.stages.size() == 2);
  CHECK(two.stages[0].b_s == Approx(0.0).margin(1e-12));
  CHECK(two.stages[0].w_s == Approx(0.0045));
  CHECK(two.stages[1].b_s == Approx(0.0025));
  CHECK(two.stages[1].w_s == Approx(0.004));
}

TEST_CASE("calibration leaves out traces the host disturbed (steal)") {
  // slow.json: stage 0's forwards took 500 us while the host ran something else on rank 0's
  // core for 10% of the step (pprun's otherData.stolen_time_s).
  traces::Trace slow = hand_made_trace(false, 500);
  slow.meta.run.stolen_time_s = {0.1 * traces::event_span_us(slow) * 1e-6, 0.0};
  traces::Trace quiet = hand_made_trace(false);
  quiet.meta.run.stolen_time_s = {0.0, 0.0};
  const Calibration c =
      calibrate({{slow, "slow.json"}, {quiet, "quiet.json"}, {hand_made_trace(false), "unsaid.json"}});
  CHECK(c.profile.stages[0].f_s == Approx(101e-6));  // the two undisturbed traces' median
  CHECK(c.profile.calibration.value().traces == std::vector<std::string>{"quiet.json", "unsaid.json"});
  CHECK(c.profile.calibration.value().traces_left_out == 1);
  CHECK(std::any_of(c.notes.begin(), c.notes.end(), [](const std::string& n) {
    return n == "slow.json: left out: the host took 10.0% of rank 0's step from its cores (steal)";
  }));

  CalibrationOptions keep_all;
  keep_all.max_stolen_fraction = 1;
  CHECK(calibrate({{slow, "slow.json"}, {quiet, "quiet.json"}}, keep_all).profile.stages[0].f_s > 101e-6);
  CHECK_THROWS_MATCHES(
      calibrate({{slow, "slow.json"}}), UsageError,
      Catch::Message("every measured trace lost more than 2.0% of a rank's step to the host (slow.json: the "
                     "host took 10.0% of rank 0's step from its cores (steal)): measure again when the "
                     "machine is quiet, or raise --max-stolen"));
}

TEST_CASE("calibration reports the transport threads' CPU time per message") {
  // Each rank of the hand-made trace moves 10 messages (5 sends, 5 receives): 1 ms and 2 ms of
  // its transport threads' CPU make 100 and 200 us per message.
  traces::Trace t = hand_made_trace(false);
  t.meta.run.transport_cpu_s = {0.001, 0.002};
  const Calibration c = calibrate({{t, "gpipe.json"}});
  const auto q = std::find_if(c.quantities.begin(), c.quantities.end(), [](const CalibratedQuantity& x) {
    return x.name == "transport threads' CPU per message";
  });
  REQUIRE(q != c.quantities.end());
  CHECK(q->samples == 2);
  CHECK(q->min == Approx(100e-6));
  CHECK(q->max == Approx(200e-6));
  CHECK_THAT(calibration_report(c), Catch::Contains("transport threads' CPU per message"));
  const Calibration without = calibrate({{hand_made_trace(false), "gpipe.json"}});
  CHECK(std::none_of(without.quantities.begin(), without.quantities.end(),
                     [](const CalibratedQuantity& x) { return x.name == "transport threads' CPU per message"; }));
}

TEST_CASE("calibration learns what micro-batch 0's weight gradient saves (no sum to add to)") {
  // Stage 0's backward of micro-batch 0 takes 120 us, the others 150 us: B is the later ones',
  // and the 30 us saving is the stage's gradient accumulation time.
  traces::Trace t = hand_made_trace(false);
  for (auto& e : t.events)
    if (e.rank == 0 && e.name == "B" && e.micro_batch == 0) e.dur_us = 120;
  const Calibration c = calibrate({{t, "gpipe.json"}});
  CHECK(c.profile.stages[0].full_backward_s == Approx(150e-6));
  CHECK(c.profile.stages[0].grad_accumulate_s == Approx(30e-6));
  CHECK(c.profile.stages[1].grad_accumulate_s == 0);  // all its backwards take 300 us
  CHECK_THAT(calibration_report(c), Catch::Contains("stage 0 B of micro-batch 0 (no gradient sum to add to)"));
  // The simulator gives micro-batch 0 its saving back: GPipe's first-stage B0 takes 120 us.
  const auto result = simulate(make_schedule("gpipe", ScheduleParams{.num_ranks = 2, .num_micro_batches = 5}),
                               cost_model_from_profile(c.profile), topology_from_profile(c.profile));
  bool seen = false;
  for (const auto& e : result.trace.events)
    if (e.rank == 0 && e.name == "B" && e.micro_batch == 0) {
      CHECK(e.dur_us == Approx(120));
      seen = true;
    }
  CHECK(seen);
  // Cut in two, each half saves half.
  CHECK(profile_for_stages(c.profile, 4, "p.json").stages[1].grad_accumulate_s == Approx(15e-6));
}

TEST_CASE("calibration refuses traces of different stage layouts and traces without stages") {
  traces::Trace four = hand_made_trace(false);
  four.meta.num_stages = 4;
  CHECK_THROWS_AS(calibrate({{hand_made_trace(false), "a.json"}, {four, "b.json"}}), UsageError);
  CHECK_THROWS_WITH(calibrate({{traces::Trace{}, "empty.json"}}), Catch::Contains("empty.json"));
  CHECK_THROWS_AS(calibrate({}), UsageError);
}

TEST_CASE("full backwards alone: the split is estimated, said, and kept in the profile file") {
  const Calibration c = calibrate({{hand_made_trace(false), "gpipe.json"}});
  const Profile& p = c.profile;
  CHECK_FALSE(p.backward_split_measured);
  REQUIRE(p.backward_split_estimate);
  CHECK(p.backward_split_estimate->input_share == Approx(0.5));
  CHECK(p.backward_split_estimate->overhead == 0);  // pprun's traces: torch's overhead is not theirs
  CHECK(p.backward_split_estimate->stages == std::vector<int>{0, 1});
  CHECK(p.stages[0].b_s == Approx(75e-6));
  CHECK(p.stages[0].w_s == Approx(75e-6));
  CHECK(p.stages[0].full_backward_s == Approx(150e-6));
  CHECK(p.stages[1].w_s == Approx(150e-6));
  CHECK(std::any_of(c.notes.begin(), c.notes.end(), [](const std::string& n) {
    return n.find("backward split estimated, not measured, on stage(s) 0, 1: input 50% +- 10 points") !=
           std::string::npos;
  }));
  CHECK_THAT(to_profile_json(p), Catch::Contains("\"backward_split\": \"estimated\""));
  CHECK(parse_profile(to_profile_json(p), "p.json") == p);

  CalibrationOptions stated;
  stated.split_input_share = 0.6;
  stated.split_overhead = 0.2;
  const Profile q = calibrate({{hand_made_trace(false), "gpipe.json"}}, stated).profile;
  CHECK(q.stages[0].b_s == Approx(150e-6 * 0.6 * 1.2));
  CHECK(q.stages[0].w_s == Approx(150e-6 * 0.4 * 1.2));
  CHECK_THAT(q.backward_split_estimate->basis, Catch::Contains("given (--split-input-share)"));

  // The interval of a split schedule spans the estimate's corners; a full-backward one has none.
  const Schedule zb = make_schedule("zb-h1", ScheduleParams{.num_ranks = 2, .num_micro_batches = 5});
  const auto simulate_profile = [&](const Profile& moved) {
    return simulate(zb, cost_model_from_profile(moved), topology_from_profile(moved)).summary.iteration_time_s;
  };
  const double point = simulate_profile(p);
  const auto interval = prediction_interval(p, true, point, simulate_profile);
  REQUIRE(interval);
  CHECK(interval->low_s <= point);  // no overhead is the least the estimate allows, and the point's
  CHECK(interval->high_s > point);
  CHECK(interval->high_s == Approx(simulate_profile(with_backward_split(p, 0.6, 0.13))).epsilon(0.05));
  CHECK_THAT(interval->estimated.at(0), Catch::Contains("backward split"));
  CHECK_FALSE(prediction_interval(p, false, point, simulate_profile));  // one step: no spread known
  const traces::Trace one = hand_made_trace(false);
  CHECK_FALSE(calibrate({{one, "gpipe.json"}}).profile.step_speed_spread);
}

TEST_CASE("the spread of step speeds: each step's computation over the same operations at the means") {
  // Three steps of the GPipe trace, the second 10% slower, the third 10% faster: speeds 1.0,
  // 1.1 and 0.9 of the mean, a relative standard deviation of 10%.
  std::vector<MeasuredTrace> steps;
  for (const double speed : {1.0, 1.1, 0.9}) {
    traces::Trace t = hand_made_trace(false);
    for (auto& e : t.events)
      if (e.name == "F" || e.name == "B") e.dur_us *= speed;
    steps.push_back({t, fmt::format("gpipe.step{}.json", steps.size())});
  }
  CalibrationOptions mean;
  mean.duration_statistic = CalibrationOptions::Statistic::Mean;
  const Profile p = calibrate(steps, mean).profile;
  REQUIRE(p.step_speed_spread);
  CHECK(p.step_speed_spread->steps == 3);
  CHECK(p.step_speed_spread->relative_sd == Approx(0.1).epsilon(0.01));
  CHECK(parse_profile(to_profile_json(p), "p.json") == p);
  const auto interval = prediction_interval(p, false, 1.0, [](const Profile&) { return 1.0; });
  REQUIRE(interval);
  CHECK(interval_deviations(3) == Approx(4.303 * std::sqrt(2.0)).epsilon(0.001));  // t(97.5%), 2 degrees of freedom
  CHECK(interval_deviations(8) == Approx(2.365 * std::sqrt(2.0)).epsilon(0.001));  // 7 degrees of freedom
  CHECK(interval_deviations(1000) == Approx(1.96 * std::sqrt(2.0)).epsilon(0.01));
  // The three steps are one run's (gpipe.json's .stepN siblings): its run-to-run spread is assumed.
  REQUIRE(p.run_speed_spread);
  CHECK(p.run_speed_spread->runs == 1);
  CHECK(p.run_speed_spread->relative_sd == kAssumedRunSpread);
  // Symmetric in the logarithm: as far below the prediction by a factor as above it; the steps'
  // half-width and the two runs' add in quadrature.
  const double half = std::hypot(interval_deviations(3) * 0.1, 1.959964 * std::sqrt(2.0) * kAssumedRunSpread);
  CHECK(interval->low_s == Approx(1 - half).epsilon(0.01));
  CHECK(interval->high_s == Approx(1 / (1 - half)).epsilon(0.01));
  CHECK(interval->low_s * interval->high_s == Approx(1.0));
  CHECK(interval->estimated.empty());
}

TEST_CASE("the run-to-run spread: measured from two runs' traces, assumed from one, or as --run-spread says") {
  // Two runs of three steps each, the second run 20% slower as a whole: speeds 0.909 and 1.091 of
  // the mean, a relative standard deviation of 12.9% between the runs.
  std::vector<MeasuredTrace> steps;
  for (const char* run : {"a", "b"})
    for (int step = 0; step < 3; ++step) {
      traces::Trace t = hand_made_trace(false);
      const double speed = (std::string(run) == "b" ? 1.2 : 1.0) * (1 + 0.01 * step);
      for (auto& e : t.events)
        if (e.name == "F" || e.name == "B") e.dur_us *= speed;
      steps.push_back({t, fmt::format("{}.step{}.json", run, step + 1)});
    }
  CalibrationOptions mean;
  mean.duration_statistic = CalibrationOptions::Statistic::Mean;
  const Calibration two_runs = calibrate(steps, mean);
  REQUIRE(two_runs.profile.run_speed_spread);
  CHECK(two_runs.profile.run_speed_spread->runs == 2);
  const double a = 1.01, b = 1.2 * 1.01, middle = (a + b) / 2;
  CHECK(two_runs.profile.run_speed_spread->relative_sd ==
        Approx(std::abs(b - a) / std::sqrt(2.0) / middle).epsilon(0.01));
  CHECK(parse_profile(to_profile_json(two_runs.profile), "p.json") == two_runs.profile);

  // One run's steps: the spread between runs cannot be seen, so it is assumed and said.
  const std::vector<MeasuredTrace> first(steps.begin(), steps.begin() + 3);
  const Calibration one_run = calibrate(first, mean);
  REQUIRE(one_run.profile.run_speed_spread);
  CHECK(one_run.profile.run_speed_spread->runs == 1);
  CHECK(one_run.profile.run_speed_spread->relative_sd == kAssumedRunSpread);
  CHECK(std::any_of(one_run.notes.begin(), one_run.notes.end(),
                    [](const std::string& n) { return n.find("--run-spread") != std::string::npos; }));

  // Told: the figure given wins over the measurement.
  CalibrationOptions told = mean;
  told.run_spread = 0.02;
  const Calibration given = calibrate(steps, told);
  REQUIRE(given.profile.run_speed_spread);
  CHECK(given.profile.run_speed_spread->relative_sd == 0.02);

  // The interval widens with the runs' spread: the two-run profile's is wider than with none.
  Profile without = two_runs.profile;
  without.run_speed_spread.reset();
  const auto flat = [](const Profile&) { return 1.0; };
  CHECK(prediction_interval(two_runs.profile, false, 1.0, flat)->high_s >
        prediction_interval(without, false, 1.0, flat)->high_s);
}

TEST_CASE("median helpers") {
  CHECK(median_of({3, 1, 2}) == 2);
  CHECK(median_of({4, 1, 3, 2}) == 2.5);
  CHECK(median_of({}) == 0);
  CHECK(median_absolute_deviation({1, 2, 3, 4, 100}) == 1);
}
