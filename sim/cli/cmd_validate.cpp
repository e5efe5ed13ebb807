// `ppsim validate FILE [--blocking-sends]`: exit 0 and a one-line summary when the schedule
// file is valid; exit 2 and the first problem (rank, step, instruction, why) when it is not.
#include <boost/program_options.hpp>
#include <iostream>

#include "command.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/terminal_text.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "pipescope/core/validator.hpp"

namespace po = boost::program_options;

namespace pipescope::cli {
namespace {

int run_validate(const std::vector<std::string>& args) {
  std::string path;
  bool blocking_sends = false;
  po::options_description options("ppsim validate FILE [options]");
  options.add_options()
      ("help,h", "this text")
      ("file", po::value(&path), "schedule file: pipescope JSON, or torch pipelining CSV (.csv)")
      ("blocking-sends", po::bool_switch(&blocking_sends),
       "a send also waits for its receive (DeepSpeed's rule); default: sends are asynchronous");
  po::positional_options_description positional;
  positional.add("file", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(options).positional(positional).run(), vm);
  if (vm.count("help")) {
    std::cout << options;
    return 0;
  }
  po::notify(vm);
  if (path.empty()) throw UsageError("missing schedule FILE (see ppsim validate --help)");

  const Schedule schedule = read_schedule_file(path);
  if (auto problem = find_problem(schedule, ValidationOptions{.blocking_sends = blocking_sends})) {
    std::cerr << "ppsim: error: " << printable(path + ": " + problem->message) << "\n";
    return 2;
  }
  std::cout << printable(path) << ": valid: " << schedule.num_ranks << " ranks, " << schedule.num_stages << " stages, "
            << schedule.num_micro_batches << " micro-batches, " << schedule.instruction_count()
            << " instructions" << (blocking_sends ? " (blocking sends)" : "") << "\n";
  return 0;
}

const CommandRegistrar validate_registrar{{"validate", "check a schedule file; name the first problem", run_validate}};

}  // namespace
}  // namespace pipescope::cli
