#include "pipescope/traces/trace_arguments.hpp"

#include <iterator>
#include <optional>

#include "pipescope/traces/trace_io.hpp"

namespace pipescope::traces {

std::vector<NamedTrace> read_trace_arguments(const std::vector<std::string>& paths, const TorchReadOptions& options,
                                             std::vector<std::string>& notes) {
  std::vector<std::string> torch_paths;
  std::optional<std::size_t> torch_place;
  std::vector<NamedTrace> out;
  for (const auto& path : paths) {
    if (is_torch_profiler_input(path)) {
      if (!torch_place) torch_place = out.size(), out.push_back({Trace{}, path});
      torch_paths.push_back(path);
    } else {
      out.push_back({read_trace(path), path});
    }
  }
  if (!torch_place) {
    if (options.step) throw TraceError("--step: picks a step of torch.profiler traces; none of the inputs is one");
    return out;
  }
  std::vector<TorchRun> runs = read_torch_profiler_steps(torch_paths, options);
  const std::string name = out[*torch_place].name;
  std::vector<NamedTrace> steps;
  for (auto& run : runs) {
    std::string step_name = name;
    if (runs.size() > 1) step_name += " (ProfilerStep#" + run.trace.meta.extra["torch_profiler"]["step"].dump() + ")";
    steps.push_back({std::move(run.trace), std::move(step_name)});
    // One step's notes stand for all: the files are the same.
    if (steps.size() == 1) notes.insert(notes.end(), run.notes.begin(), run.notes.end());
  }
  out.erase(out.begin() + static_cast<std::ptrdiff_t>(*torch_place));
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(*torch_place), std::make_move_iterator(steps.begin()),
             std::make_move_iterator(steps.end()));
  return out;
}

}  // namespace pipescope::traces
