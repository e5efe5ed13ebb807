#include "pipescope/traces/trace_arguments.hpp"

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
  TorchRun run = read_torch_profiler_run(torch_paths, options);
  out[*torch_place].trace = std::move(run.trace);
  notes.insert(notes.end(), run.notes.begin(), run.notes.end());
  return out;
}

}  // namespace pipescope::traces
