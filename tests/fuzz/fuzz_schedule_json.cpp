// Fuzzes the pipescope.schedule/1 reader. Bad input must end in a ScheduleError and nothing
// else (no crash, no other exception, no sanitizer report); input that parses must validate
// without crashing under both send rules, and write back to JSON that reads back equal.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "pipescope/core/validator.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipescope;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Schedule schedule;
  try {
    schedule = parse_schedule_json(text, "fuzz.json");
  } catch (const ScheduleError&) {
    return 0;
  }
  const auto problem = find_problem(schedule, {false});
  const auto blocking_problem = find_problem(schedule, {true});
  // Blocking sends only add waits: a schedule that deadlocks without them deadlocks with them.
  if (problem && !blocking_problem) __builtin_trap();
  if (schedule != parse_schedule_json(to_schedule_json(schedule), "fuzz-rewrite.json")) __builtin_trap();
  (void)to_text_grid(schedule);
  return 0;
}
