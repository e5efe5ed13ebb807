#include "schedule_options.hpp"

#include <sstream>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/option_conflicts.hpp"

namespace po = boost::program_options;

namespace pipescope::cli {

void ScheduleOptions::add_to(po::options_description& options) {
  options.add_options()
      ("schedule", po::value(&name), "schedule NAME (see the list below) or file:PATH")
      ("stages", po::value(&params.num_ranks)->default_value(params.num_ranks), "P, the number of pipeline ranks")
      ("micro-batches", po::value(&params.num_micro_batches)->default_value(params.num_micro_batches),
       "M, micro-batches per iteration")
      ("chunks", po::value(&params.chunks)->default_value(params.chunks),
       "V, stages per rank for looped schedules (P*V stages in all)");
  add_microbatch_group_size_option(options, params);
}

void add_microbatch_group_size_option(po::options_description& options, ScheduleParams& params) {
  options.add_options()("microbatch-group-size-per-vp-stage", po::value(&params.microbatch_group_size),
                        "G, interleaved-1f1b's micro-batches per chunk before the next (Megatron's option; "
                        "G in [P, M], M % G 0 or >= P; default: P)");
}

void check_microbatch_group_size_option(const po::variables_map& vm, const ScheduleParams& params) {
  if (vm.count("microbatch-group-size-per-vp-stage") && params.microbatch_group_size < 1)
    throw UsageError(fmt::format("--microbatch-group-size-per-vp-stage must be at least 1, got {}",
                                 params.microbatch_group_size));
}

Schedule ScheduleOptions::make(const po::variables_map& vm) {
  params.chunks_given = !vm["chunks"].defaulted();
  check_microbatch_group_size_option(vm, params);
  Schedule schedule = make_schedule(name, params);
  check_flags_agree_with_file(schedule, name, params, vm);
  return schedule;
}

void check_flags_agree_with_file(const Schedule& schedule, std::string_view schedule_name, const ScheduleParams& params,
                                 const po::variables_map& vm) {
  auto given = [&](const char* option) { return vm.count(option) && !vm[option].defaulted(); };
  GivenScheduleSizes sizes;
  if (given("stages")) sizes.stages = params.num_ranks;
  if (given("micro-batches")) sizes.micro_batches = params.num_micro_batches;
  if (given("chunks")) sizes.chunks = params.chunks;
  check_sizes_agree_with_file(schedule, schedule_name, sizes);
  if (schedule_name.starts_with("file:") && vm.count("microbatch-group-size-per-vp-stage"))
    throw UsageError(fmt::format("--microbatch-group-size-per-vp-stage {} cannot be honoured by the schedule file {}, "
                                 "which fixes its own order (leave it out)",
                                 params.microbatch_group_size, schedule_name.substr(5)));
}

std::string schedule_list_text() {
  std::ostringstream out;
  for (const auto& entry : ScheduleRegistry::instance().entries()) {
    out << "  " << entry.name;
    out << std::string(entry.name.size() < 22 ? 22 - entry.name.size() : 1, ' ') << entry.description << "\n";
  }
  out << "  file:PATH" << std::string(13, ' ') << "a schedule file: pipescope JSON, or torch pipelining CSV (.csv)\n";
  return out.str();
}

}  // namespace pipescope::cli
