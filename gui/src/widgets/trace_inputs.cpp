#include "trace_inputs.hpp"

#include <QFile>
#include <QFileInfo>

#include <algorithm>
#include <filesystem>
#include <future>
#include <new>
#include <string>
#include <vector>

#include "pipescope/traces/compare.hpp"
#include "pipescope/traces/torch_profiler.hpp"
#include "pipescope/traces/trace_arguments.hpp"
#include "pipescope/traces/trace_io.hpp"

namespace pipescope::gui {
namespace {

constexpr const char* kTooManyTraces = "ppview shows one trace, or a predicted and a measured trace (got %1 %2)";

TraceInputs failed(const QString& message) {
  TraceInputs out;
  out.error = message;
  return out;
}

// torch.profiler traces: the per-rank files of one run (or its folder) are one measured trace.
TraceInputs read_torch_inputs(const QStringList& paths, std::optional<int> torch_step, traces::ReadProgress* progress) {
  std::vector<std::string> inputs;
  for (const auto& p : paths) inputs.push_back(QFile::encodeName(p).toStdString());
  traces::TorchReadOptions options;
  options.step = torch_step;
  options.progress = progress;
  std::vector<std::string> notes;
  std::vector<traces::NamedTrace> loaded = traces::read_trace_arguments(inputs, options, notes);
  if (loaded.size() > 2) return failed(QString(kTooManyTraces).arg(loaded.size()).arg("traces"));
  if (loaded.size() == 2 && loaded[0].trace.meta.source == "measured" && loaded[1].trace.meta.source == "predicted")
    std::swap(loaded[0], loaded[1]);
  if (loaded.size() == 2)
    traces::check_same_rank_count(loaded[0].trace, loaded[1].trace, loaded[0].name, loaded[1].name);
  TraceInputs out;
  QStringList names;
  for (const auto& l : loaded) names << QFileInfo(QString::fromStdString(l.name)).fileName();
  out.title = names.join(" vs ");
  out.first = std::move(loaded[0].trace);
  if (loaded.size() == 2) out.second = std::move(loaded[1].trace);
  for (const auto& n : notes) out.notes << QString::fromStdString(n);
  return out;
}

// pipescope (or plain Chrome) traces: one, or a predicted and a measured one.
TraceInputs read_pipescope_inputs(const QStringList& paths, traces::ReadProgress* progress) {
  std::vector<traces::Trace> loaded;
  // The two files of a pair are read at the same time, the second on another thread.
  std::future<traces::Trace> second;
  if (paths.size() == 2)
    second = std::async(std::launch::async,
                        [path = paths[1].toStdString(), progress] { return traces::read_trace(path, progress); });
  loaded.push_back(traces::read_trace(paths[0].toStdString(), progress));
  if (second.valid()) loaded.push_back(second.get());
  QStringList names;
  for (const auto& p : paths) names << QFileInfo(p).fileName();
  QStringList ordered = paths;  // in the order of `loaded`
  if (loaded.size() == 2 && loaded[0].meta.source == "measured" && loaded[1].meta.source == "predicted") {
    std::swap(loaded[0], loaded[1]);
    ordered.swapItemsAt(0, 1);
  }
  // A pair is one pipeline predicted and measured: rows are paired by rank.
  if (loaded.size() == 2)
    traces::check_same_rank_count(loaded[0], loaded[1], ordered[0].toStdString(), ordered[1].toStdString());
  TraceInputs out;
  out.title = names.join(" vs ");
  out.first = std::move(loaded[0]);
  if (loaded.size() == 2) out.second = std::move(loaded[1]);
  return out;
}

}  // namespace

TraceInputs read_trace_inputs(const QStringList& paths, std::optional<int> torch_step, traces::ReadProgress* progress) {
  if (paths.isEmpty()) return failed("no trace file given");
  try {
    for (const auto& p : paths)
      if (traces::is_torch_profiler_input(QFile::encodeName(p).toStdString()))
        return read_torch_inputs(paths, torch_step, progress);
    if (torch_step) return failed("--step: picks a step of torch.profiler traces; none of the inputs is one");
    if (paths.size() > 2) return failed(QString(kTooManyTraces).arg(paths.size()).arg("files"));
    return read_pipescope_inputs(paths, progress);
  } catch (const traces::ReadCancelled&) {
    TraceInputs out;
    out.cancelled = true;
    return out;
  } catch (const std::bad_alloc&) {
    return failed(QString("%1: the trace does not fit in this machine's memory").arg(paths.join(", ")));
  } catch (const std::exception& e) {
    return failed(QString::fromStdString(e.what()));
  }
}

std::uint64_t trace_input_bytes(const QStringList& paths) {
  std::uint64_t total = 0;
  for (const auto& p : paths) {
    const std::string path = QFile::encodeName(p).toStdString();
    std::error_code error;
    if (!std::filesystem::is_directory(path, error)) {
      total += static_cast<std::uint64_t>(std::max<qint64>(0, QFileInfo(p).size()));
      continue;
    }
    try {
      for (const auto& file : traces::torch_profiler_files({path}))
        total += static_cast<std::uint64_t>(std::max<qint64>(0, QFileInfo(QFile::decodeName(file.c_str())).size()));
    } catch (const std::exception&) {
      // The read says what is wrong with the folder; the bar just does not count it.
    }
  }
  return total;
}

}  // namespace pipescope::gui
