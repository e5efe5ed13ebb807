// Schedule files: pipescope JSON (`pipescope.schedule/1`, SPEC.md section 3), torch
// pipelining CSV (section 4), and the human-readable step x rank text grid.
#pragma once

#include <string>
#include <string_view>

#include "pipescope/core/schedule.hpp"

namespace pipescope {

// Readers throw ScheduleError whose message starts with `source` (usually the file name) and
// names the place: "x.json: programs[1][4][0]: unknown op 'Forward'".
Schedule parse_schedule_json(std::string_view text, const std::string& source);
Schedule parse_torch_csv(std::string_view text, const std::string& source);
// By extension (.csv is torch CSV, anything else JSON); the message names the file.
Schedule read_schedule_file(const std::string& path);

std::string to_schedule_json(const Schedule& schedule);
std::string to_torch_csv(const Schedule& schedule);
// The step x rank grid: one row per step, one column per rank, idle slots shown as '.'.
std::string to_text_grid(const Schedule& schedule);

}  // namespace pipescope
