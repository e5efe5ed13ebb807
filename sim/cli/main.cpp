// ppsim: generates, converts and validates schedules; simulates; plans; compares and
// calibrates. Dispatches to the subcommands that registered themselves (command.hpp) and turns
// exceptions into the one-line errors and exit codes of SPEC.md section 1; a result that could
// not be written to stdout is such an error too.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <boost/program_options/errors.hpp>

#include "command.hpp"
#include "heap_setup.hpp"
#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/terminal_text.hpp"
#include "pipescope/traces/trace.hpp"

namespace {

void print_usage(std::ostream& out) {
  using pipescope::cli::commands;
  auto sorted = commands();
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  out << "usage: ppsim COMMAND [options]   (ppsim COMMAND --help for its options)\n\ncommands:\n";
  for (const auto& c : sorted) out << "  " << c.name << std::string(12 - std::min<std::size_t>(c.name.size(), 11), ' ') << c.summary << "\n";
  out << "\n  --help       this text\n  --version    the version\n";
}

// Every path out of ppsim, with its exit status; main adds the check of stdout.
int run_ppsim(const std::vector<std::string>& args) {
  using namespace pipescope;
  if (args.empty()) {
    print_usage(std::cerr);
    return 2;
  }
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage(std::cout);
    return 0;
  }
  if (args[0] == "--version") {
    std::cout << "ppsim " << PIPESCOPE_VERSION << "\n";
    return 0;
  }
  const auto& all = cli::commands();
  auto it = std::find_if(all.begin(), all.end(), [&](const cli::Command& c) { return c.name == args[0]; });
  if (it == all.end()) {
    std::cerr << "ppsim: error: unknown command '" << printable(args[0]) << "' (see ppsim --help)\n";
    return 2;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  try {
    return it->run(rest);
  } catch (const UsageError& e) {
    std::cerr << "ppsim: error: " << printable(e.what()) << "\n";
    return 2;
  } catch (const boost::program_options::error& e) {
    std::cerr << "ppsim: error: " << printable(e.what()) << "\n";
    return 2;
  } catch (const ScheduleError& e) {
    std::cerr << "ppsim: error: " << printable(e.what()) << "\n";
    return 2;
  } catch (const traces::TraceError& e) {
    std::cerr << "ppsim: error: " << printable(e.what()) << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    // The size checks refuse what cannot fit before allocating; this is the last line of defence.
    std::cerr << "ppsim: error: out of memory: the sizes asked for do not fit in this machine's memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ppsim: error: " << printable(e.what()) << "\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  pipescope::cli::prepare_heap_for_large_schedules();
  return pipescope::finish_standard_output("ppsim", run_ppsim(std::vector<std::string>(argv + 1, argv + argc)));
}
