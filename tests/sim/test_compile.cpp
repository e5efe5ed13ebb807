// The simulator's compile step on its own.
// - Numbering: compile numbers the instructions as the core's ScheduleIndex does (rank after
//   rank, in program order): the same rank_begin and step_of, on zbv p=4 m=8, interleaved 1F1B
//   p=4 v=2 m=8 and torch's interleaved p=4 m=8 (a CSV, torch's semantics).
// - Transfers: every send and receive points to a transfer that points back to it; a transfer
//   joins one send and one receive of the same micro-batch, and its link is its ranks' pair;
//   per channel, the k-th send is matched with the k-th receive.
// - Errors name the place: 0SEND_F0 with no receive on a 2-rank schedule is "rank 0, step 0,
//   instruction 0SEND_F0: no matching receive"; a receive of micro-batch 1 first in line for the
//   send of micro-batch 0 is "rank 1, step 0, instruction 1RECV_F1: matched in order with rank 0,
//   step 0, instruction 0SEND_F0, which sends another micro-batch"; a receive with no send is
//   named; with both a wrong pairing and a missing receive, the first in matching order wins.
// - Steps: idle steps (empty, first or last) keep their numbers in step_of.
// - The straight path: compile(order) equals compile(lower(order)), field for field, for every
//   built-in schedule made from a compute order, at several sizes.
#include <algorithm>
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <tuple>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/core/schedule_index.hpp"
#include "pipescope/sim/simulator.hpp"

using namespace pipescope;

namespace {

ScheduleParams params(int ranks, int micro_batches, int chunks = 1) {
  ScheduleParams p;
  p.num_ranks = ranks;
  p.num_micro_batches = micro_batches;
  p.chunks = chunks;
  p.chunks_given = chunks != 1;
  return p;
}

Schedule two_ranks(std::vector<std::vector<std::string>> rank0, std::vector<std::vector<std::string>> rank1, int m) {
  Schedule s;
  s.name = "hand";
  s.num_ranks = 2;
  s.num_stages = 2;
  s.num_micro_batches = m;
  s.stage_to_rank = {0, 1};
  for (const auto& steps : {rank0, rank1}) {
    Program program;
    for (const auto& step : steps) {
      program.emplace_back();
      for (const auto& text : step) program.back().push_back(parse_action(text));
    }
    s.programs.push_back(program);
  }
  return s;
}

std::string error_of(const Schedule& schedule) {
  try {
    sim::compile(schedule);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("compile numbers the instructions as the schedule index does and pairs every transfer both ways") {
  const Schedule schedules[] = {
      make_schedule("zbv", params(4, 8)),
      make_schedule("interleaved-1f1b", params(4, 8, 2)),
      make_schedule(std::string("file:") + PIPESCOPE_SOURCE_DIR +
                        "/tests/golden/torch/schedules/ScheduleInterleaved1F1B-p4-m8.lowered.csv",
                    params(4, 8)),
  };
  for (const Schedule& schedule : schedules) {
    INFO(schedule.name);
    const sim::CompiledSchedule compiled = sim::compile(schedule);
    const ScheduleIndex index(schedule, IndexContents::NumberingOnly);
    REQUIRE(compiled.instructions.size() == index.size());
    REQUIRE(compiled.rank_begin == index.rank_begin);
    for (std::size_t i = 0; i < index.size(); ++i)
      REQUIRE(compiled.step_of(static_cast<std::int32_t>(i)) == index.step_of[i]);

    std::size_t transfer_ends = 0;
    for (std::size_t i = 0; i < compiled.instructions.size(); ++i) {
      const sim::CompiledInstruction& ci = compiled.instructions[i];
      if (!is_p2p(ci.op)) continue;
      ++transfer_ends;
      REQUIRE(ci.transfer >= 0);
      REQUIRE(ci.transfer < static_cast<std::int32_t>(compiled.transfers.size()));
      const sim::CompiledTransfer& t = compiled.transfers[ci.transfer];
      REQUIRE((is_send(ci.op) ? t.send_index : t.recv_index) == static_cast<std::int32_t>(i));
    }
    REQUIRE(transfer_ends == 2 * compiled.transfers.size());

    // Per channel (kind, from stage, to stage), the receives in order of the sends.
    std::map<std::tuple<bool, int, int>, int> sends_seen;
    std::map<std::tuple<bool, int, int>, std::vector<std::int32_t>> receives;
    for (std::size_t i = 0; i < compiled.instructions.size(); ++i) {
      const sim::CompiledInstruction& ci = compiled.instructions[i];
      if (!is_recv(ci.op)) continue;
      const sim::CompiledTransfer& t = compiled.transfers[ci.transfer];
      const sim::CompiledInstruction& send = compiled.instructions[t.send_index];
      receives[{ci.op == Op::RecvGrad, send.stage, ci.stage}].push_back(static_cast<std::int32_t>(i));
    }
    for (const sim::CompiledTransfer& t : compiled.transfers) {
      const sim::CompiledInstruction& send = compiled.instructions[t.send_index];
      const sim::CompiledInstruction& recv = compiled.instructions[t.recv_index];
      REQUIRE(send.micro_batch == recv.micro_batch);
      REQUIRE(compiled.rank_of_instruction(t.send_index) == t.from_rank);
      REQUIRE(compiled.rank_of_instruction(t.recv_index) == t.to_rank);
      REQUIRE(compiled.links[t.link] == std::make_pair(t.from_rank, t.to_rank));
    }
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(compiled.instructions.size()); ++i) {
      const sim::CompiledInstruction& ci = compiled.instructions[i];
      if (!is_send(ci.op)) continue;
      const sim::CompiledTransfer& t = compiled.transfers[ci.transfer];
      const auto channel = std::make_tuple(ci.op == Op::SendGrad, ci.stage, compiled.instructions[t.recv_index].stage);
      const int k = sends_seen[channel]++;
      REQUIRE(receives[channel].at(k) == t.recv_index);
    }
  }
}

TEST_CASE("compile names the place of an unmatched send and of a receive matched with another micro-batch") {
  REQUIRE(error_of(two_ranks({{"0F0", "0SEND_F0"}}, {{"1F0"}}, 1)) ==
          "rank 0, step 0, instruction 0SEND_F0: no matching receive");
  REQUIRE(
      error_of(two_ranks({{"0F0", "0SEND_F0"}, {"0F1", "0SEND_F1"}}, {{"1RECV_F1", "1F1"}, {"1RECV_F0", "1F0"}}, 2)) ==
      "rank 1, step 0, instruction 1RECV_F1: matched in order with rank 0, step 0, instruction 0SEND_F0, which "
      "sends another micro-batch");
}

TEST_CASE("compile names a receive with no send, and the first problem in matching order") {
  REQUIRE(error_of(two_ranks({{"0F0"}}, {{"1RECV_F0", "1F0"}}, 1)) ==
          "rank 1, step 0, instruction 1RECV_F0: no matching send");
  // One channel both pairs micro-batches wrongly (its first send) and misses a receive (its
  // third): matching meets the pairing first.
  REQUIRE(error_of(two_ranks({{"0F0", "0SEND_F0"}, {"0F1", "0SEND_F1"}, {"0F2", "0SEND_F2"}},
                             {{"1RECV_F1", "1F1"}, {"1RECV_F0", "1F0"}}, 3)) ==
          "rank 1, step 0, instruction 1RECV_F1: matched in order with rank 0, step 0, instruction 0SEND_F0, which "
          "sends another micro-batch");
}

TEST_CASE("compile keeps the numbers of idle steps") {
  const Schedule schedule = two_ranks({{}, {"0F0", "0SEND_F0"}, {}, {"0F1", "0SEND_F1"}, {}},
                                      {{}, {}, {"1RECV_F0", "1F0"}, {"1RECV_F1", "1F1"}}, 2);
  const sim::CompiledSchedule compiled = sim::compile(schedule);
  const ScheduleIndex index(schedule, IndexContents::NumberingOnly);
  for (std::size_t i = 0; i < index.size(); ++i)
    REQUIRE(compiled.step_of(static_cast<std::int32_t>(i)) == index.step_of[i]);
  REQUIRE(compiled.rank_first_step == std::vector<std::int32_t>{0, 5, 9});
}

TEST_CASE("compile of a compute order gives what compile of its lowered schedule gives") {
  const std::vector<ScheduleParams> sizes = {params(1, 2),     params(2, 4),     params(4, 8),
                                             params(4, 12, 3), params(8, 16, 2), params(3, 9)};
  std::set<std::string> covered;
  for (const GeneratorInfo& info : ScheduleRegistry::instance().entries()) {
    if (!info.make_order) continue;
    for (const ScheduleParams& size : sizes) {
      INFO(info.name << " p=" << size.num_ranks << " m=" << size.num_micro_batches << " v=" << size.chunks);
      std::optional<ComputeOrder> order;
      try {
        order = make_compute_order(info.name, size);
      } catch (const ScheduleError&) {
        // A size the generator refuses: make_schedule refuses it with the same words.
        REQUIRE_THROWS_AS(make_schedule(info.name, size), ScheduleError);
        continue;
      }
      REQUIRE(order);
      const sim::CompiledSchedule expected = sim::compile(lower(*order));
      const sim::CompiledSchedule got = sim::compile(std::move(*order));
      REQUIRE(got.name == expected.name);
      REQUIRE(got.num_ranks == expected.num_ranks);
      REQUIRE(got.num_stages == expected.num_stages);
      REQUIRE(got.num_micro_batches == expected.num_micro_batches);
      REQUIRE(got.stage_to_rank == expected.stage_to_rank);
      REQUIRE(got.instructions == expected.instructions);
      REQUIRE(got.rank_begin == expected.rank_begin);
      REQUIRE(got.step_begin == expected.step_begin);
      REQUIRE(got.rank_first_step == expected.rank_first_step);
      REQUIRE(got.transfers == expected.transfers);
      REQUIRE(got.links == expected.links);
      REQUIRE(got.receives_post_only == expected.receives_post_only);
      covered.insert(info.name);
    }
  }
  // Every built-in compute-order schedule was compared at some size (other tests of this binary
  // register schedules of their own, which were compared too when they ran first).
  const std::set<std::string> built_in = {
      "gpipe", "1f1b", "interleaved-1f1b", "interleaved-1f1b@0.1", "interleaved-1f1b@0.10", "looped-bfs", "zb-h1",
      "zb-h2", "zbv",  "dualpipev"};
  REQUIRE(std::includes(covered.begin(), covered.end(), built_in.begin(), built_in.end()));
}
