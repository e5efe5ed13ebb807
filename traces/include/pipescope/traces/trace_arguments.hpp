// The traces named on a command line (ppview, ppsim compare, ppsim calibrate): a file of
// pipescope's format (or any Chrome trace) is one trace; the torch.profiler files of one run,
// given as several files or as their folder, are together one trace (torch_profiler.hpp); each
// folder is a run of its own.
#pragma once

#include <string>
#include <vector>

#include "pipescope/traces/torch_profiler.hpp"

namespace pipescope::traces {

struct NamedTrace {
  Trace trace;
  std::string name;  // the file, or the torch run's folder / first file, for messages
};

// In order of mention; the torch.profiler files given one by one form one run, at the place of
// the first; a folder is one run (one trace per profiled step with options.every_step). `notes` receives what a torch trace lacks. Throws TraceError for unreadable input,
// and for options.step given without a torch.profiler input (pipescope's traces hold one step).
std::vector<NamedTrace> read_trace_arguments(const std::vector<std::string>& paths, const TorchReadOptions& options,
                                             std::vector<std::string>& notes);

}  // namespace pipescope::traces
