// Calibration of a mixture-of-experts run (sim/src/calibration/collect_all_to_all.cpp,
// estimate_all_to_all.cpp) and the prediction from its profile (sim/src/profile_all_to_all.cpp).
// A hand-made trace laid out as pprun records tiny-moe at expert parallelism 2: 2 ranks, 2
// stages, GPipe, 4 micro-batches; each stage holds 2 MoE layers (blocks.0-1, blocks.2-3).
//   F: 300 us of its own, with each layer's ALL_TO_ALL_DISPATCH_F and _COMBINE_F inside it;
//   B: 500 us of its own, with each layer's _COMBINE_B and _DISPATCH_B inside it.
//   An exchange of micro-batch k in the stage's layer l sends 4000 + 1000 k + 500 l bytes
//   (dispatch F; combine F 100 more, dispatch B 200, combine B 300) to a group of 2 and lasts
//   50 us + bytes / 1e8 B/s. The routing histogram is {30, 10, 10, 10} tokens per expert.
// Expected: the fit gives 50 us and 1e8 B/s; F 300 us and the full backward 500 us, net of the
// exchanges; 2 MoE layers per stage; per layer and micro-batch a median of 5750 B dispatched
// (5850, 5950, 6050 B for the others); the busiest expert 2x the mean, the busiest of two
// ranks of 2 experts 40 / 30 = 1.333x; no overlapped passes.
// Then: at E = 1 the costs are the net passes with no all-to-all; at E = 2 each pass adds its
// layers' exchanges at the fitted cost, 1F1B takes longer and its trace shows them; DualPipeV's
// pairs (4 stages cut from the 2) overlap only where the profile says the runtime did.
// ppsim simulate refuses an --expert-parallel the profile cannot predict, in one line.
// A trace whose run description says `overlapped_steps` gives that to the profile (true: the
// DualPipeV pairs overlap, though no two passes of the trace ran at once; false: they do not).
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "calibration_traces.hpp"
#include "cli_test_support.hpp"
#include "pipescope/core/generators.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/sim/calibration.hpp"
#include "pipescope/sim/profile.hpp"
#include "pipescope/sim/simulator.hpp"
#include "pipescope/traces/trace_io.hpp"

using namespace pipescope;
using namespace pipescope::sim;
using calibration_test::RankWriter;
using traces::Lane;

namespace {

constexpr int kMoeMicroBatches = 4;
constexpr double kA2aLatencyUs = 50;
constexpr double kA2aBandwidth = 1e8;

double exchange_bytes(int micro_batch, int layer, int kind_offset) {
  return 4000 + 1000 * micro_batch + 500 * layer + kind_offset;
}

// One exchange inside a pass, at `at_us`; returns where it ends.
double add_exchange(traces::Trace& t, int rank, const char* name, double at_us, double bytes,
                    const std::string& layer) {
  traces::TraceEvent e;
  e.rank = rank;
  e.lane = static_cast<int>(Lane::Collective);
  e.name = name;
  e.kind = traces::event_kind_from_name(e.name);
  e.ts_us = at_us;
  e.dur_us = kA2aLatencyUs + bytes / kA2aBandwidth * 1e6;
  e.bytes = static_cast<std::int64_t>(bytes);
  t.events.push_back(e);
  t.args.push_back({t.events.size() - 1,
                    fmt::format(R"({{"layer": "{}", "peers": [{}, {}], "tokens_per_expert": [30, 10, 10, 10]}})", layer,
                                rank, rank + 2)});
  return e.end_us();
}

// A pass of `own_us` with its 2 layers' exchanges inside: its compute in three equal parts around
// each layer's two exchanges (the backward's in reverse order of layers and kinds).
void moe_pass(RankWriter& w, const char* pass, int stage, int k, double own_us, bool backward) {
  const double start_us = w.now_us;
  const char* first = backward ? "ALL_TO_ALL_COMBINE_B" : "ALL_TO_ALL_DISPATCH_F";
  const char* second = backward ? "ALL_TO_ALL_DISPATCH_B" : "ALL_TO_ALL_COMBINE_F";
  const int first_offset = backward ? 300 : 0;
  const int second_offset = backward ? 200 : 100;
  double at_us = start_us;
  std::vector<traces::TraceEvent> exchanges;
  for (int i = 0; i < 2; ++i) {
    const int l = backward ? 1 - i : i;
    const std::string layer = fmt::format("blocks.{}", 2 * stage + l);
    at_us += own_us / 6;
    at_us = add_exchange(w.trace, w.rank, first, at_us, exchange_bytes(k, l, first_offset), layer);
    at_us += own_us / 6;
    at_us = add_exchange(w.trace, w.rank, second, at_us, exchange_bytes(k, l, second_offset), layer);
    at_us += own_us / 6;
  }
  // The pass's event is pushed after its exchanges: calibration finds them by time, not order.
  w.op(pass, Lane::Compute, stage, k, at_us - start_us);
}

traces::Trace moe_calib_trace() {
  traces::Trace t;
  t.meta.source = "measured";
  t.meta.schedule = "gpipe";
  t.meta.num_ranks = 2;
  t.meta.num_stages = 2;
  t.meta.num_micro_batches = kMoeMicroBatches;
  t.meta.run.data_parallel = 2;
  t.meta.run.model = "tiny-moe";
  RankWriter r0{t, 0}, r1{t, 1};
  for (int k = 0; k < kMoeMicroBatches; ++k) {
    moe_pass(r0, "F", 0, k, 300, false);
    r0.send("SEND_F", 0, k, 20, calibration_test::kLatencyUs);
  }
  for (int k = 0; k < kMoeMicroBatches; ++k) {
    r1.now_us = std::max(r1.now_us, r0.now_us);
    r1.op("RECV_F", Lane::Recv, 1, k, 5);
    moe_pass(r1, "F", 1, k, 300, false);
  }
  for (int k = 0; k < kMoeMicroBatches; ++k) {
    moe_pass(r1, "B", 1, k, 500, true);
    r1.send("SEND_B", 1, k, 20, calibration_test::kLatencyUs);
  }
  for (int k = 0; k < kMoeMicroBatches; ++k) {
    r0.now_us = std::max(r0.now_us, r1.now_us);
    r0.op("RECV_B", Lane::Recv, 0, k, 5);
    moe_pass(r0, "B", 0, k, 500, true);
  }
  r0.op("OPTIMIZER", Lane::Collective, 0, -1, 30);
  r1.op("OPTIMIZER", Lane::Collective, 1, -1, 30);
  // Events in time order per file, as a reader gives them.
  return t;
}

Calibration moe_calibration() {
  static const Calibration c = calibrate({{moe_calib_trace(), "moe.json"}});
  return c;
}

CompiledSchedule moe_compiled(const std::string& name, int chunks) {
  ScheduleParams params;
  params.num_ranks = 2;
  params.num_micro_batches = kMoeMicroBatches;
  params.chunks = chunks;
  return compile(make_schedule(name, params));
}

double layer_exchange_s(double bytes) { return kA2aLatencyUs * 1e-6 + bytes / kA2aBandwidth; }

}  // namespace

TEST_CASE("calibration learns a MoE run's all-to-all cost, its imbalance, and passes net of the exchanges") {
  const Calibration c = moe_calibration();
  const Profile& p = c.profile;
  REQUIRE(p.all_to_all);
  const AllToAllProfile& a = *p.all_to_all;
  CHECK(a.expert_parallel == 2);
  CHECK(a.experts == 4);
  CHECK(a.layers == std::vector<std::string>{"blocks.0", "blocks.1", "blocks.2", "blocks.3"});
  const AllToAllCost* cost = a.cost_of(2);
  REQUIRE(cost);
  CHECK(cost->latency_s == Approx(kA2aLatencyUs * 1e-6).epsilon(1e-6));
  CHECK(cost->bandwidth_bytes_per_s == Approx(kA2aBandwidth).epsilon(1e-6));
  CHECK(cost->samples == 2 * kMoeMicroBatches * 2 * 4);
  CHECK(a.dispatch_f_bytes == 5750);
  CHECK(a.combine_f_bytes == 5850);
  CHECK(a.dispatch_b_bytes == 5950);
  CHECK(a.combine_b_bytes == 6050);
  CHECK(a.imbalance == Approx(2.0));
  CHECK(a.rank_load == Approx(40.0 / 30.0));
  CHECK_FALSE(a.overlapped_steps);
  REQUIRE(p.stages.size() == 2);
  for (const StageProfile& s : p.stages) {
    CHECK(s.moe_layers == 2);
    CHECK(s.f_s == Approx(300e-6));
    CHECK(s.full_backward_s == Approx(500e-6));
  }
  // What it learnt, in the report's two lines.
  const std::string report = calibration_report(c);
  CHECK(report.find("all-to-all: E=2, MoE layers per stage 2/2") != std::string::npos);
  CHECK(report.find("2 ranks: 50.0 us + bytes / 1e+08 B/s (64 events)") != std::string::npos);
  CHECK(report.find("the busiest expert 2.000x the mean, the busiest expert-parallel rank 1.333x") !=
        std::string::npos);
  // The profile keeps all of it through its file.
  CHECK(parse_profile(to_profile_json(p), "p.json") == p);
}

TEST_CASE("a dense run's profile has no all-to-all and writes its stages as before") {
  const Calibration c = calibrate({{calibration_test::hand_made_trace(false), "dense.json"}});
  CHECK_FALSE(c.profile.all_to_all);
  CHECK(to_profile_json(c.profile).find("moe_layers") == std::string::npos);
  CHECK(to_profile_json(c.profile).find("all_to_all") == std::string::npos);
}

TEST_CASE("a profile calibrated at E = 2 predicts E = 1 without all-to-all, and E = 2 with the fitted one") {
  const Profile p = moe_calibration().profile;
  const CostModel e1 = cost_model_from_profile(p, 1);
  const CostModel e2 = cost_model_from_profile(p, 2);
  const CostModel measured = cost_model_from_profile(p);
  REQUIRE(e1.stages.size() == 2);
  const double forward_exchanges_s = 2 * (layer_exchange_s(5750) + layer_exchange_s(5850));
  const double backward_exchanges_s = 2 * (layer_exchange_s(5950) + layer_exchange_s(6050));
  for (int s = 0; s < 2; ++s) {
    CHECK_FALSE(e1.stages[s].all_to_all.any());
    CHECK(e1.stages[s].f_s == Approx(300e-6));
    CHECK(e1.stages[s].backward_pass_s() == Approx(500e-6));
    CHECK(e2.stages[s].all_to_all.moe_layers == 2);
    CHECK(e2.stages[s].all_to_all.group_size == 2);
    CHECK(e2.stages[s].all_to_all.forward_s() == Approx(forward_exchanges_s));
    CHECK(e2.stages[s].f_s == Approx(300e-6 + forward_exchanges_s));
    CHECK(e2.stages[s].backward_pass_s() == Approx(500e-6 + backward_exchanges_s));
    CHECK(measured.stages[s].f_s == e2.stages[s].f_s);
  }
  CHECK_FALSE(e2.runtime.overlapped_steps);

  const CompiledSchedule one_f_one_b = moe_compiled("1f1b", 1);
  SimOptions traced;
  traced.build_trace = true;
  const Topology topology = topology_from_profile(p);
  const SimResult at_1 = simulate(one_f_one_b, e1, topology, traced);
  const SimResult at_2 = simulate(one_f_one_b, e2, topology, traced);
  CHECK(at_1.all_to_all.total_s == 0);
  CHECK(at_2.all_to_all.total_s == Approx(2 * kMoeMicroBatches * (forward_exchanges_s + backward_exchanges_s)));
  CHECK(at_2.summary.iteration_time_s > at_1.summary.iteration_time_s + 2 * forward_exchanges_s);
  auto exchanges = [](const SimResult& r) {
    return std::count_if(r.trace.events.begin(), r.trace.events.end(),
                         [](const traces::TraceEvent& e) { return traces::is_all_to_all(e.kind); });
  };
  CHECK(exchanges(at_1) == 0);
  CHECK(exchanges(at_2) == 2 * kMoeMicroBatches * 2 * 4);
}

TEST_CASE("DualPipeV's pairs from a MoE profile overlap only where the measured runtime overlapped passes") {
  Profile p = moe_calibration().profile;
  const CompiledSchedule dualpipev = moe_compiled("dualpipev", 2);
  REQUIRE(dualpipev.num_stages == 4);
  const Profile cut = profile_for_stages(p, 4, "p.json");
  for (const StageProfile& s : cut.stages) CHECK(s.moe_layers == 1);
  const SimResult serial = simulate(dualpipev, cost_model_from_profile(cut, 2), topology_from_profile(p));
  CHECK(serial.all_to_all.overlapped_pairs == 0);
  CHECK(serial.all_to_all.hidden_s == 0);
  CHECK(serial.all_to_all.total_s > 0);
  p.all_to_all->overlapped_steps = true;
  const Profile cut_overlapping = profile_for_stages(p, 4, "p.json");
  const SimResult overlapped =
      simulate(dualpipev, cost_model_from_profile(cut_overlapping, 2), topology_from_profile(p));
  CHECK(overlapped.all_to_all.overlapped_pairs > 0);
  CHECK(overlapped.all_to_all.hidden_s > 0);
  CHECK(overlapped.summary.iteration_time_s < serial.summary.iteration_time_s);
}

TEST_CASE("ppsim simulate --profile of a MoE run: --expert-parallel predicted or refused in one line", "[cli]") {
  const cli_test::fs::path dir = cli_test::case_dir("moe-profile");
  write_profile(moe_calibration().profile, (dir / "moe.json").string());
  write_profile(calibrate({{calibration_test::hand_made_trace(false), "dense.json"}}).profile,
                (dir / "dense.json").string());
  const std::string run = "simulate --schedule 1f1b --stages 2 --micro-batches 4 ";

  const cli_test::CliRun e1 = cli_test::ppsim(dir, run + "--profile moe.json --expert-parallel 1");
  INFO(e1.err);
  REQUIRE(e1.status == 0);
  CHECK(e1.out.find("(costs: profile moe.json, ep 1)") != std::string::npos);
  CHECK(e1.out.find("all-to-all") == std::string::npos);
  const cli_test::CliRun e2 = cli_test::ppsim(dir, run + "--profile moe.json");
  REQUIRE(e2.status == 0);
  CHECK(e2.out.find("(costs: profile moe.json, ep 2)") != std::string::npos);
  CHECK(e2.out.find("all-to-all") != std::string::npos);

  const std::pair<std::string, std::string> refused[] = {
      {"--profile moe.json --expert-parallel 3", "--expert-parallel 3: does not divide the 4 experts of tiny-moe"},
      {"--profile moe.json --expert-parallel 4",
       "--expert-parallel 4: does not divide the 2 data-parallel replicas of the profile moe.json"},
      {"--profile moe.json --expert-parallel 0", "--expert-parallel 0: must be at least 1"},
      {"--profile dense.json --expert-parallel 2",
       "--expert-parallel 2: the profile dense.json is of a dense model (no all-to-all measured)"},
  };
  for (const auto& [args, message] : refused) {
    const cli_test::CliRun r = cli_test::ppsim(dir, run + args);
    INFO(args << ": " << r.err);
    CHECK(r.status != 0);
    CHECK(r.one_error_line());
    CHECK(r.err.find(message) != std::string::npos);
  }
  // The other options of a model stay refused with a profile.
  const cli_test::CliRun imbalance = cli_test::ppsim(dir, run + "--profile moe.json --moe-imbalance 2");
  CHECK(imbalance.one_error_line());
  CHECK(imbalance.err.find("--moe-imbalance needs --model") != std::string::npos);
}

// Two data-parallel replicas of one stage meet in one dispatch per forward: rank 0 gets there
// first and its event lasts 300 us, rank 1's (the last to arrive, waiting for no one) 100 us.
// The exchange costs 100 us for both; rank 0's 200 us of waiting is a cost of meeting, 100 us
// per exchange on average: both forwards are 400 us of compute net of their events, and at
// E = 2 the dispatch is predicted at 100 + 100 us, so that the forward's mean, 600 us of the
// measured 700 and 500, comes back; at E = 1, where the replicas do not meet, 400 us.
namespace {

traces::Trace replicas_trace() {
  traces::Trace t;
  t.meta.source = "measured";
  t.meta.schedule = "1f1b";
  t.meta.num_ranks = 2;
  t.meta.num_stages = 1;
  t.meta.num_micro_batches = 1;
  for (int rank = 0; rank < 2; ++rank) {
    RankWriter w{t, rank};
    const double exchange_us = rank == 0 ? 300 : 100;
    traces::TraceEvent dispatch;
    dispatch.rank = rank;
    dispatch.lane = static_cast<int>(Lane::Collective);
    dispatch.name = "ALL_TO_ALL_DISPATCH_F";
    dispatch.kind = traces::event_kind_from_name(dispatch.name);
    dispatch.ts_us = 200;
    dispatch.dur_us = exchange_us;
    dispatch.bytes = 4096;
    t.events.push_back(dispatch);
    t.args.push_back({t.events.size() - 1, R"({"layer": "blocks.0", "peers": [0, 1]})"});
    w.now_us = 0;
    w.op("F", Lane::Compute, 0, 0, 400 + exchange_us);
    w.op("B", Lane::Compute, 0, 0, 500);
  }
  return t;
}

}  // namespace

TEST_CASE("an exchange costs what its group's last member took, and the others' wait for it is the exchange's too") {
  const Calibration c = calibrate({{replicas_trace(), "replicas.json"}});
  REQUIRE(c.profile.all_to_all);
  const AllToAllCost* cost = c.profile.all_to_all->cost_of(2);
  REQUIRE(cost);
  CHECK(cost->latency_s == Approx(100e-6));
  CHECK(cost->bandwidth_bytes_per_s == 0);  // one size of exchange: no byte term to fit
  CHECK(c.profile.all_to_all->member_wait_s == Approx(100e-6));
  CHECK(c.profile.stages.at(0).f_s == Approx(400e-6));
  CHECK(c.profile.stages.at(0).moe_layers == 1);
  // The profile puts back a dispatch and a combine per layer, each its own time and the wait.
  CHECK(cost_model_from_profile(c.profile, 2).stages.at(0).f_s == Approx(400e-6 + 2 * (100e-6 + 100e-6)));
  CHECK(cost_model_from_profile(c.profile, 1).stages.at(0).f_s == Approx(400e-6));
  Profile written = c.profile;
  written.all_to_all->experts = 4;  // the trace carries no routing histogram
  CHECK(parse_profile(to_profile_json(written), "p.json") == written);
  CHECK(c.profile.all_to_all->transport_cpu_per_exchange_s == 0);  // no bound cores said
  CHECK(cost_model_from_profile(c.profile, 2).stages.at(0).all_to_all.compute_slowdown == 1);
}

// The same replicas bound to a core each (pprun --bind-cores), their transport's threads
// having run 150 and 50 us of CPU in the step, over one exchange each: 100 us per exchange.
// At E = 2 the profile's exchanges take 200 us on average (100 us each and the 100 us wait), so
// the compute beside one gets half its core: twice as slow in an overlapped F&B step.
TEST_CASE("the transport's CPU per exchange on a bound core slows the compute beside an exchange") {
  traces::Trace t = replicas_trace();
  t.meta.run.bind_cores = true;
  t.meta.run.transport_cpu_s = std::vector<double>{150e-6, 50e-6};
  const Calibration c = calibrate({{t, "bound.json"}});
  REQUIRE(c.profile.all_to_all);
  CHECK(c.profile.all_to_all->transport_cpu_per_exchange_s == Approx(100e-6));
  CHECK(cost_model_from_profile(c.profile, 2).stages.at(0).all_to_all.compute_slowdown == Approx(2));
  CHECK(cost_model_from_profile(c.profile, 1).stages.at(0).all_to_all.compute_slowdown == 1);
  Profile written = c.profile;
  written.all_to_all->experts = 4;
  CHECK(parse_profile(to_profile_json(written), "p.json") == written);
  // A rank that also sent pipeline transfers shared that CPU with them: not counted.
  RankWriter w{t, 0};
  w.now_us = 2000;
  w.op("SEND_F", Lane::Send, 0, 0, 10);
  const Calibration shared = calibrate({{t, "bound-sends.json"}});
  CHECK(shared.profile.all_to_all->transport_cpu_per_exchange_s == Approx(50e-6));
}

// pprun's run description says whether its runtime runs overlapped F&B steps as one
// (`overlapped_steps`): a trace without such steps (GPipe here, 1F1B alike) then still gives a
// profile whose DualPipeV pairs overlap, read back from the trace's file; a run that says it
// does not overlap them gives one whose pairs run one pass after the other.
TEST_CASE("a MoE trace whose run says it overlaps F&B steps gives a profile whose DualPipeV pairs overlap") {
  const cli_test::fs::path dir = cli_test::case_dir("moe-overlapped-steps");
  for (const bool said : {true, false}) {
    INFO("overlapped_steps " << said);
    traces::Trace trace = moe_calib_trace();
    trace.meta.run.overlapped_steps = said;
    const std::string path = (dir / fmt::format("moe-{}.json", said)).string();
    traces::write_trace(trace, path);
    const traces::Trace read = traces::read_trace(path);
    REQUIRE(read.meta.run.overlapped_steps == said);
    const Calibration c = calibrate({{read, path}});
    REQUIRE(c.profile.all_to_all);
    CHECK(c.profile.all_to_all->overlapped_steps == said);
    const Profile cut = profile_for_stages(c.profile, 4, "p.json");
    const SimResult dualpipev =
        simulate(moe_compiled("dualpipev", 2), cost_model_from_profile(cut, 2), topology_from_profile(c.profile));
    CHECK((dualpipev.all_to_all.overlapped_pairs > 0) == said);
    CHECK((dualpipev.all_to_all.hidden_s > 0) == said);
  }
}
