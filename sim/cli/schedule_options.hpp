// The options that name a schedule (--stages, --micro-batches, --chunks), shared by the
// ppsim commands that build one.
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include "pipescope/core/registry.hpp"

namespace pipescope::cli {

struct ScheduleOptions {
  std::string name;
  ScheduleParams params;

  void add_to(boost::program_options::options_description& options);
  // Builds the schedule from the parsed options; throws ScheduleError with the reason.
  Schedule make(const boost::program_options::variables_map& vm);
};

// One line per registered schedule: name and description.
std::string schedule_list_text();

}  // namespace pipescope::cli
