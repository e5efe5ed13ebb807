// Fuzzes the torch pipelining CSV reader, which also runs the completion passes
// (complete_schedule) on what it reads. Bad input must end in a ScheduleError and nothing else;
// input that reads must validate without crashing, and writing it as CSV and reading that back
// must give the same CSV again (the writer's output is a fixed point of read + write).
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
  if (again != csv) __builtin_trap();
  return 0;
}
