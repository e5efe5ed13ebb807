// ppsim's subcommands register themselves here, so each command lives in its own file
// (cmd_schedule.cpp, cmd_simulate.cpp, ...) and main.cpp only dispatches.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace pipescope::cli {

struct Command {
  std::string name;     // "schedule"
  std::string summary;  // one line for `ppsim --help`
  // Receives the arguments after the command name. Returns the exit status; throws
  // UsageError / ScheduleError / TraceError (exit 2) or std::exception (exit 1).
  std::function<int(const std::vector<std::string>& args)> run;
};

std::vector<Command>& commands();

// Used at namespace scope in a command's file: `static CommandRegistrar reg{{"name", ...}};`
struct CommandRegistrar {
  explicit CommandRegistrar(Command command) { commands().push_back(std::move(command)); }
};

// True when stderr is a terminal and progress output was not silenced with --quiet.
bool progress_enabled(bool quiet);

}  // namespace pipescope::cli
