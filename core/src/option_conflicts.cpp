#include "pipescope/core/option_conflicts.hpp"

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"

namespace pipescope {

std::string contradiction(std::string_view option, std::string_view value, std::string_view source,
                          std::string_view source_has) {
  return fmt::format("{} {} contradicts {}, which has {} (leave {} out)", option, value, source, source_has, option);
}

void check_sizes_agree_with_file(const Schedule& schedule, std::string_view schedule_name, const GivenScheduleSizes& given) {
  if (!schedule_name.starts_with("file:")) return;
  const std::string source = fmt::format("the schedule file {}", schedule_name.substr(5));
  auto refuse = [&](const char* option, int value, const std::string& file_has) {
    throw UsageError(contradiction(option, std::to_string(value), source, file_has));
  };
  if (given.stages && *given.stages != schedule.num_ranks)
    refuse("--stages", *given.stages, fmt::format("{} ranks", schedule.num_ranks));
  if (given.micro_batches && *given.micro_batches != schedule.num_micro_batches)
    refuse("--micro-batches", *given.micro_batches, fmt::format("{} micro-batches", schedule.num_micro_batches));
  if (given.chunks && static_cast<long long>(*given.chunks) * schedule.num_ranks != schedule.num_stages)
    refuse("--chunks", *given.chunks, fmt::format("{} stages on {} ranks", schedule.num_stages, schedule.num_ranks));
}

}  // namespace pipescope
