// torch.distributed.pipelining's schedule CSV (SPEC.md section 4): one row per rank, one action
// per cell, an empty cell an idle slot. The file has no header, so the shape of the schedule
// (ranks, stages, micro-batches, placement) is derived from the cells.
//
// Every cell torch 2.15 writes is read (instruction.hpp: the wait points, UNSHARD/RESHARD, an
// OVERLAP_F_B cell as its two actions in one step), and the schedule gets torch's communication
// semantics: a RECV posts the receive, the compute that needs the data waits for it.
//
// The writer writes torch's lowered form, which torch 2.15's `_load_csv(..., format=
// "compute_comms")` reads and its runtime runs: every action, no idle slots (that reader refuses
// empty cells), each REDUCE_GRAD followed by its WAIT_REDUCE_GRAD and every send waited (at the
// end of the row when the schedule has no wait for it), receives posted in the order their
// sender posts the sends (torch_message_order.hpp). It omits the ops torch does not model
// (LoadMicroBatch, ReduceTiedGrads, OptimizerStep); reading the file back puts them in again
// through complete_schedule. A send or receive with a non-default peer (a skip connection) has
// no torch spelling and is refused by the writer rather than silently rerouted.
#include <algorithm>
#include <climits>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/passes.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "torch_message_order.hpp"

namespace pipescope {
namespace {

std::string_view trim(std::string_view text) {
  auto is_space = [](char c) { return c == ' ' || c == '\t'; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// Splits into lines, accepting \n, \r\n and \r, and dropping blank lines at the end only:
// a blank line in the middle is a rank and is kept (and refused later, as it holds no stage).
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n' || text[i] == '\r') {
      lines.push_back(text.substr(start, i - start));
      if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < text.size()) lines.push_back(text.substr(start));
  while (!lines.empty() && trim(lines.back()).empty()) lines.pop_back();
  return lines;
}

std::vector<std::string_view> split_cells(std::string_view line) {
  std::vector<std::string_view> cells;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= line.size(); ++i) {
    if (i == line.size() || line[i] == ',') {
      cells.push_back(trim(line.substr(start, i - start)));
      start = i + 1;
    }
  }
  return cells;
}

// Input text for a one-line message: non-printable bytes shown as '?', long text cut.
std::string shown(std::string_view text, std::size_t max_chars = 40) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < max_chars; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    out += (c < 0x20 || c >= 0x7f) ? '?' : static_cast<char>(c);
  }
  if (text.size() > max_chars) out += "...";
  return out;
}

std::size_t count_transfers(const Schedule& schedule) {
  std::size_t n = 0;
  for (const Program& program : schedule.programs)
    for (const Step& step : program)
      for (const Instruction& instr : step) n += is_p2p(instr.op);
  return n;
}

struct CellPlace {
  int row = 0;     // 0-based rank
  int column = 0;  // 0-based
};

std::string place_text(const std::string& source, CellPlace place) {
  return source + ": row " + std::to_string(place.row + 1) + " (rank " + std::to_string(place.row) + "), column " +
         std::to_string(place.column + 1);
}

// One cell: its action, or an OVERLAP_F_B's two actions in order.
Step parse_csv_cell(std::string_view cell, const std::string& source, CellPlace place) {
  std::string_view action = cell;
  if (action.size() >= 2 && action.front() == '"' && action.back() == '"')
    action = trim(action.substr(1, action.size() - 2));
  try {
    Step step = parse_cell(action);
    for (const Instruction& instr : step)
      if (instr.micro_batch == INT_MAX)
        throw ScheduleError("bad action '" + shown(action) + "': micro-batch number too large");
    // An OVERLAP_F_B cell is one overlapped F&B step, as dualpipev's marked pairs: the simulator
    // and pprun read the mark (torch's own runtime runs the two one after the other).
    if (step.size() == 2) step.front().overlaps_next_backward = true;
    return step;
  } catch (const ScheduleError& e) {
    throw ScheduleError(place_text(source, place) + ": " + shown(e.what(), 200));
  }
}

// What reading the rows found: the number of actions, the largest stage and micro-batch, and
// where that micro-batch was seen.
struct CsvTally {
  std::size_t action_count = 0;
  int max_stage = -1;
  int max_micro_batch = -1;
  CellPlace max_micro_batch_place;
};

// Every row's cells parsed into the rank's program, an empty cell an idle slot.
CsvTally read_csv_rows(const std::vector<std::string_view>& lines, const std::string& source, Schedule& schedule) {
  CsvTally tally;
  for (std::size_t r = 0; r < lines.size(); ++r) {
    const std::vector<std::string_view> cells = split_cells(lines[r]);
    Program& program = schedule.programs[r];
    program.reserve(cells.size());
    for (std::size_t c = 0; c < cells.size(); ++c) {
      if (cells[c].empty()) {
        program.emplace_back();  // an idle slot
        continue;
      }
      const CellPlace place{static_cast<int>(r), static_cast<int>(std::min<std::size_t>(c, INT_MAX))};
      Step step = parse_csv_cell(cells[c], source, place);
      for (const Instruction& instr : step) {
        ++tally.action_count;
        tally.max_stage = std::max(tally.max_stage, instr.stage);
        if (instr.micro_batch > tally.max_micro_batch) {
          tally.max_micro_batch = instr.micro_batch;
          tally.max_micro_batch_place = place;
        }
      }
      program.push_back(std::move(step));
    }
  }
  return tally;
}

// The numbers of stages and micro-batches, refused where the file cannot hold them.
void set_csv_shape(Schedule& schedule, const CsvTally& tally, const std::string& source) {
  if (tally.action_count == 0) throw ScheduleError(source + ": no actions: every cell is empty");
  // Every stage must be held by some row, so a stage number beyond the number of actions
  // cannot be right; refusing it here also keeps the allocations below bounded by the input.
  if (static_cast<std::size_t>(tally.max_stage) >= tally.action_count) {
    std::vector<bool> present(tally.action_count, false);
    for (const auto& program : schedule.programs)
      for (const auto& step : program)
        for (const auto& instr : step)
          if (static_cast<std::size_t>(instr.stage) < tally.action_count) present[instr.stage] = true;
    const auto missing = std::find(present.begin(), present.end(), false) - present.begin();
    throw ScheduleError(source + ": stage " + std::to_string(missing) + " appears on no row (stages go up to " +
                        std::to_string(tally.max_stage) + ")");
  }
  schedule.num_stages = tally.max_stage + 1;
  schedule.num_micro_batches = tally.max_micro_batch + 1;
  if (schedule.num_micro_batches == 0)
    throw ScheduleError(source + ": no per-micro-batch action (F, B, I, W, SEND_*, RECV_*) in the file");
  if (static_cast<std::size_t>(tally.max_micro_batch) >= tally.action_count)
    throw ScheduleError(place_text(source, tally.max_micro_batch_place) + ": micro-batch " +
                        std::to_string(tally.max_micro_batch) + " cannot be right: the file has only " +
                        std::to_string(tally.action_count) +
                        " actions, and every micro-batch needs a forward on every stage");
}

// Each stage's rank: the row it appears on, one row per stage and at least one stage per row.
void place_csv_stages(Schedule& schedule, const std::string& source, int max_stage) {
  schedule.stage_to_rank.assign(static_cast<std::size_t>(schedule.num_stages), kNone);
  std::vector<CellPlace> first_place(static_cast<std::size_t>(schedule.num_stages));  // where each was first seen
  for (std::size_t r = 0; r < schedule.programs.size(); ++r) {
    const Program& program = schedule.programs[r];
    for (std::size_t c = 0; c < program.size(); ++c) {
      for (const Instruction& instr : program[c]) {
        int& owner = schedule.stage_to_rank[instr.stage];
        if (owner == kNone) {
          owner = static_cast<int>(r);
          first_place[instr.stage] = {static_cast<int>(r), static_cast<int>(c)};
        } else if (owner != static_cast<int>(r)) {
          const CellPlace first = first_place[instr.stage];
          throw ScheduleError(place_text(source, {static_cast<int>(r), static_cast<int>(c)}) + ": stage " +
                              std::to_string(instr.stage) + " is already on row " + std::to_string(first.row + 1) +
                              " (rank " + std::to_string(first.row) + ", column " + std::to_string(first.column + 1) +
                              "); a stage belongs to one rank");
        }
      }
    }
  }
  for (int s = 0; s < schedule.num_stages; ++s)
    if (schedule.stage_to_rank[s] == kNone)
      throw ScheduleError(source + ": stage " + std::to_string(s) + " appears on no row (stages go up to " +
                          std::to_string(max_stage) + ")");
  for (int r = 0; r < schedule.num_ranks; ++r)
    if (std::find(schedule.stage_to_rank.begin(), schedule.stage_to_rank.end(), r) == schedule.stage_to_rank.end())
      throw ScheduleError(source + ": row " + std::to_string(r + 1) + " (rank " + std::to_string(r) +
                          ") holds no action; every rank needs a stage");
}

// Each (stage, micro-batch) needs a forward. Checked here, before the completion pass and the
// validator size anything by stages x micro-batches, and named by what the file shows: a
// micro-batch one row forwards and another does not (torch 2.15's Schedule1F1B order forwards
// micro-batch M on its last rank and never 0).
void check_csv_forwards(const Schedule& schedule, const std::string& source, int max_micro_batch) {
  std::vector<std::vector<int>> forwards(static_cast<std::size_t>(schedule.num_stages));
  for (const auto& program : schedule.programs)
    for (const auto& step : program)
      for (const auto& instr : step)
        if (instr.op == Op::ForwardPass) forwards[instr.stage].push_back(instr.micro_batch);
  for (auto& mbs : forwards) {
    std::sort(mbs.begin(), mbs.end());
    mbs.erase(std::unique(mbs.begin(), mbs.end()), mbs.end());
  }
  for (int s = 0; s < schedule.num_stages; ++s) {
    const auto& mbs = forwards[s];
    if (static_cast<int>(mbs.size()) == schedule.num_micro_batches) continue;
    int missing = 0;
    while (missing < static_cast<int>(mbs.size()) && mbs[missing] == missing) ++missing;
    std::string message = source + ": stage " + std::to_string(s) + " (row " +
                          std::to_string(schedule.stage_to_rank[s] + 1) + ") has no forward of micro-batch " +
                          std::to_string(missing);
    for (int other = 0; other < schedule.num_stages; ++other)
      if (std::binary_search(forwards[other].begin(), forwards[other].end(), missing)) {
        message += ", which stage " + std::to_string(other) + " (row " +
                   std::to_string(schedule.stage_to_rank[other] + 1) +
                   ") forwards: a micro-batch missing on one row or one too many on the other";
        break;
      }
    throw ScheduleError(message + " (micro-batches go up to " + std::to_string(max_micro_batch) + ")");
  }
}

}  // namespace

Schedule parse_torch_csv(std::string_view text, const std::string& source) {
  // A UTF-8 byte order mark (spreadsheets write one) is not part of the first cell.
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  const std::vector<std::string_view> lines = split_lines(text);
  if (lines.empty()) throw ScheduleError(source + ": empty file: a torch schedule CSV has one row per rank");
  if (lines.size() > static_cast<std::size_t>(INT_MAX / 2)) throw ScheduleError(source + ": too many rows");

  Schedule schedule;
  schedule.name = source;
  schedule.communication = Communication::Torch;
  schedule.num_ranks = static_cast<int>(lines.size());
  schedule.programs.resize(lines.size());
  const CsvTally tally = read_csv_rows(lines, source, schedule);
  set_csv_shape(schedule, tally, source);
  place_csv_stages(schedule, source, tally.max_stage);
  check_csv_forwards(schedule, source, tally.max_micro_batch);

  // The communication pipescope adds to a compute-only (or partial) file is posted the way
  // torch's runtime matches it.
  const std::size_t transfers_in_file = count_transfers(schedule);
  complete_schedule(schedule);
  if (count_transfers(schedule) != transfers_in_file) post_receives_in_send_order(schedule);
  return schedule;
}

std::string to_torch_csv(const Schedule& input) {
  Schedule schedule = input;
  post_receives_in_send_order(schedule);
  std::vector<std::vector<Instruction>> rows(schedule.programs.size());
  for (std::size_t r = 0; r < schedule.programs.size(); ++r) {
    const Program& program = schedule.programs[r];
    std::vector<Instruction>& row = rows[r];
    // Sends and reductions the program waits for itself; the others get their wait added.
    std::set<std::tuple<Op, int, int>> waited;
    for (const Step& step : program)
      for (const Instruction& instr : step)
        if (is_wait(instr.op)) waited.emplace(instr.op, instr.stage, instr.micro_batch);
    auto has_wait = [&](Op wait_op, const Instruction& of) {
      return waited.count({wait_op, of.stage, of.micro_batch}) > 0;
    };
    std::vector<Instruction> unwaited_sends;
    for (std::size_t t = 0; t < program.size(); ++t) {
      for (const Instruction& instr : program[t]) {
        if (instr.op == Op::LoadMicroBatch || instr.op == Op::ReduceTiedGrads || instr.op == Op::OptimizerStep)
          continue;
        if (is_p2p(instr.op) && instr.peer_stage != kNone) {
          Instruction default_peer = instr;
          default_peer.peer_stage = kNone;
          if (resolved_peer_stage(default_peer) != instr.peer_stage)
            throw ScheduleError("rank " + std::to_string(r) + ", step " + std::to_string(t) + ", instruction " +
                                to_string(instr) + ": its peer is stage " + std::to_string(instr.peer_stage) +
                                ", which torch's CSV cannot express (actions always go to the neighbouring stage)");
        }
        row.push_back(instr);
        if (instr.op == Op::ReduceGrads && !has_wait(Op::WaitReduceGrads, {Op::WaitReduceGrads, instr.stage, kNone}))
          row.push_back({Op::WaitReduceGrads, instr.stage, kNone});
        const Op wait_op = instr.op == Op::SendActivation ? Op::WaitSendActivation : Op::WaitSendGrad;
        if (is_send(instr.op) && !has_wait(wait_op, instr))
          unwaited_sends.push_back({wait_op, instr.stage, instr.micro_batch});
      }
    }
    // pipescope's own rule never waits for a send; torch's runtime wants every send waited,
    // and the end of the program is where its own lowering waits for the last ones.
    row.insert(row.end(), unwaited_sends.begin(), unwaited_sends.end());
  }

  std::string out;
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (i) out += ',';
      out += to_string(row[i]);
    }
    out += '\n';
  }
  return out;
}

}  // namespace pipescope
