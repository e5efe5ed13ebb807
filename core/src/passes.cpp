#include "pipescope/core/passes.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "lowering_support.hpp"
#include "pipescope/core/errors.hpp"

namespace pipescope {
namespace lowering {

void check_shape(const Schedule& schedule, std::string_view pass) {
  const std::string who = std::string(pass) + ": schedule '" + schedule.name + "'";
  if (schedule.num_ranks < 1) throw ScheduleError(who + ": needs at least one rank");
  if (schedule.num_stages < 1) throw ScheduleError(who + ": needs at least one stage");
  if (schedule.num_micro_batches < 1) throw ScheduleError(who + ": needs at least one micro-batch");
  if (static_cast<int>(schedule.programs.size()) != schedule.num_ranks)
    throw ScheduleError(who + ": has " + std::to_string(schedule.programs.size()) +
                        " programs for " + std::to_string(schedule.num_ranks) + " ranks");
  if (static_cast<int>(schedule.stage_to_rank.size()) != schedule.num_stages)
    throw ScheduleError(who + ": stage_to_rank has " + std::to_string(schedule.stage_to_rank.size()) +
                        " entries for " + std::to_string(schedule.num_stages) + " stages");
  for (int s = 0; s < schedule.num_stages; ++s) {
    const int r = schedule.stage_to_rank[s];
    if (r < 0 || r >= schedule.num_ranks)
      throw ScheduleError(who + ": stage " + std::to_string(s) + " is placed on rank " +
                          std::to_string(r) + ", which does not exist");
  }
}

void refuse_instruction(const Schedule& schedule, int rank, int step, const Instruction& instr) {
  if (instr.stage < 0 || instr.stage >= schedule.num_stages)
    throw ScheduleError(place(schedule, rank, step, instr) + ": stage out of range 0.." +
                        std::to_string(schedule.num_stages - 1));
  if (schedule.stage_to_rank[instr.stage] != rank)
    throw ScheduleError(place(schedule, rank, step, instr) + ": stage " + std::to_string(instr.stage) +
                        " is placed on rank " + std::to_string(schedule.stage_to_rank[instr.stage]));
  throw ScheduleError(place(schedule, rank, step, instr) + ": micro-batch out of range 0.." +
                      std::to_string(schedule.num_micro_batches - 1));
}

}  // namespace lowering

using namespace lowering;

namespace {

// ---- group_steps ---------------------------------------------------------------------------

// A compute with the receives and loads just before it and the sends (and end-of-batch
// collectives) just after it: the instructions that share one time slot.
struct Unit {
  std::vector<Instruction> instrs;
  int compute = -1;  // index into instrs, -1 when the unit holds no compute
};

// The compute of a step that forms one unit by itself (receives and loads, at most one
// compute, then sends and collectives), or -2 when the step must be split or joined.
int whole_unit_compute(const Step& step) {
  int compute = -1;
  for (int i = 0; i < static_cast<int>(step.size()); ++i) {
    const Op op = step[i].op;
    if (is_compute(op)) {
      if (compute >= 0) return -2;
      compute = i;
    } else if ((is_recv(op) || op == Op::LoadMicroBatch) && compute >= 0) {
      return -2;
    }
  }
  return compute;
}

std::vector<Unit> units_of(Program& program) {
  std::vector<Unit> units;
  units.reserve(program.size());
  Unit current;
  auto close = [&] {
    if (!current.instrs.empty()) units.push_back(std::move(current));
    current = Unit{};
  };
  for (Step& step : program) {
    if (step.empty()) continue;
    // The usual case after add_send_recv: the step already is a unit and moves as a whole.
    // Sends in later steps still join it, so it stays open as `current`.
    const int compute = whole_unit_compute(step);
    if (compute >= 0 && (current.instrs.empty() || current.compute >= 0)) {
      close();
      current = Unit{std::move(step), compute};
      continue;
    }
    for (const Instruction& instr : step) {
      if (is_compute(instr.op)) {
        if (current.compute >= 0) close();
        current.compute = static_cast<int>(current.instrs.size());
        current.instrs.push_back(instr);
      } else if (is_recv(instr.op) || instr.op == Op::LoadMicroBatch) {
        if (current.compute >= 0) close();
        current.instrs.push_back(instr);
      } else {
        current.instrs.push_back(instr);  // sends and collectives follow what they finish
      }
    }
  }
  close();
  return units;
}

// group_steps' units as the dry run reads them.
struct StepUnits {
  const Schedule& schedule;
  const std::vector<std::vector<Unit>>& units;
  std::size_t size(int rank) const { return units[rank].size(); }
  const Instruction* compute(int rank, std::size_t u) const {
    const Unit& unit = units[rank][u];
    return unit.compute >= 0 ? &unit.instrs[unit.compute] : nullptr;
  }
  void check(int rank, std::size_t u) const {
    for (const Instruction& instr : units[rank][u].instrs) check_instruction(schedule, rank, static_cast<int>(u), instr);
  }
};

}  // namespace

namespace lowering {

Schedule schedule_shell(const ComputeOrder& order) {
  Schedule schedule;
  schedule.name = order.name;
  schedule.num_ranks = order.num_ranks;
  schedule.num_stages = order.num_stages;
  schedule.num_micro_batches = order.num_micro_batches;
  schedule.stage_to_rank = order.stage_to_rank;
  if (static_cast<int>(order.per_rank.size()) != order.num_ranks)
    throw ScheduleError("from_compute_order: schedule '" + order.name + "' has " +
                        std::to_string(order.per_rank.size()) + " rank orders for " +
                        std::to_string(order.num_ranks) + " ranks");
  schedule.programs.resize(order.per_rank.size());
  check_shape(schedule, "from_compute_order");
  return schedule;
}

void check_compute_order(const Schedule& shell, const ComputeOrder& order) {
  for (int r = 0; r < order.num_ranks; ++r) {
    const auto& computes = order.per_rank[r];
    for (std::size_t step = 0; step < computes.size(); ++step) {
      const Instruction& instr = computes[step];
      if (!is_compute(instr.op))
        throw ScheduleError("from_compute_order: " + place(shell, r, static_cast<int>(step), instr) +
                            ": a compute order holds only F, B, I and W");
      check_instruction(shell, r, static_cast<int>(step), instr);
    }
  }
}

}  // namespace lowering

Schedule from_compute_order(const ComputeOrder& order) {
  Schedule schedule = schedule_shell(order);
  check_compute_order(schedule, order);
  for (int r = 0; r < order.num_ranks; ++r) {
    Program& program = schedule.programs[r];
    program.reserve(order.per_rank[r].size());
    for (const Instruction& instr : order.per_rank[r]) {
      // Room for the load, receive and send the later passes put around it.
      Step one;
      one.reserve(4);
      one.push_back(instr);
      program.push_back(std::move(one));
    }
  }
  return schedule;
}

void add_data_loads(Schedule& schedule) {
  check_shape(schedule, "add_data_loads");
  std::vector<char> loaded(pair_count(schedule), 0);
  for (int r = 0; r < schedule.num_ranks; ++r)
    for (int t = 0; t < static_cast<int>(schedule.programs[r].size()); ++t)
      for (const Instruction& instr : schedule.programs[r][t])
        if (instr.op == Op::LoadMicroBatch) {
          check_instruction(schedule, r, t, instr);
          loaded[pair_index(schedule, instr)] = 1;
        }
  const int last_stage = schedule.num_stages - 1;
  for (int r = 0; r < schedule.num_ranks; ++r) {
    for (int t = 0; t < static_cast<int>(schedule.programs[r].size()); ++t) {
      Step& step = schedule.programs[r][t];
      for (std::size_t i = 0; i < step.size(); ++i) {
        const Instruction instr = step[i];
        if (instr.op != Op::ForwardPass || (instr.stage != 0 && instr.stage != last_stage)) continue;
        check_instruction(schedule, r, t, instr);
        char& done = loaded[pair_index(schedule, instr)];
        if (done) continue;
        done = 1;
        step.insert(step.begin() + static_cast<std::ptrdiff_t>(i), {Op::LoadMicroBatch, instr.stage, instr.micro_batch, instr.buffer});
        ++i;
      }
    }
  }
}

void add_send_recv(Schedule& schedule) {
  check_shape(schedule, "add_send_recv");
  const std::size_t pairs = pair_count(schedule);
  // Transfers already present (a partial file) are kept and not added twice.
  std::vector<char> present(4 * pairs, 0);
  auto slot = [&](Op op) -> std::size_t {
    switch (op) {
      case Op::SendActivation: return 0;
      case Op::RecvActivation: return 1;
      case Op::SendGrad: return 2;
      default: return 3;
    }
  };
  for (int r = 0; r < schedule.num_ranks; ++r)
    for (int t = 0; t < static_cast<int>(schedule.programs[r].size()); ++t)
      for (const Instruction& instr : schedule.programs[r][t])
        if (is_p2p(instr.op)) {
          check_instruction(schedule, r, t, instr);
          present[slot(instr.op) * pairs + pair_index(schedule, instr)] = 1;
        }
  auto absent = [&](Op op, const Instruction& compute) {
    return !present[slot(op) * pairs + pair_index(schedule, compute)];
  };
  for (int r = 0; r < schedule.num_ranks; ++r) {
    for (int t = 0; t < static_cast<int>(schedule.programs[r].size()); ++t) {
      Step& step = schedule.programs[r][t];
      // The sends of a step's computes follow its last compute: a step with two computes is
      // torch's OVERLAP_F_B, one action whose results leave when both are done.
      std::vector<Instruction> sends;
      std::size_t after_last_compute = 0;
      for (std::size_t i = 0; i < step.size(); ++i) {
        const Instruction instr = step[i];
        if (!is_compute(instr.op)) continue;
        check_instruction(schedule, r, t, instr);
        const int s = instr.stage;
        const bool forward = instr.op == Op::ForwardPass;
        const bool backward = is_full_or_input_backward(instr.op);
        auto insert_at = [&](std::size_t at, Op op) {
          step.insert(step.begin() + static_cast<std::ptrdiff_t>(at), {op, s, instr.micro_batch, instr.buffer});
        };
        if (forward && crosses_ranks(schedule, s, s - 1) && absent(Op::RecvActivation, instr)) insert_at(i++, Op::RecvActivation);
        if (backward && crosses_ranks(schedule, s, s + 1) && absent(Op::RecvGrad, instr)) insert_at(i++, Op::RecvGrad);
        if (forward && crosses_ranks(schedule, s, s + 1) && absent(Op::SendActivation, instr))
          sends.push_back({Op::SendActivation, s, instr.micro_batch, instr.buffer});
        if (backward && crosses_ranks(schedule, s, s - 1) && absent(Op::SendGrad, instr))
          sends.push_back({Op::SendGrad, s, instr.micro_batch, instr.buffer});
        after_last_compute = i + 1;
      }
      step.insert(step.begin() + static_cast<std::ptrdiff_t>(after_last_compute), sends.begin(), sends.end());
    }
  }
}

void group_steps(Schedule& schedule) {
  check_shape(schedule, "group_steps");
  std::vector<std::vector<Unit>> units(schedule.num_ranks);
  for (int r = 0; r < schedule.num_ranks; ++r) units[r] = units_of(schedule.programs[r]);
  std::vector<std::vector<int>> slots;
  try {
    slots = UnitDryRun(schedule, StepUnits{schedule, units}).run();
  } catch (...) {
    // The steps were moved into units: give them back, one unit per step, in order.
    for (int r = 0; r < schedule.num_ranks; ++r) {
      schedule.programs[r].clear();
      for (Unit& unit : units[r]) schedule.programs[r].push_back(std::move(unit.instrs));
    }
    throw;
  }
  int num_steps = 0;
  for (const auto& rank_slots : slots)
    if (!rank_slots.empty()) num_steps = std::max(num_steps, rank_slots.back() + 1);
  for (int r = 0; r < schedule.num_ranks; ++r) {
    Program program(static_cast<std::size_t>(num_steps));
    for (std::size_t u = 0; u < units[r].size(); ++u) program[slots[r][u]] = std::move(units[r][u].instrs);
    schedule.programs[r] = std::move(program);
  }
}

void assign_buffers(Schedule& schedule) {
  check_shape(schedule, "assign_buffers");
  const int m = schedule.num_micro_batches;
  for (int r = 0; r < schedule.num_ranks; ++r) {
    Program& program = schedule.programs[r];
    bool has_buffers = false;
    for (const Step& step : program)
      for (const Instruction& instr : step) has_buffers = has_buffers || instr.buffer != kNone;
    if (has_buffers) continue;  // ids given by the file or the generator are kept

    // Local numbering of this rank's stages keeps the tables at (stages of rank) x m.
    std::vector<int> local_of_stage(schedule.num_stages, -1);
    int num_local = 0;
    for (int s = 0; s < schedule.num_stages; ++s)
      if (schedule.stage_to_rank[s] == r) local_of_stage[s] = num_local++;
    const std::size_t local_pairs = static_cast<std::size_t>(num_local) * m;
    auto key_of = [&](int t, const Instruction& instr) {
      check_instruction(schedule, r, t, instr);
      return static_cast<std::size_t>(local_of_stage[instr.stage]) * m + instr.micro_batch;
    };

    std::vector<std::size_t> last_use(local_pairs, 0);
    std::size_t position = 0;
    for (int t = 0; t < static_cast<int>(program.size()); ++t)
      for (const Instruction& instr : program[t]) {
        if (needs_micro_batch(instr.op)) last_use[key_of(t, instr)] = position;
        ++position;
      }

    std::vector<int> buffer_of(local_pairs, kNone);
    std::vector<StageBufferIds> ids(num_local);
    position = 0;
    for (int t = 0; t < static_cast<int>(program.size()); ++t)
      for (Instruction& instr : program[t]) {
        if (needs_micro_batch(instr.op)) {
          const std::size_t key = key_of(t, instr);
          StageBufferIds& stage_ids = ids[local_of_stage[instr.stage]];
          if (buffer_of[key] == kNone) buffer_of[key] = stage_ids.take();
          instr.buffer = buffer_of[key];
          if (last_use[key] == position) stage_ids.release(buffer_of[key]);
        }
        ++position;
      }
  }
}

void add_optimizer_step(Schedule& schedule) {
  check_shape(schedule, "add_optimizer_step");
  if (!schedule.is_training()) return;
  const int stages = schedule.num_stages;
  std::vector<char> present(3 * static_cast<std::size_t>(stages), 0);
  auto slot = [](Op op) -> int {
    return op == Op::ReduceTiedGrads ? 0 : op == Op::ReduceGrads ? 1 : op == Op::OptimizerStep ? 2 : -1;
  };
  for (int r = 0; r < schedule.num_ranks; ++r)
    for (int t = 0; t < static_cast<int>(schedule.programs[r].size()); ++t)
      for (const Instruction& instr : schedule.programs[r][t])
        if (slot(instr.op) >= 0) {
          check_instruction(schedule, r, t, instr);
          present[slot(instr.op) * stages + instr.stage] = 1;
        }
  for (int r = 0; r < schedule.num_ranks; ++r) {
    Program& program = schedule.programs[r];
    if (program.empty()) program.emplace_back();
    Step& last = program.back();
    // Tied reductions of all stages first, then the data-parallel reductions, then the
    // optimizer: DeepSpeed's order, stage by stage.
    for (Op op : {Op::ReduceTiedGrads, Op::ReduceGrads, Op::OptimizerStep})
      for (int s = 0; s < stages; ++s)
        if (schedule.stage_to_rank[s] == r && !present[slot(op) * stages + s])
          last.push_back({op, s, kNone});
  }
}

void merge_backward(Schedule& schedule) {
  check_shape(schedule, "merge_backward");
  for (int r = 0; r < schedule.num_ranks; ++r) {
    Program& program = schedule.programs[r];
    // Position of every compute, in program order.
    std::vector<std::pair<int, int>> computes;
    for (int t = 0; t < static_cast<int>(program.size()); ++t)
      for (int i = 0; i < static_cast<int>(program[t].size()); ++i)
        if (is_compute(program[t][i].op)) computes.emplace_back(t, i);
    std::vector<char> step_lost_weight(program.size(), 0);
    std::vector<std::pair<int, int>> merged_weights;
    for (std::size_t c = 0; c + 1 < computes.size(); ++c) {
      Instruction& input = program[computes[c].first][computes[c].second];
      Instruction& weight = program[computes[c + 1].first][computes[c + 1].second];
      if (input.op == Op::BackwardInput && weight.op == Op::BackwardWeight &&
          input.stage == weight.stage && input.micro_batch == weight.micro_batch) {
        input.op = Op::BackwardPass;
        merged_weights.push_back(computes[c + 1]);
        step_lost_weight[computes[c + 1].first] = 1;
        ++c;
      }
    }
    if (merged_weights.empty()) continue;
    Program rebuilt;
    rebuilt.reserve(program.size());
    std::size_t next_removed = 0;  // merged_weights is in program order
    for (std::size_t t = 0; t < program.size(); ++t) {
      Step step;
      for (int i = 0; i < static_cast<int>(program[t].size()); ++i) {
        if (next_removed < merged_weights.size() &&
            merged_weights[next_removed] == std::make_pair(static_cast<int>(t), i)) {
          ++next_removed;
          continue;
        }
        step.push_back(program[t][i]);
      }
      // A step that held only the merged weight pass disappears; idle steps stay.
      if (step.empty() && step_lost_weight[t]) continue;
      rebuilt.push_back(std::move(step));
    }
    program = std::move(rebuilt);
  }
}

void complete_schedule(Schedule& schedule) {
  add_data_loads(schedule);
  add_send_recv(schedule);
  assign_buffers(schedule);
  add_optimizer_step(schedule);
}

}  // namespace pipescope
