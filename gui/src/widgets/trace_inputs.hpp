// What ppview reads from the files it is given: one trace, a predicted and a measured one, or
// the torch.profiler files of one run (pipescope/traces/trace_arguments.hpp). No widget is
// touched, so the read runs on any thread (trace_loading.hpp); the window shows the result.
#pragma once

#include <QString>
#include <QStringList>

#include <cstdint>
#include <optional>

#include "pipescope/traces/read_progress.hpp"
#include "pipescope/traces/trace.hpp"

namespace pipescope::gui {

struct TraceInputs {
  std::optional<QString> error;         // the message of inputs that cannot be read; then no traces
  bool cancelled = false;               // the read was given up (ReadProgress::cancel_requested)
  traces::Trace first;                  // the prediction of a pair, or the one trace
  std::optional<traces::Trace> second;  // the measurement of a pair
  QString title;                        // the files' names, "A vs B" for a pair
  QStringList notes;                    // what a torch.profiler trace lacks, one line each
};

// Reads `paths` (one trace, a pair in either order, or torch.profiler files or folders);
// `torch_step`: the ProfilerStep#N of torch traces (default: the last). `progress` (may be
// null) hears the bytes read and may cancel.
TraceInputs read_trace_inputs(const QStringList& paths, std::optional<int> torch_step, traces::ReadProgress* progress);

// The bytes of the files `paths` name (a folder's torch.profiler files), what a progress bar
// counts up to; files that cannot be listed count 0.
std::uint64_t trace_input_bytes(const QStringList& paths);

}  // namespace pipescope::gui
