// Hand-written schedules for the validator and schedule file tests, in a compact text form:
// each step is a string of torch actions separated by spaces ("0RECV_B1 0B1 0SEND_B1"), an
// empty string is an idle step, "@S" after an action sets its peer stage (a skip connection)
// and "#K" its buffer id: "0SEND_F2@2#1".
#pragma once

#include <string>
#include <vector>

#include "pipescope/core/schedule.hpp"

namespace pipescope::testing {

inline Instruction action(const std::string& text) {
  std::string core = text;
  int peer = kNone, buffer = kNone;
  if (auto hash = core.find('#'); hash != std::string::npos) {
    buffer = std::stoi(core.substr(hash + 1));
    core.erase(hash);
  }
  if (auto at = core.find('@'); at != std::string::npos) {
    peer = std::stoi(core.substr(at + 1));
    core.erase(at);
  }
  Instruction instr = parse_action(core);
  instr.peer_stage = peer;
  instr.buffer = buffer;
  return instr;
}

inline Step step(const std::string& text) {
  Step out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(action(text.substr(start, end - start)));
    start = end + 1;
  }
  return out;
}

// programs[r] is rank r's steps; the stage count is stage_to_rank.size().
inline Schedule make_schedule_from_text(int num_micro_batches, std::vector<int> stage_to_rank,
                                        const std::vector<std::vector<std::string>>& programs) {
  Schedule schedule;
  schedule.name = "hand-written";
  schedule.num_ranks = static_cast<int>(programs.size());
  schedule.num_stages = static_cast<int>(stage_to_rank.size());
  schedule.num_micro_batches = num_micro_batches;
  schedule.stage_to_rank = std::move(stage_to_rank);
  for (const auto& program : programs) {
    Program steps;
    for (const auto& text : program) steps.push_back(step(text));
    schedule.programs.push_back(std::move(steps));
  }
  return schedule;
}

}  // namespace pipescope::testing
