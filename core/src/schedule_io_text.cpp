// The step x rank text grid people read (torch's `_format_pipeline_order`): a header row of
// ranks, one row per step, idle slots as '.', columns aligned. Inside a cell the compute
// instruction comes first so the F/B/W pattern of the pipeline reads straight down a column;
// loads, transfers and collectives follow in their program order.
#include <algorithm>
#include <string>
#include <vector>

#include "pipescope/core/schedule_io.hpp"

namespace pipescope {
namespace {

std::string cell_text(const Step& step) {
  if (step.empty()) return ".";
  std::string text;
  auto add = [&](const Instruction& instr) {
    if (!text.empty()) text += ' ';
    text += to_string(instr);
  };
  for (const Instruction& instr : step)
    if (is_compute(instr.op)) add(instr);
  for (const Instruction& instr : step)
    if (!is_compute(instr.op)) add(instr);
  return text;
}

void append_padded(std::string& out, const std::string& text, std::size_t width, bool right_align) {
  if (right_align) out.append(width > text.size() ? width - text.size() : 0, ' ');
  out += text;
  if (!right_align) out.append(width > text.size() ? width - text.size() : 0, ' ');
}

}  // namespace

std::string to_text_grid(const Schedule& schedule) {
  const std::size_t num_ranks = schedule.programs.size();
  std::size_t num_steps = 0;
  for (const Program& program : schedule.programs) num_steps = std::max(num_steps, program.size());

  // Cells are built once and measured, then written padded to their column's width.
  std::vector<std::vector<std::string>> cells(num_ranks);
  std::vector<std::size_t> width(num_ranks);
  for (std::size_t r = 0; r < num_ranks; ++r) {
    const Program& program = schedule.programs[r];
    cells[r].reserve(program.size());
    width[r] = ("rank " + std::to_string(r)).size();
    for (const Step& step : program) {
      cells[r].push_back(cell_text(step));
      width[r] = std::max(width[r], cells[r].back().size());
    }
  }
  const std::size_t step_width = std::max<std::size_t>(4, std::to_string(num_steps ? num_steps - 1 : 0).size());

  std::string out;
  auto end_line = [&] {
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += '\n';
  };
  append_padded(out, "step", step_width, true);
  for (std::size_t r = 0; r < num_ranks; ++r) {
    out += "  ";
    append_padded(out, "rank " + std::to_string(r), width[r], false);
  }
  end_line();
  for (std::size_t t = 0; t < num_steps; ++t) {
    append_padded(out, std::to_string(t), step_width, true);
    for (std::size_t r = 0; r < num_ranks; ++r) {
      out += "  ";
      // A rank whose program is shorter has finished: blank, not idle.
      append_padded(out, t < cells[r].size() ? cells[r][t] : std::string(), width[r], false);
    }
    end_line();
  }
  return out;
}

}  // namespace pipescope
