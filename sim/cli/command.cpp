// The registry the subcommands join at start-up (command.hpp). Apart from main.cpp so that
// another front end (the Python module, python/src/) runs the same commands in its own process.
#include "command.hpp"

#include <unistd.h>

namespace pipescope::cli {

std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}

bool progress_enabled(bool quiet) { return !quiet && ::isatty(STDERR_FILENO); }

}  // namespace pipescope::cli
