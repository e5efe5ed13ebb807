// Making each overlapped F&B pair adjacent in one step (paired_steps.hpp).
#include "runtime/paired_steps.hpp"

#include <utility>
#include <vector>

#include "pipescope/core/validator.hpp"

namespace pipescope::exec::runtime {
namespace {

struct ProgramPlace {
  std::size_t step = 0;
  std::size_t index = 0;
};

// The compute after `at` in program order, if any.
std::optional<ProgramPlace> next_compute_after(const Program& program, ProgramPlace at) {
  std::size_t index = at.index + 1;
  for (std::size_t t = at.step; t < program.size(); ++t, index = 0)
    for (std::size_t i = index; i < program[t].size(); ++i)
      if (is_compute(program[t][i].op)) return ProgramPlace{t, i};
  return std::nullopt;
}

// The forward's own sends (and torch's waits for them) leave after both passes.
bool is_send_of_forward(const Instruction& instr, const Instruction& forward) {
  return (instr.op == Op::SendActivation || instr.op == Op::WaitSendActivation) && instr.stage == forward.stage &&
         instr.micro_batch == forward.micro_batch;
}

// Rewrites the steps from the forward at `f` to the backward at `b` into step f.step: the
// instructions before the forward, what stood between the two that is not the forward's sends,
// the forward, the backward, the forward's sends, then what followed the backward in its step.
// Steps between become empty, so that the program keeps its step numbers. Returns the
// backward's place.
ProgramPlace join_paired_passes(Program& program, ProgramPlace f, ProgramPlace b) {
  std::vector<Instruction> between, sends;
  for (std::size_t t = f.step; t <= b.step; ++t) {
    const std::size_t first = t == f.step ? f.index + 1 : 0;
    const std::size_t end = t == b.step ? b.index : program[t].size();
    for (std::size_t i = first; i < end; ++i)
      (is_send_of_forward(program[t][i], program[f.step][f.index]) ? sends : between).push_back(program[t][i]);
  }
  Step joined(program[f.step].begin(), program[f.step].begin() + static_cast<std::ptrdiff_t>(f.index));
  joined.insert(joined.end(), between.begin(), between.end());
  joined.push_back(program[f.step][f.index]);
  const ProgramPlace backward{f.step, joined.size()};
  joined.push_back(program[b.step][b.index]);
  joined.insert(joined.end(), sends.begin(), sends.end());
  joined.insert(joined.end(), program[b.step].begin() + static_cast<std::ptrdiff_t>(b.index) + 1,
                program[b.step].end());
  for (std::size_t t = f.step + 1; t <= b.step; ++t) program[t].clear();
  program[f.step] = std::move(joined);
  return backward;
}

int pair_marked_passes(Program& program) {
  int pairs = 0;
  for (std::size_t t = 0; t < program.size(); ++t)
    for (std::size_t i = 0; i < program[t].size(); ++i) {
      const Instruction& instr = program[t][i];
      if (instr.op != Op::ForwardPass || !instr.overlaps_next_backward) continue;
      const auto b = next_compute_after(program, {t, i});
      if (!b || !is_backward(program[b->step][b->index].op)) continue;
      i = join_paired_passes(program, {t, i}, *b).index;
      ++pairs;
    }
  return pairs;
}

}  // namespace

bool starts_pair(const Step& step, std::size_t index) {
  return index + 1 < step.size() && step[index].op == Op::ForwardPass && step[index].overlaps_next_backward &&
         is_backward(step[index + 1].op);
}

std::optional<PairedSchedule> with_paired_steps(const Schedule& schedule) {
  PairedSchedule paired{schedule, 0};
  for (Program& program : paired.schedule.programs) paired.pairs += pair_marked_passes(program);
  if (paired.pairs == 0 || find_problem(paired.schedule)) return std::nullopt;
  return paired;
}

}  // namespace pipescope::exec::runtime
