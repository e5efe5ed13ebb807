// Maps schedule names (SPEC.md section 2) to generators, so that a new schedule is one
// function and one line. `file:PATH` is resolved here too, so every `--schedule` accepts it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipescope/core/schedule.hpp"

namespace pipescope {

// What a generator is asked for. `num_ranks` is `--stages P`; with `chunks` V there are P*V
// stages. Generators refuse (ScheduleError with the reason) what they cannot honour.
struct ScheduleParams {
  int num_ranks = 4;
  int num_micro_batches = 8;
  int chunks = 1;
  bool chunks_given = false;  // true when the user passed --chunks (lets a generator refuse it)
};

using Generator = std::function<Schedule(const ScheduleParams&)>;

struct GeneratorInfo {
  std::string name;
  std::string description;
  Generator make;
};

class ScheduleRegistry {
 public:
  // The registry holding every built-in schedule of the core. Other layers (the simulator's
  // zb-auto) add theirs at start-up.
  static ScheduleRegistry& instance();

  void add(GeneratorInfo info);  // replaces an entry of the same name
  const GeneratorInfo* find(std::string_view name) const;
  std::vector<std::string> names() const;
  const std::vector<GeneratorInfo>& entries() const { return entries_; }

 private:
  std::vector<GeneratorInfo> entries_;
};

// Builds the schedule NAME (or reads `file:PATH`), throwing ScheduleError naming the schedule
// and the reason when it is unknown or cannot honour `params`.
Schedule make_schedule(std::string_view name, const ScheduleParams& params);

}  // namespace pipescope
