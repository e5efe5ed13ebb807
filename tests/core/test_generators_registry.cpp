// Every built-in schedule through the registry, over a grid of sizes (p = 1..6 ranks,
// m = 1..10 micro-batches, --chunks 2 for the looping and V schedules):
// - the registry knows the 11 SPEC.md names (zb-auto comes from the simulator) and the
//   DeepSpeed and Megatron-Core behaviours by release (deepspeed-train@0.5, @0.8.3,
//   deepspeed-inference@0.5, interleaved-1f1b@0.1, @0.10),
//   each with a one-line description;
// - each schedule is either built or refused with a ScheduleError that starts with its name;
// - a built schedule passes the validator (DeepSpeed's also with blocking sends), has the
//   same number of steps on every rank, gives every per-micro-batch instruction a buffer,
//   holds stage, micro-batch and placement as the schedule says, and each send has its
//   receive on the peer's rank in a later step (the same step for DeepSpeed's lock-step
//   schedules) — sends and receives of one channel pair up in order.
#include "test_generators_support.hpp"

#include <deque>

#include "pipescope/core/registry.hpp"
#include "pipescope/core/validator.hpp"

using namespace pipescope;
using namespace test_support;

namespace {

const std::vector<std::string> kNames = {"gpipe",
                                         "1f1b",
                                         "deepspeed-train",
                                         "deepspeed-train@0.5",
                                         "deepspeed-train@0.8.3",
                                         "deepspeed-inference",
                                         "deepspeed-inference@0.5",
                                         "data-parallel",
                                         "interleaved-1f1b",
                                         "interleaved-1f1b@0.1",
                                         "interleaved-1f1b@0.10",
                                         "looped-bfs",
                                         "zb-h1",
                                         "zb-h2",
                                         "zbv",
                                         "dualpipev"};

bool uses_chunks(const std::string& name) {
  return name.starts_with("interleaved-1f1b") || name == "looped-bfs" || name == "zbv" || name == "dualpipev";
}

bool lock_step(const std::string& name) { return name.rfind("deepspeed", 0) == 0; }

// Pairs sends with receives per channel (op, sending stage, receiving stage) in program
// order and checks where each receive sits against its send.
void check_transfers(const Schedule& s, bool same_step) {
  struct Posted {
    int step;
    int micro_batch;
  };
  std::map<std::tuple<int, int, int>, std::deque<Posted>> sent;  // (kind, from, to)
  for (int r = 0; r < s.num_ranks; ++r)
    for (int t = 0; t < static_cast<int>(s.programs[r].size()); ++t)
      for (const Instruction& instr : s.programs[r][t])
        if (is_send(instr.op))
          sent[{instr.op == Op::SendActivation ? 0 : 1, instr.stage, resolved_peer_stage(instr)}].push_back(
              {t, instr.micro_batch});
  int received = 0;
  for (int r = 0; r < s.num_ranks; ++r)
    for (int t = 0; t < static_cast<int>(s.programs[r].size()); ++t)
      for (const Instruction& instr : s.programs[r][t])
        if (is_recv(instr.op)) {
          INFO("rank " << r << " step " << t << " " << to_string(instr));
          const int from = resolved_peer_stage(instr);
          REQUIRE(s.stage_to_rank.at(from) != r);  // same-rank hand-overs need no transfer
          auto& queue = sent[{instr.op == Op::RecvActivation ? 0 : 1, from, instr.stage}];
          REQUIRE(!queue.empty());
          const Posted send = queue.front();
          queue.pop_front();
          CHECK(send.micro_batch == instr.micro_batch);
          if (same_step)
            CHECK(send.step == t);
          else
            CHECK(send.step < t);
          ++received;
        }
  for (const auto& [channel, queue] : sent) CHECK(queue.empty());
  CHECK((received > 0) == (s.num_ranks > 1));
}

}  // namespace

TEST_CASE("the registry holds every built-in schedule with a description", "[generators]") {
  ScheduleRegistry registry;
  register_builtin_generators(registry);
  CHECK(registry.names() == kNames);
  for (const auto& entry : registry.entries()) {
    INFO(entry.name);
    CHECK(!entry.description.empty());
    CHECK(entry.description.find('\n') == std::string::npos);
  }
  for (const auto& name : kNames) CHECK(ScheduleRegistry::instance().find(name) != nullptr);
}

TEST_CASE("every built-in schedule is valid or refused, over a grid", "[generators]") {
  int built = 0;
  for (const auto& name : kNames)
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 10; ++m) {
        INFO(name << " p=" << p << " m=" << m);
        const ScheduleParams request = params(p, m, uses_chunks(name) ? 2 : 1, uses_chunks(name));
        Schedule s;
        try {
          s = make_schedule(name, request);
        } catch (const ScheduleError& e) {
          CHECK_THAT(e.what(), Catch::StartsWith(name + ": "));
          continue;
        }
        ++built;
        CHECK(s.name == name);
        CHECK(s.num_ranks == p);
        CHECK(s.num_micro_batches == m);
        CHECK(s.num_stages == p * (uses_chunks(name) ? 2 : 1));
        CHECK_NOTHROW(validate(s));
        if (lock_step(name)) {
          ValidationOptions blocking;
          blocking.blocking_sends = true;
          CHECK_NOTHROW(validate(s, blocking));
        }
        for (int r = 0; r < p; ++r) {
          CHECK(s.programs[r].size() == s.programs[0].size());
          for (const Step& step : s.programs[r])
            for (const Instruction& instr : step) {
              CHECK(s.stage_to_rank.at(instr.stage) == r);
              if (needs_micro_batch(instr.op)) CHECK(instr.buffer >= 0);
            }
        }
        check_transfers(s, lock_step(name));
      }
  CHECK(built > 400);
}

TEST_CASE("refusals name the schedule and the reason", "[generators]") {
  CHECK_THAT(refusal([] { make_schedule("data-parallel", params(2, 4)); }),
             Catch::Contains("data-parallel: ") && Catch::Contains("--stages must be 1"));
  CHECK_THAT(refusal([] { make_schedule("deepspeed-train", params(2, 4, 2, true)); }), Catch::Contains("--chunks 2"));
  CHECK_THAT(refusal([] { make_schedule("zb-h1", params(2, 4, 2, true)); }), Catch::StartsWith("zb-h1: "));
}

TEST_CASE("the large interleaved configuration lowers completely", "[generators]") {
  // 64 ranks, 4 chunks, 1024 micro-batches: 256 stages; 2 * 4 * 1024 computes per rank and a
  // makespan of 2vm + 2(p-1) = 8318 steps (the benchmark bench_core times this).
  const Schedule s = make_schedule("interleaved-1f1b", params(64, 1024, 4, true));
  CHECK(s.num_stages == 256);
  CHECK(s.programs[0].size() == 8318u);
  std::size_t computes = 0;
  for (const Step& step : s.programs[17])
    for (const Instruction& instr : step) computes += is_compute(instr.op) ? 1 : 0;
  CHECK(computes == 8192u);
}

// Every registry entry's traits describe the schedule it builds, so that the tools may ask the
// traits instead of the name: at p = 3, m = 12 and each chunk count the entry runs (2 and 3
// where it takes any), the built schedule has that many stages per rank, the V placement
// (rank r: stages r and 2p-1-r) exactly where the trait says V, and weight-gradient (W)
// instructions exactly where the trait says split backward. Only interleaving takes a
// micro-batch group size.
TEST_CASE("every registered schedule's traits describe the schedule it builds", "[generators]") {
  ScheduleRegistry registry;
  register_builtin_generators(registry);
  int checked = 0;
  for (const GeneratorInfo& entry : registry.entries()) {
    const ScheduleTraits& traits = entry.traits;
    const std::vector<int> chunk_counts = traits.chunks.empty() ? std::vector<int>{2, 3} : traits.chunks;
    CHECK_FALSE(traits.cost_dependent);  // core's own schedules depend on their shape only
    for (int chunks : chunk_counts) {
      INFO(entry.name << " chunks " << chunks);
      const int ranks = entry.name == "data-parallel" ? 1 : 3;
      Schedule s;
      try {
        s = entry.make(params(ranks, 12, chunks, chunks != 1));
      } catch (const ScheduleError& e) {
        FAIL(e.what());
      }
      CHECK(s.num_stages == ranks * chunks);
      std::vector<int> placement;
      placement.reserve(static_cast<std::size_t>(s.num_stages));
      for (int st = 0; st < s.num_stages; ++st)
        placement.push_back(traits.placement == StagePlacement::v && (st / ranks) % 2 == 1 ? ranks - 1 - st % ranks
                                                                                           : st % ranks);
      CHECK(s.stage_to_rank == placement);
      bool weight_gradients = false;
      for (const auto& program : s.programs)
        for (const Step& step : program)
          for (const Instruction& instr : step) weight_gradients = weight_gradients || instr.op == Op::BackwardWeight;
      CHECK(weight_gradients == traits.split_backward);
      ++checked;
    }
    CHECK(traits.takes_microbatch_group_size == entry.name.starts_with("interleaved-1f1b"));
  }
  CHECK(checked == 20);  // 16 entries; interleaved-1f1b's three and looped-bfs at 2 and 3 chunks
}
