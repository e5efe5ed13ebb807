// Calibration from measured traces (calibration.hpp).
//
// Hand-made traces, laid out the way pprun records them (an event per instruction, the memory
// counter sampled after each one): 2 ranks, 2 stages, 5 micro-batches, GPipe order.
//   every instruction but a send is followed by 1 us of the runtime's bookkeeping (the
//            program time between instructions: 1 us);
//   stage 0: LOAD 10 us (+100 B), F 100/98/102/101/400 us (+1000 B; median 101 us, 400 us is an
//            outlier), SEND_F posting 20 us (19 us of its own after the 1 us between instructions), RECV_B (+512 B), B 150 us (frees 1612 B; the first
//            one also allocates the 4000 B gradient buffer), OPTIMIZER 30 us (frees the buffer);
//            10000 B held at the start.
//   stage 1: LOAD 10 us (+64 B), RECV_F (+512 B), F 200 us (+2000 B), B 300 us (frees 2576 B,
//            first one +6000 B buffer), SEND_B posting 20 us, OPTIMIZER 30 us; 20000 B at start.
//   transfers: the first RECV_F waits and ends 50 us after its send starts (latency 50 us);
//            receives of data already there take 5 us.
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
// End to end: traces simulated from known costs (1F1B and ZB-H1, m = 4) calibrate a profile
// whose predictions for ZB-H1 and 1F1B at m = 8 equal the simulations from the known costs.
// From full backwards alone (the GPipe trace: B 150 / 300 us) the split is estimated: half each
// (equal FLOPs), no overhead for pprun's traces, marked as such and round-tripped by the file;
// a prediction of ZB-H1 from it carries the estimate's corners as its interval.
// Step speeds: three steps of the same trace at 100%, 110% and 90% speed give a spread of 10%.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/sim/calibration.hpp"
#include "pipescope/sim/prediction_interval.hpp"
#include "pipescope/sim/simulator.hpp"

using namespace pipescope;
using namespace pipescope::sim;
using traces::Lane;

namespace {

// Appends events to one rank of a trace the way pprun's runtime does.
struct RankWriter {
  traces::Trace& trace;
  int rank;
  double now_us = 0;
  std::int64_t memory_bytes = 0;

  void start(std::int64_t static_bytes) {
    memory_bytes = static_bytes;
    trace.memory.push_back({rank, now_us, memory_bytes});
    now_us += 1;
  }
  traces::TraceEvent& op(const char* name, Lane lane, int stage, int micro_batch, double dur_us,
                         std::int64_t delta = 0) {
    traces::TraceEvent e;
    e.rank = rank;
    e.lane = static_cast<int>(lane);
    e.name = name;
    e.kind = traces::event_kind_from_name(e.name);  // as a reader would parse it
    e.ts_us = now_us;
    e.dur_us = dur_us;
    e.stage = stage;
    e.micro_batch = micro_batch;
    trace.events.push_back(e);
    now_us += dur_us;
    if (delta != 0) {
      memory_bytes += delta;
      trace.memory.push_back({rank, now_us + 0.5, memory_bytes});
    }
    now_us += 1;  // the runtime's bookkeeping between instructions
    return trace.events.back();
  }
  // A send: the program moves on `post_us` after starting it; the transfer ends later.
  traces::TraceEvent& send(const char* name, int stage, int micro_batch, double post_us, double transfer_us) {
    traces::TraceEvent e;
    e.rank = rank;
    e.lane = static_cast<int>(Lane::Send);
    e.name = name;
    e.kind = traces::event_kind_from_name(e.name);  // as a reader would parse it
    e.ts_us = now_us;
    e.dur_us = transfer_us;
    e.stage = stage;
    e.micro_batch = micro_batch;
    e.peer_rank = 1 - rank;
    e.bytes = 512;
    trace.events.push_back(e);
    now_us += post_us;
    return trace.events.back();
  }
};

constexpr int kMicroBatches = 5;
constexpr double kLatencyUs = 50;
constexpr double kLateRecvUs = 5;

// GPipe on 2 ranks. `split`: I and W instead of B.
traces::Trace hand_made_trace(bool split, double stage0_forward_us = -1, double stage0_late_recv_us = kLateRecvUs) {
  traces::Trace t;
  t.meta.source = "measured";
  t.meta.schedule = split ? "zb-h1" : "gpipe";
  t.meta.num_ranks = 2;
  t.meta.num_stages = 2;
  t.meta.num_micro_batches = kMicroBatches;
  RankWriter r0{t, 0}, r1{t, 1};
  r0.start(10000);
  r1.start(20000);
  const double forward0[kMicroBatches] = {100, 98, 102, 101, 400};
  std::vector<double> send_f_at(kMicroBatches);
  for (int k = 0; k < kMicroBatches; ++k) {
    r0.op("LOAD", Lane::Compute, 0, k, 10, 100);
    r0.op("F", Lane::Compute, 0, k, stage0_forward_us > 0 ? stage0_forward_us : forward0[k], 1000);
    send_f_at[k] = r0.now_us;
    r0.send("SEND_F", 0, k, 20, kLatencyUs);
  }
  std::vector<double> send_b_at(kMicroBatches);
  bool first1 = true;
  for (int k = 0; k < kMicroBatches; ++k) {
    r1.op("LOAD", Lane::Compute, 1, k, 10, 64);
    const double data_at = send_f_at[k] + kLatencyUs;
    if (r1.now_us <= send_f_at[k]) {
      r1.op("RECV_F", Lane::Recv, 1, k, data_at - r1.now_us, 512);
    } else {
      REQUIRE(data_at <= r1.now_us);
      r1.op("RECV_F", Lane::Recv, 1, k, kLateRecvUs, 512);
    }
    r1.op("F", Lane::Compute, 1, k, 200, 2000);
    const std::int64_t buffer = first1 ? 6000 : 0;
    first1 = false;
    if (split) {
      r1.op("I", Lane::Compute, 1, k, 120, 0);
      r1.op("W", Lane::Compute, 1, k, 180, -2576 + buffer);
    } else {
      r1.op("B", Lane::Compute, 1, k, 300, -2576 + buffer);
    }
    send_b_at[k] = r1.now_us;
    r1.send("SEND_B", 1, k, 20, kLatencyUs);
  }
  bool first0 = true;
  for (int k = 0; k < kMicroBatches; ++k) {
    r0.now_us = std::max(r0.now_us, send_b_at[k] + kLatencyUs);
    r0.op("RECV_B", Lane::Recv, 0, k, stage0_late_recv_us, 512);
    const std::int64_t buffer = first0 ? 4000 : 0;
    first0 = false;
    if (split) {
      r0.op("I", Lane::Compute, 0, k, 60, 0);
      r0.op("W", Lane::Compute, 0, k, 90, -1612 + buffer);
    } else {
      r0.op("B", Lane::Compute, 0, k, 150, -1612 + buffer);
    }
  }
  r0.op("OPTIMIZER", Lane::Collective, 0, -1, 30, -4000);
  r1.op("OPTIMIZER", Lane::Collective, 1, -1, 30, -6000);
  return t;
}

bool has_outlier(const Calibration& c, const std::string& quantity, double value) {
  return std::any_of(c.outliers.begin(), c.outliers.end(),
                     [&](const CalibrationOutlier& o) { return o.quantity == quantity && o.value == Approx(value); });
}

}  // namespace

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
  CHECK(interval_deviations(3) == Approx(2.920 * std::sqrt(2.0)));  // t for 2 degrees of freedom
  CHECK(interval->low_s == Approx(1 - interval_deviations(3) * 0.1).epsilon(0.01));
  CHECK(interval->high_s == Approx(1 + interval_deviations(3) * 0.1).epsilon(0.01));
  CHECK(interval->estimated.empty());
}

TEST_CASE("median helpers") {
  CHECK(median_of({3, 1, 2}) == 2);
  CHECK(median_of({4, 1, 3, 2}) == 2.5);
  CHECK(median_of({}) == 0);
  CHECK(median_absolute_deviation({1, 2, 3, 4, 100}) == 1);
}

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
