// Fuzzes the torch pipelining CSV reader, which also runs the completion passes
// (complete_schedule) on what it reads. Bad input must end in a ScheduleError and nothing else;
// input that reads must validate without crashing, and writing it as CSV and reading that back
// must give the same actions on every row again. Idle cells may differ: the completion pass
// is free to put the optimizer step (which the CSV leaves out) into a trailing idle slot.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "pipescope/core/validator.hpp"

namespace {

// The non-empty cells of each row.
std::vector<std::vector<std::string>> actions_by_row(const std::string& csv) {
  std::vector<std::vector<std::string>> rows(1);
  std::string cell;
  for (char c : csv) {
    if (c == ',' || c == '\n') {
      if (!cell.empty()) rows.back().push_back(cell);
      cell.clear();
      if (c == '\n') rows.emplace_back();
    } else {
      cell += c;
    }
  }
  return rows;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipescope;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Schedule schedule;
  try {
    schedule = parse_torch_csv(text, "fuzz.csv");
  } catch (const ScheduleError&) {
    return 0;
  }
  const bool valid = !find_problem(schedule).has_value();
  (void)to_text_grid(schedule);
  (void)to_schedule_json(schedule);
  if (!valid) return 0;
  const std::string csv = to_torch_csv(schedule);
  const std::string again = to_torch_csv(parse_torch_csv(csv, "fuzz-rewrite.csv"));
  if (actions_by_row(again) != actions_by_row(csv)) __builtin_trap();
  return 0;
}
