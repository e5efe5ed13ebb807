#include "pipescope/traces/trace_arguments.hpp"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <optional>

#include "pipescope/traces/trace_io.hpp"

namespace pipescope::traces {
namespace {

// One torch run's traces (one per profiled step with options.every_step), named for messages.
std::vector<NamedTrace> read_torch_run(const std::vector<std::string>& paths, const TorchReadOptions& options,
                                       std::vector<std::string>& notes) {
  std::vector<TorchRun> runs = read_torch_profiler_steps(paths, options);
  std::vector<NamedTrace> out;
  for (auto& run : runs) {
    std::string name = paths.front();
    const auto& about = run.trace.meta.run.torch_profiler;
    if (runs.size() > 1 && about && about->step) name += " (ProfilerStep#" + std::to_string(*about->step) + ")";
    out.push_back({std::move(run.trace), std::move(name)});
    // One step's notes stand for all: the files are the same.
    if (out.size() == 1) notes.insert(notes.end(), run.notes.begin(), run.notes.end());
  }
  return out;
}

}  // namespace

std::vector<NamedTrace> read_trace_arguments(const std::vector<std::string>& paths, const TorchReadOptions& options,
                                             std::vector<std::string>& notes) {
  // Each input in order: a pipescope trace, a torch run's folder, or a torch file; the loose
  // torch files together are one run, read at the place of the first.
  struct Input {
    std::vector<std::string> torch_paths;  // empty: a pipescope trace
    std::string path;
  };
  std::vector<Input> inputs;
  std::optional<std::size_t> loose_files;
  for (const auto& path : paths) {
    std::error_code error;
    if (!is_torch_profiler_input(path)) {
      inputs.push_back({{}, path});
    } else if (std::filesystem::is_directory(path, error)) {
      inputs.push_back({{path}, path});
    } else if (loose_files) {
      inputs[*loose_files].torch_paths.push_back(path);
    } else {
      loose_files = inputs.size();
      inputs.push_back({{path}, path});
    }
  }
  const bool any_torch =
      std::any_of(inputs.begin(), inputs.end(), [](const Input& i) { return !i.torch_paths.empty(); });
  if (!any_torch && options.step)
    throw TraceError("--step: picks a step of torch.profiler traces; none of the inputs is one");
  std::vector<NamedTrace> out;
  for (const auto& input : inputs) {
    if (input.torch_paths.empty()) {
      out.push_back({read_trace(input.path, options.progress), input.path});
      continue;
    }
    std::vector<NamedTrace> steps = read_torch_run(input.torch_paths, options, notes);
    out.insert(out.end(), std::make_move_iterator(steps.begin()), std::make_move_iterator(steps.end()));
  }
  return out;
}

}  // namespace pipescope::traces
