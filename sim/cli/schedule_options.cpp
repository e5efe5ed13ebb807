#include "schedule_options.hpp"

#include <sstream>

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
}

Schedule ScheduleOptions::make(const po::variables_map& vm) {
  params.chunks_given = !vm["chunks"].defaulted();
  return make_schedule(name, params);
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
