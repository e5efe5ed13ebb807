// The programs of overlapped F&B steps (exec/src/runtime/paired_steps.cpp): each marked pair made
// adjacent in one step, validated over every rank.
// Expected:
// - dualpipev, 2 ranks x 4 micro-batches (3 pairs per rank): 6 pairs; the paired schedule is
//   valid, keeps every program's instructions (the same multiset) and step count, and each
//   marked forward is followed at once by a backward (starts_pair), the forward's own send after
//   the backward, the backward's receive before the forward.
// - dualpipev, 3 ranks x 8 micro-batches: valid, as many pairs as marked forwards.
// - torch's CSV: an OVERLAP_F_B cell's forward is marked, no other.
// - 1f1b marks none: nothing. A hand-made pair whose forward's send a peer needs before it sends
//   the backward's gradient (the paired order would wait forever): nothing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "pipescope/core/registry.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "pipescope/core/validator.hpp"
#include "runtime/paired_steps.hpp"

using pipescope::Instruction;
using pipescope::Op;
using pipescope::Schedule;
using pipescope::exec::runtime::starts_pair;
using pipescope::exec::runtime::with_paired_steps;

namespace {

Schedule generated(const std::string& name, int ranks, int micro_batches, int chunks) {
  pipescope::ScheduleParams params;
  params.num_ranks = ranks;
  params.num_micro_batches = micro_batches;
  params.chunks = chunks;
  return pipescope::make_schedule(name, params);
}

int marked_forwards(const Schedule& s) {
  int n = 0;
  for (const auto& program : s.programs)
    for (const auto& step : program)
      for (const auto& instr : step) n += instr.op == Op::ForwardPass && instr.overlaps_next_backward ? 1 : 0;
  return n;
}

std::vector<std::string> sorted_texts(const pipescope::Program& program) {
  std::vector<std::string> out;
  for (const auto& step : program)
    for (const auto& instr : step) out.push_back(pipescope::to_string(instr));
  std::sort(out.begin(), out.end());
  return out;
}

// Where `text` stands in `step`, or -1.
long position_in(const pipescope::Step& step, const std::string& text) {
  for (std::size_t i = 0; i < step.size(); ++i)
    if (pipescope::to_string(step[i]) == text) return static_cast<long>(i);
  return -1;
}

}  // namespace

TEST_CASE("dualpipev's pairs are made adjacent: the backward's receive first, the forward's send last") {
  const Schedule s = generated("dualpipev", 2, 4, 2);
  REQUIRE(marked_forwards(s) == 6);
  const auto paired = with_paired_steps(s);
  REQUIRE(paired);
  CHECK(paired->pairs == 6);
  CHECK_FALSE(pipescope::find_problem(paired->schedule));
  int pairs_seen = 0;
  for (std::size_t r = 0; r < s.programs.size(); ++r) {
    const auto& program = paired->schedule.programs[r];
    CHECK(program.size() == s.programs[r].size());
    CHECK(sorted_texts(program) == sorted_texts(s.programs[r]));
    for (const auto& step : program)
      for (std::size_t i = 0; i < step.size(); ++i) {
        if (step[i].op != Op::ForwardPass || !step[i].overlaps_next_backward) continue;
        REQUIRE(starts_pair(step, i));
        ++pairs_seen;
        const Instruction& f = step[i];
        const Instruction& b = step[i + 1];
        const Instruction send{Op::SendActivation, f.stage, f.micro_batch};
        const Instruction receive{Op::RecvGrad, b.stage, b.micro_batch};
        if (const long at = position_in(step, pipescope::to_string(send)); at >= 0)
          CHECK(at > static_cast<long>(i + 1));
        if (const long at = position_in(step, pipescope::to_string(receive)); at >= 0) CHECK(at < static_cast<long>(i));
      }
  }
  CHECK(pairs_seen == 6);
}

TEST_CASE("dualpipev on 3 ranks pairs every marked forward and stays valid") {
  const Schedule s = generated("dualpipev", 3, 8, 2);
  const auto paired = with_paired_steps(s);
  REQUIRE(paired);
  CHECK(paired->pairs == marked_forwards(s));
  CHECK(paired->pairs > 0);
  CHECK_FALSE(pipescope::find_problem(paired->schedule));
}

TEST_CASE("no pair: a schedule without marks, or one whose paired order would wait forever") {
  CHECK_FALSE(with_paired_steps(generated("1f1b", 2, 4, 1)));
  // Rank 0's pair is forward and backward of micro-batch 0 (marked by hand): its backward needs
  // the gradient rank 1 sends after receiving the forward's activation, which the paired order
  // would send only after the backward.
  Schedule s;
  s.name = "hand-made";
  s.num_ranks = 2;
  s.num_stages = 2;
  s.num_micro_batches = 1;
  s.stage_to_rank = {0, 1};
  auto action = [](const char* text) { return pipescope::parse_action(text); };
  Instruction forward = action("0F0");
  forward.overlaps_next_backward = true;
  s.programs = {{{forward, action("0SEND_F0")}, {action("0RECV_B0"), action("0B0")}},
                {{action("1RECV_F0"), action("1F0")}, {action("1B0"), action("1SEND_B0")}}};
  REQUIRE_FALSE(pipescope::find_problem(s));
  CHECK_FALSE(with_paired_steps(s));
}

TEST_CASE("torch's OVERLAP_F_B cell marks its forward as a pair's") {
  const Schedule s = pipescope::parse_torch_csv(
      "0F0,0F1,(0F2;0B0)OVERLAP_F_B,0B1,0B2\n"
      "1F0,1B0,(1F1;1B1)OVERLAP_F_B,1F2,1B2\n",
      "overlap.csv");
  std::vector<std::string> marked;
  for (const auto& program : s.programs)
    for (const auto& step : program)
      for (const auto& instr : step)
        if (instr.overlaps_next_backward) marked.push_back(pipescope::to_string(instr));
  CHECK(marked == std::vector<std::string>{"0F2", "1F1"});
}
