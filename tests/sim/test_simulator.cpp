// The event engine against list scheduling and the textbook closed forms.
// - Agreement: on gpipe, 1f1b, interleaved-1f1b (2 and 4 chunks), zb-h1, zb-h2, zbv and
//   looped-bfs, p in {2,3,4}, m in {4,6,8}, with uneven per-stage F/B/W costs and a fixed c,
//   iteration time and per-rank busy time equal an independent list scheduler exactly.
// - Closed forms (F = B = W = 1, c = 0): GPipe and 1F1B p=4 m=8: 33 (= 11 x 3), bubble 3/11;
//   interleaved p=4 v=2 m=8 with chunk costs 1: 57 (= 8 x 6 + 3 x 6 / 2), bubble 3/19;
//   ZB-H1 p=4 m=8: 27 (= 24 + 3 x 1). ZB-H2: also 27 for one iteration (rank 3 cannot start
//   before t = 3), but no rank ever waits between its first and last compute: ANCHORS' zero
//   bubble for ZB-H2 counts the warm-up as overlapped by the previous iteration's tail.
// - Memory: one rank running F0 F1 I0 F2 W0 I1 I2 W1 W2 with f=10, b=-6, w=-4 and 100 static
//   bytes holds 110 120 114 124 120 114 108 104 100: peak 124, and the trace's counter says so.
// - Gradient accumulation: with grad_accumulate_s 0.5, micro-batch 0's B (and W) take 0.5 less
//   than the others' (F 1, B 2: F0 F1 B0 B1 in 5.5); a negative one is refused.
// - Link sharing: two 1 GB transfers on a 1 GB/s link posted at 0.5 s and 1.0 s arrive at
//   2.0 s and 2.5 s, iteration 4.0 s (unshared they would arrive at 1.5 s and 2.0 s: 3.5 s).
// - Topology: two 100 MB transfers posted together between ranks on one node (100 GB/s, 1 us)
//   arrive after 2.001 ms; across nodes (10 GB/s, 5 us) after 20.005 ms.
// - Receives of arrived data: recv_contended_s while the rank's own message to the sender is
//   undelivered, recv_s otherwise, checked on every receive of interleaved 1F1B (p = 2, m = 8)
//   against the rule read from the trace alone; a negative one is refused.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <tuple>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/sim/simulator.hpp"
#include "pipescope/traces/compare.hpp"
#include "sim_test_support.hpp"

using namespace pipescope;
using namespace pipescope::sim;
using sim_test::hand_schedule;

namespace {

CostModel uneven_costs(int num_stages, std::mt19937& rng, double c_s) {
  std::uniform_int_distribution<int> quarter(1, 12);  // multiples of 0.25: sums stay exact
  CostModel costs;
  costs.c_s = c_s;
  for (int s = 0; s < num_stages; ++s) {
    StageCost stage;
    stage.f_s = quarter(rng) * 0.25;
    stage.b_s = quarter(rng) * 0.25;
    stage.w_s = quarter(rng) * 0.25;
    costs.stages.push_back(stage);
  }
  return costs;
}

Summary run(const std::string& name, int p, int m, int chunks, const CostModel& costs) {
  ScheduleParams params;
  params.num_ranks = p;
  params.num_micro_batches = m;
  params.chunks = chunks;
  params.chunks_given = chunks != 1;
  return simulate(make_schedule(name, params), costs).summary;
}

}  // namespace

TEST_CASE("the engine gives exactly the list-scheduling result with uneven costs") {
  std::mt19937 rng(20240611);
  struct Case {
    const char* name;
    int chunks;
  };
  const Case cases[] = {{"gpipe", 1}, {"1f1b", 1},  {"interleaved-1f1b", 2}, {"interleaved-1f1b", 4},
                        {"zb-h1", 1}, {"zb-h2", 1}, {"zbv", 2},              {"looped-bfs", 2}};
  int compared = 0;
  for (const Case& c : cases) {
    for (int p : {2, 3, 4}) {
      for (int m : {4, 6, 8}) {
        ScheduleParams params;
        params.num_ranks = p;
        params.num_micro_batches = m;
        params.chunks = c.chunks;
        params.chunks_given = c.chunks != 1;
        Schedule schedule;
        try {
          schedule = make_schedule(c.name, params);
        } catch (const ScheduleError&) {
          continue;  // a combination the generator refuses (m not a multiple of p, ...)
        }
        for (double c_s : {0.0, 0.5}) {
          const CostModel costs = uneven_costs(schedule.num_stages, rng, c_s);
          const auto reference = sim_test::reference_list_schedule(schedule, costs);
          const Summary summary = simulate(schedule, costs).summary;
          INFO(c.name << " p=" << p << " m=" << m << " c=" << c_s);
          CHECK(summary.iteration_time_s == reference.iteration_s);
          for (int r = 0; r < p; ++r) CHECK(summary.ranks[r].busy_s == reference.busy_s[r]);
          ++compared;
        }
      }
    }
  }
  CHECK(compared >= 80);
}

TEST_CASE("closed forms of GPipe, 1F1B and interleaved 1F1B") {
  const CostModel unit = CostModel::uniform(1, 1, 1, 0);
  for (const char* name : {"gpipe", "1f1b"}) {
    const Summary s = run(name, 4, 8, 1, unit);
    INFO(name);
    CHECK(s.iteration_time_s == 33.0);
    CHECK(s.bubble_fraction == Approx(3.0 / 11.0));
    for (const auto& r : s.ranks) CHECK(r.bubble_fraction == Approx(3.0 / 11.0));
    CHECK(s.throughput_samples_per_s == Approx(8.0 / 33.0));
  }
  const Summary interleaved = run("interleaved-1f1b", 4, 8, 2, unit);
  CHECK(interleaved.iteration_time_s == 57.0);
  CHECK(interleaved.bubble_fraction == Approx(3.0 / 19.0));
}

TEST_CASE("closed forms of ZB-H1 and ZB-H2") {
  const CostModel unit = CostModel::uniform(1, 1, 1, 0);
  CHECK(run("zb-h1", 4, 8, 1, unit).iteration_time_s == 27.0);
  const SimResult h2 = simulate(make_schedule("zb-h2", {4, 8, 1, false}), unit);
  CHECK(h2.summary.iteration_time_s == 27.0);
  CHECK(sim_test::largest_internal_gap_s(h2.trace) == 0.0);
  // 1F1B, by contrast, waits inside the steady state of its middle ranks.
  const SimResult one_f_one_b = simulate(make_schedule("1f1b", {4, 8, 1, false}), unit);
  CHECK(sim_test::largest_internal_gap_s(one_f_one_b.trace) > 0.0);
}

TEST_CASE("micro-batch 0's weight gradient has no gradient sum to add itself to") {
  // One rank: F0 F1 B0 B1, then F0 F1 I0 W0 I1 W1 with grad_accumulate_s 0.5: micro-batch 0's
  // B and W take 0.5 less, micro-batch 1's the full cost.
  using sim_test::Instruction;
  std::vector<Instruction> full = {{Op::ForwardPass, 0, 0}, {Op::ForwardPass, 0, 1}, {Op::BackwardPass, 0, 0},
                                   {Op::BackwardPass, 0, 1}};
  std::vector<Instruction> split = {{Op::ForwardPass, 0, 0},    {Op::ForwardPass, 0, 1},   {Op::BackwardInput, 0, 0},
                                    {Op::BackwardWeight, 0, 0}, {Op::BackwardInput, 0, 1}, {Op::BackwardWeight, 0, 1}};
  CostModel costs = CostModel::uniform(1, 1, 1, 2, 0, 0, 0);
  costs.runtime.stages.resize(1);
  costs.runtime.stages[0].grad_accumulate_s = 0.5;
  const SimResult a = simulate(hand_schedule("full", 1, 2, {0}, {full}), costs);
  CHECK(a.summary.iteration_time_s == Approx(1 + 1 + 1.5 + 2));
  REQUIRE(a.trace.events.size() == 4);
  CHECK(a.trace.events[2].dur_us == Approx(1.5e6));
  CHECK(a.trace.events[3].dur_us == Approx(2e6));
  const SimResult b = simulate(hand_schedule("split", 1, 2, {0}, {split}), costs);
  CHECK(b.summary.iteration_time_s == Approx(1 + 1 + 1 + 0.5 + 1 + 1));
  costs.runtime.stages[0].grad_accumulate_s = -1;
  CHECK_THROWS_AS(simulate(hand_schedule("full", 1, 2, {0}, {full}), costs), UsageError);
}

TEST_CASE("an overlapped gradient reduction holds the program up only by what outlasts the backward") {
  // One rank: F0 B0 ReduceGrads OptimizerStep with F 1, B + W 2 (the weight-gradient pass runs
  // 1..3). 4 buckets, final at 1.5, 2, 2.5 and 3.
  using sim_test::Instruction;
  const std::vector<Instruction> program = {
      {Op::ForwardPass, 0, 0}, {Op::BackwardPass, 0, 0}, {Op::ReduceGrads, 0, -1}, {Op::OptimizerStep, 0, -1}};
  const Schedule schedule = hand_schedule("reduce", 1, 1, {0}, {program});
  CostModel costs = CostModel::uniform(1, 1, 1, 0, 0, 0, 0);
  StageCost& stage = costs.stages[0];
  stage.optimizer_s = 0.25;
  stage.reduce_grads_s = 1;
  CHECK(simulate(schedule, costs).summary.iteration_time_s == Approx(3 + 1 + 0.25));  // after the backward
  // Buckets of 0.25 keep up with the pass: only the last one's reduction is left, 3 to 3.25.
  stage.reduce_grads_buckets = 4;
  CHECK(overlapped_reduce_grads_end_s(stage, 1, 2) == Approx(3.25));
  CHECK(simulate(schedule, costs).summary.iteration_time_s == Approx(3.25 + 0.25));
  // Buckets of 1 cannot: the chain runs from the first bucket, 1.5 + 4 x 1 = 5.5.
  stage.reduce_grads_s = 4;
  CHECK(simulate(schedule, costs).summary.iteration_time_s == Approx(5.5 + 0.25));
  // A part final only at the end of the pass (the embedding) runs after the chain: 1 of 2, the
  // other 1 in 4 buckets of 0.25 ends at 3.25, then 1 more.
  stage.reduce_grads_s = 2;
  stage.reduce_grads_last_s = 1;
  CHECK(simulate(schedule, costs).summary.iteration_time_s == Approx(4.25 + 0.25));
  stage.reduce_grads_last_s = 3;
  CHECK_THROWS_AS(simulate(schedule, costs), UsageError);
}

TEST_CASE("memory follows F, B and W on a hand-computed program") {
  using sim_test::Instruction;
  std::vector<Instruction> program = {{Op::ForwardPass, 0, 0},    {Op::ForwardPass, 0, 1},    {Op::BackwardInput, 0, 0},
                                      {Op::ForwardPass, 0, 2},    {Op::BackwardWeight, 0, 0}, {Op::BackwardInput, 0, 1},
                                      {Op::BackwardInput, 0, 2},  {Op::BackwardWeight, 0, 1}, {Op::BackwardWeight, 0, 2}};
  const Schedule schedule = hand_schedule("hand", 1, 3, {0}, {program});
  CostModel costs = CostModel::uniform(1, 1, 1, 0, 10, -6, -4);
  costs.stages[0].static_bytes = 100;
  const SimResult result = simulate(schedule, costs);
  CHECK(result.summary.ranks[0].peak_memory_bytes == 124);
  std::vector<std::int64_t> counter;
  for (const auto& sample : result.trace.memory) counter.push_back(sample.bytes);
  CHECK(counter == std::vector<std::int64_t>{100, 110, 120, 114, 124, 120, 114, 108, 104, 100});
  CHECK(result.trace.meta.source == "predicted");
  CHECK(result.trace.events.size() == 9);
}

TEST_CASE("a full backward frees what F allocated; 1F1B's first rank holds p micro-batches") {
  CostModel costs = CostModel::uniform(1, 1, 1, 0, 10, -6, -4);
  costs.stages[0].static_bytes = 1000;
  const Summary s = run("1f1b", 4, 8, 1, costs);
  CHECK(s.ranks[0].peak_memory_bytes == 1000 + 4 * 10);
  CHECK(s.ranks[3].peak_memory_bytes == 1000 + 1 * 10);
}

namespace {

// Stage 0 forwards two micro-batches and sends both; stage 1 (the other rank) receives and
// forwards them. Inference only.
Schedule two_sends() {
  using sim_test::Instruction;
  return hand_schedule("two-sends", 2, 2, {0, 1},
                       {{{Op::ForwardPass, 0, 0}, {Op::SendActivation, 0, 0}, {Op::ForwardPass, 0, 1}, {Op::SendActivation, 0, 1}},
                        {{Op::RecvActivation, 1, 0}, {Op::ForwardPass, 1, 0}, {Op::RecvActivation, 1, 1}, {Op::ForwardPass, 1, 1}}});
}

CostModel link_costs(double f0_s, std::int64_t bytes) {
  CostModel costs;
  costs.transfer_model = TransferModel::Links;
  StageCost first, second;
  first.f_s = f0_s;
  second.f_s = 1.0;
  first.activation_bytes = bytes;
  costs.stages = {first, second};
  return costs;
}

}  // namespace

TEST_CASE("concurrent transfers share a link's bandwidth") {
  Topology topology;
  topology.intra_node = {1e9, 0.0};
  const CostModel costs = link_costs(0.5, 1'000'000'000);
  SimOptions shared;
  const SimResult result = simulate(two_sends(), costs, topology, shared);
  std::vector<double> arrivals;
  for (const auto& e : result.trace.events)
    if (e.name == "SEND_F") arrivals.push_back(e.end_us() / 1e6);
  REQUIRE(arrivals.size() == 2);
  CHECK(arrivals[0] == Approx(2.0));
  CHECK(arrivals[1] == Approx(2.5));
  CHECK(result.summary.iteration_time_s == Approx(4.0));  // F 2..3 and 3..4 on rank 1

  SimOptions alone;
  alone.share_links = false;
  CHECK(simulate(two_sends(), costs, topology, alone).summary.iteration_time_s == Approx(3.5));
}

TEST_CASE("transfers inside a node use NVLink, across nodes the network") {
  Topology topology;
  topology.gpus_per_node = 8;
  topology.intra_node = {100e9, 1e-6};
  topology.inter_node = {10e9, 5e-6};
  const CostModel costs = link_costs(0.0, 100'000'000);
  topology.pipeline_rank_stride = 1;  // devices 0 and 1: one node
  // Both transfers start at 0 and share the link: 200 MB at 100 GB/s, then 1 us.
  CHECK(simulate(two_sends(), costs, topology).summary.iteration_time_s == Approx(2.0 + 2e-3 + 1e-6));
  topology.pipeline_rank_stride = 8;  // devices 0 and 8: two nodes
  // Both transfers start at 0 and share the link: 200 MB at 10 GB/s, then 5 us.
  CHECK(simulate(two_sends(), costs, topology).summary.iteration_time_s == Approx(2.0 + 20e-3 + 5e-6));
}

TEST_CASE("a receive that is never sent is a deadlock named by rank and instruction") {
  using sim_test::Instruction;
  const Schedule broken = hand_schedule("broken", 2, 1, {0, 1},
                                        {{{Op::RecvGrad, 0, 0}, {Op::ForwardPass, 0, 0}, {Op::SendActivation, 0, 0}},
                                         {{Op::RecvActivation, 1, 0}, {Op::ForwardPass, 1, 0}, {Op::BackwardPass, 1, 0},
                                          {Op::SendGrad, 1, 0}}});
  REQUIRE_THROWS_AS(simulate(broken, CostModel::uniform(1, 1, 1, 0)), ScheduleError);
  REQUIRE_THROWS_WITH(simulate(broken, CostModel::uniform(1, 1, 1, 0)), Catch::Contains("rank 0, step 0"));
}

TEST_CASE("a compute-only schedule gets its communication before it is simulated") {
  using sim_test::Instruction;
  const Schedule compute_only = hand_schedule("compute-only", 2, 1, {0, 1},
                                              {{{Op::ForwardPass, 0, 0}, {Op::BackwardPass, 0, 0}},
                                               {{Op::ForwardPass, 1, 0}, {Op::BackwardPass, 1, 0}}});
  // F0 0..1, F1 1.5..2.5, B1 2.5..4.5, B0 5..7 with c = 0.5.
  CHECK(simulate(compute_only, CostModel::uniform(1, 1, 1, 0.5)).summary.iteration_time_s == 7.0);
}

TEST_CASE("costs that do not fit the schedule are refused") {
  CostModel three = CostModel::uniform(1, 1, 1, 0);
  three.stages.resize(3);
  CHECK_THROWS_AS(run("1f1b", 4, 8, 1, three), UsageError);
  CHECK_THROWS_AS(run("1f1b", 4, 8, 1, CostModel::uniform(1, 1, 1, 0, 2, -1, 0)), UsageError);
}

// Runtime effects a calibrated profile adds (costs.hpp), on a hand-made program of one
// micro-batch on 2 ranks: rank 0 runs F(1 s) SEND_F RECV_B B(2 s) OPTIMIZER(0.5 s); rank 1
// runs LOAD(2 s) RECV_F F(3 s) B(4 s) SEND_B OPTIMIZER(0.25 s); transfers take c = 0.5 s.
// - Plain: SEND_F posted at 1 arrives at 1.5, rank 1 takes it at 2 (after its LOAD); SEND_B
//   posted at 9 arrives at 9.5; rank 0's B ends 11.5, its optimizer 12.0: iteration 12.0.
// - 0.1 s between instructions: rank 1 takes SEND_F at 2.1, posts SEND_B at 9.4 (+0.4),
//   rank 0 takes it at 9.9, B 10.0-12.0, optimizer 12.1-12.6: iteration 12.6 (no gap after
//   the last instruction).
// - Optimizer sync: rank 1 reaches its optimizer at 9.5 and waits for rank 0 (12.1): its
//   event spans 9.5-12.35 (without the sync 9.5-9.75); the iteration stays 12.6.
// - Sends that end at their receive: SEND_F is drawn 1.1-2.1 (until rank 1 took it), not
//   1.1-1.6 (its arrival).
// - 0.4 s of step overhead (after every rank's last instruction): iteration 13.0.
TEST_CASE("instruction overhead, optimizer sync and sends that end at their receive") {
  const Schedule schedule = hand_schedule(
      "effects", 2, 1, {0, 1},
      {{{Op::ForwardPass, 0, 0}, {Op::SendActivation, 0, 0}, {Op::RecvGrad, 0, 0}, {Op::BackwardPass, 0, 0},
        {Op::OptimizerStep, 0, kNone}},
       {{Op::LoadMicroBatch, 1, 0}, {Op::RecvActivation, 1, 0}, {Op::ForwardPass, 1, 0}, {Op::BackwardPass, 1, 0},
        {Op::SendGrad, 1, 0}, {Op::OptimizerStep, 1, kNone}}});
  CostModel costs;
  costs.c_s = 0.5;
  StageCost s0, s1;
  s0.f_s = 1, s0.b_s = 1, s0.w_s = 1, s0.optimizer_s = 0.5;
  s1.f_s = 3, s1.b_s = 2, s1.w_s = 2, s1.optimizer_s = 0.25, s1.load_s = 2;
  costs.stages = {s0, s1};
  auto find = [](const traces::Trace& t, int rank, const char* name) {
    for (const auto& e : t.events)
      if (e.rank == rank && e.name == name) return e;
    FAIL("no " << name << " on rank " << rank);
    return traces::TraceEvent{};
  };

  CHECK(simulate(schedule, costs).summary.iteration_time_s == Approx(12.0));

  costs.runtime.instruction_overhead_s = 0.1;
  const SimResult with_overhead = simulate(schedule, costs);
  CHECK(with_overhead.summary.iteration_time_s == Approx(12.6));
  CHECK(find(with_overhead.trace, 0, "B").ts_us == Approx(10.0e6));
  CHECK(find(with_overhead.trace, 1, "OPTIMIZER").end_us() == Approx(9.75e6));
  CHECK(find(with_overhead.trace, 0, "SEND_F").end_us() == Approx(1.6e6));

  costs.runtime.optimizer_sync = true;
  costs.runtime.send_ends_at_receive = true;
  const SimResult with_all = simulate(schedule, costs);
  CHECK(with_all.summary.iteration_time_s == Approx(12.6));
  const traces::TraceEvent waiting = find(with_all.trace, 1, "OPTIMIZER");
  CHECK(waiting.ts_us == Approx(9.5e6));
  CHECK(waiting.end_us() == Approx(12.35e6));
  // Busy is the compute lane (traces/bubble.hpp): the load, F and B; the optimizer (and its
  // wait) runs on the collectives lane and is not busy time.
  CHECK(with_all.summary.ranks[1].busy_s == Approx(2 + 3 + 4));
  const traces::TraceEvent send = find(with_all.trace, 0, "SEND_F");
  CHECK(send.ts_us == Approx(1.1e6));
  CHECK(send.end_us() == Approx(2.1e6));

  // 0.4 s after the last instruction: the iteration and every rank's idle time grow by it;
  // the trace's events do not move, and it records the iteration for its readers.
  costs.runtime.step_overhead_s = 0.4;
  const SimResult with_step = simulate(schedule, costs);
  CHECK(with_step.summary.iteration_time_s == Approx(13.0));
  CHECK(with_step.summary.ranks[1].bubble_fraction == Approx(1 - (2 + 3 + 4) / 13.0));
  CHECK(traces::event_span_us(with_step.trace) == Approx(12.6e6));
  CHECK(traces::iteration_time_us(with_step.trace) == Approx(13.0e6));
  REQUIRE(with_step.trace.meta.run.step_time_s);
  CHECK(*with_step.trace.meta.run.step_time_s == Approx(13.0));
}

namespace {

// Checks every receive of a predicted trace against the contention rule, derived again from the
// trace alone: a receive whose data was there when it began (its send posted at least the
// delay before) lasts `contended_s` when a message of its own rank to the sender had been
// posted and not yet received then, `recv_s` otherwise. Returns how many of each it saw.
std::pair<int, int> check_receive_costs(const traces::Trace& trace, double delay_s, double recv_s, double contended_s) {
  struct Message {
    const traces::TraceEvent* send = nullptr;
    const traces::TraceEvent* recv = nullptr;
  };
  std::map<std::tuple<char, int, int>, Message> messages;  // direction, receiving stage, micro-batch
  for (const auto& e : trace.events) {
    if (e.name == "SEND_F" || e.name == "SEND_B")
      messages[{e.name.back(), e.name.back() == 'F' ? e.stage + 1 : e.stage - 1, e.micro_batch}].send = &e;
    if (e.name == "RECV_F" || e.name == "RECV_B") messages[{e.name.back(), e.stage, e.micro_batch}].recv = &e;
  }
  int plain = 0, contended = 0;
  for (const auto& [key, m] : messages) {
    REQUIRE((m.send && m.recv));
    const double begin = m.recv->ts_us;
    if (m.send->ts_us + delay_s * 1e6 > begin + 1e-6) continue;  // it waited for its data
    bool both_ways = false;
    for (const auto& [other_key, o] : messages)
      both_ways = both_ways || (o.send->rank == m.recv->rank && o.recv->rank == m.send->rank &&
                                o.send->ts_us <= begin + 1e-6 && o.recv->end_us() > begin + 1e-6);
    INFO("receive " << m.recv->name << " of stage " << m.recv->stage << ", micro-batch " << m.recv->micro_batch);
    CHECK(m.recv->dur_us == Approx((both_ways ? contended_s : recv_s) * 1e6));
    ++(both_ways ? contended : plain);
  }
  return {plain, contended};
}

}  // namespace

// Receives of arrived data cost recv_contended_s instead of recv_s while their rank's own
// message to the sender is undelivered (traffic both ways on the pair, as a pprun trace shows
// it with Gloo). Interleaved 1F1B on 2 ranks, m = 8, has receives of the second kind, GPipe
// only of the first; the trace, read alone, agrees with the rule on every
// receive, with a fixed delay and with links. Equal costs give the plain simulation.
TEST_CASE("a receive costs more while its rank's own message to the sender is undelivered") {
  ScheduleParams params;
  params.num_ranks = 2;
  params.num_micro_batches = 8;
  params.chunks = 2;
  params.chunks_given = true;
  const Schedule schedule = make_schedule("interleaved-1f1b", params);
  CostModel costs = CostModel::uniform(1.0, 1.0, 1.0, 0.75);
  costs.runtime.stages.resize(1);
  costs.runtime.stages[0].recv_s = 0.125;
  costs.runtime.stages[0].recv_contended_s = 0.5;
  const SimResult fixed = simulate(schedule, costs);
  const auto [plain, contended] = check_receive_costs(fixed.trace, 0.75, 0.125, 0.5);
  CHECK(contended > 0);
  // GPipe: every forward's message is taken before the first gradient comes back.
  params.chunks = 1;
  params.chunks_given = false;
  const auto [plain_gpipe, contended_gpipe] = check_receive_costs(simulate(make_schedule("gpipe", params), costs).trace, 0.75, 0.125, 0.5);
  CHECK(plain_gpipe > 0);
  CHECK(contended_gpipe == 0);

  CostModel links = costs;
  links.transfer_model = TransferModel::Links;
  links.stages = std::vector<StageCost>(4, costs.stages[0]);
  for (auto& stage : links.stages) stage.activation_bytes = 750'000'000;
  Topology topology;
  topology.intra_node = {1e9, 0.0};  // 0.75 s a transfer, shared when two overlap
  SimOptions unshared;
  unshared.share_links = false;
  const auto [plain_links, contended_links] = check_receive_costs(simulate(schedule, links, topology, unshared).trace, 0.75, 0.125, 0.5);
  CHECK(contended_links > 0);
  const SimResult shared = simulate(schedule, links, topology, SimOptions{});
  CHECK(shared.summary.iteration_time_s > 0);

  CostModel equal = costs;
  equal.runtime.stages[0].recv_contended_s = 0.125;
  const SimResult plain_costs = simulate(schedule, equal);
  check_receive_costs(plain_costs.trace, 0.75, 0.125, 0.125);
  CHECK(fixed.summary.iteration_time_s > plain_costs.summary.iteration_time_s);
  costs.runtime.stages[0].recv_contended_s = -1;
  CHECK_THROWS_AS(simulate(schedule, costs), UsageError);
}

// The tied-gradient all-reduce as a barrier of the first and the last stage's ranks: the
// program above with REDUCE_TIED before each OPTIMIZER (rank 0: 0.2 s, rank 1: 0.1 s), no
// time between instructions. Rank 1 gets there at 9 (after posting SEND_B), rank 0 at 11.5
// (its B ends then). With reduce_tied_sync rank 1's event spans 9-11.6 and its optimizer
// 11.6-11.85; without, 9-9.1 and 9.1-9.35. Rank 0 ends at 12.2 either way.
TEST_CASE("the tied-gradient reduction waits for both ends of the pipeline") {
  const Schedule schedule = hand_schedule(
      "tied", 2, 1, {0, 1},
      {{{Op::ForwardPass, 0, 0}, {Op::SendActivation, 0, 0}, {Op::RecvGrad, 0, 0}, {Op::BackwardPass, 0, 0},
        {Op::ReduceTiedGrads, 0, kNone}, {Op::OptimizerStep, 0, kNone}},
       {{Op::LoadMicroBatch, 1, 0}, {Op::RecvActivation, 1, 0}, {Op::ForwardPass, 1, 0}, {Op::BackwardPass, 1, 0},
        {Op::SendGrad, 1, 0}, {Op::ReduceTiedGrads, 1, kNone}, {Op::OptimizerStep, 1, kNone}}});
  CostModel costs;
  costs.c_s = 0.5;
  StageCost s0, s1;
  s0.f_s = 1, s0.b_s = 1, s0.w_s = 1, s0.optimizer_s = 0.5, s0.reduce_tied_s = 0.2;
  s1.f_s = 3, s1.b_s = 2, s1.w_s = 2, s1.optimizer_s = 0.25, s1.load_s = 2, s1.reduce_tied_s = 0.1;
  costs.stages = {s0, s1};
  auto event = [](const SimResult& result, int rank, const char* name) {
    for (const auto& e : result.trace.events)
      if (e.rank == rank && e.name == name) return std::pair{e.ts_us / 1e6, e.end_us() / 1e6};
    return std::pair{-1.0, -1.0};
  };
  const SimResult independent = simulate(schedule, costs);
  CHECK(independent.summary.iteration_time_s == Approx(12.2));
  CHECK(event(independent, 1, "REDUCE_TIED").second == Approx(9.1));
  CHECK(event(independent, 1, "OPTIMIZER").second == Approx(9.35));

  costs.runtime.reduce_tied_sync = true;
  const SimResult synced = simulate(schedule, costs);
  CHECK(synced.summary.iteration_time_s == Approx(12.2));
  CHECK(event(synced, 1, "REDUCE_TIED").first == Approx(9.0));
  CHECK(event(synced, 1, "REDUCE_TIED").second == Approx(11.6));
  CHECK(event(synced, 1, "OPTIMIZER").second == Approx(11.85));
  CHECK(event(synced, 0, "REDUCE_TIED").second == Approx(11.7));
}

// One bubble for every tool (traces/bubble.hpp): DeepSpeed's TrainSchedule on 2 ranks x 4
// micro-batches (F 1, B + W 2, c 0.1 s), with loads (0.5 s, 4 on each rank) and a synchronized
// optimizer step (0.75 s) costing time. Loads occupy the compute lane and count as busy, the
// optimizer does not: each rank is busy 4 x 1 + 4 x 2 + 4 x 0.5 = 14 s, and the summary's
// bubble, rank by rank and on average, is the one compare reads from the predicted trace.
TEST_CASE("the summary's bubble is the trace's when loads and the optimizer cost time") {
  ScheduleParams params;
  params.num_ranks = 2;
  params.num_micro_batches = 4;
  const Schedule schedule = make_schedule("deepspeed-train", params);
  CostModel costs = CostModel::uniform(1, 1, 1, 0.1);
  for (StageCost& s : costs.stages) {
    s.load_s = 0.5;
    s.optimizer_s = 0.75;
  }
  costs.runtime.optimizer_sync = true;
  const SimResult result = simulate(schedule, costs);
  const double iteration_us = traces::iteration_time_us(result.trace);
  REQUIRE(iteration_us == Approx(result.summary.iteration_time_s * 1e6));
  for (const RankSummary& r : result.summary.ranks) {
    CHECK(r.busy_s == Approx(14));
    CHECK(r.bubble_fraction == Approx(traces::bubble_fraction(result.trace, r.rank, iteration_us)));
  }
  const traces::Comparison c = traces::compare_traces(result.trace, result.trace);
  CHECK(result.summary.bubble_fraction == Approx(c.bubble_fraction_predicted));
}
