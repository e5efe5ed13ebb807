// The options that name a schedule (--stages, --micro-batches, --chunks,
// --microbatch-group-size-per-vp-stage), shared by the ppsim commands that build one.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <string_view>

#include "pipescope/core/registry.hpp"

namespace pipescope::cli {

struct ScheduleOptions {
  std::string name;
  ScheduleParams params;

  void add_to(boost::program_options::options_description& options);
  // Builds the schedule from the parsed options; throws ScheduleError with the reason.
  Schedule make(const boost::program_options::variables_map& vm);
};

// Megatron's --microbatch-group-size-per-vp-stage G (ScheduleParams::microbatch_group_size):
// adds the option to `options`, and, once parsed, refuses a G below 1 (UsageError naming it).
void add_microbatch_group_size_option(boost::program_options::options_description& options, ScheduleParams& params);
void check_microbatch_group_size_option(const boost::program_options::variables_map& vm, const ScheduleParams& params);

// A schedule file fixes its own sizes: --stages, --micro-batches or --chunks given with
// `--schedule file:PATH` must agree with it, or UsageError names the option and the file's
// value (a flag is never silently overridden by the file); a group size, which only a generator
// can honour, is refused with a file.
void check_flags_agree_with_file(const Schedule& schedule, std::string_view schedule_name, const ScheduleParams& params,
                                 const boost::program_options::variables_map& vm);

// One line per registered schedule: name and description.
std::string schedule_list_text();

}  // namespace pipescope::cli
