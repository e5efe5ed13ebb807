// One rule for an option that contradicts what a file or the environment already fixes, shared
// by ppsim and pprun: the option is refused, naming both values. Neither side is ever silently
// preferred (a schedule file's 4 micro-batches over --micro-batches 8, RANK/WORLD_SIZE over
// --nproc-per-node 2); the user leaves out the option, or changes the file or the environment.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "pipescope/core/schedule.hpp"

namespace pipescope {

// "OPTION VALUE contradicts SOURCE, which has SOURCE_HAS (leave OPTION out)", the one wording
// of every such refusal. OPTION is written as on the command line ("--micro-batches").
std::string contradiction(std::string_view option, std::string_view value, std::string_view source,
                          std::string_view source_has);

// The schedule sizes given on a command line; nothing where the option was left out.
struct GivenScheduleSizes {
  std::optional<int> stages;         // --stages: pipeline ranks
  std::optional<int> micro_batches;  // --micro-batches
  std::optional<int> chunks;         // --chunks: stages per rank
};

// A `file:PATH` schedule fixes its own sizes: a given size that differs is refused with
// contradiction() (UsageError). Does nothing for other schedule names.
void check_sizes_agree_with_file(const Schedule& schedule, std::string_view schedule_name, const GivenScheduleSizes& given);

}  // namespace pipescope
