// What the window shows of a read, made without a widget: the traces' clocks put on one and the
// timeline model laid out. For a gigabyte of events this takes seconds, so a background read
// makes it on its loading thread, where the progress dialog can still give it up, and the GUI
// thread only swaps the finished model in.
#pragma once

#include <QStringList>

#include <memory>
#include <optional>

#include "pipescope/gui/timeline_model.hpp"
#include "pipescope/traces/read_progress.hpp"
#include "pipescope/traces/trace.hpp"

namespace pipescope::gui {

struct PreparedView {
  std::shared_ptr<TimelineModel> model;  // nullptr when the preparation was cancelled
  QStringList aligned;                   // what the clock alignment did, one line per trace
};

// Aligns the clocks of measured traces unless `raw_clocks` (docs/EXPLAIN.md), lays the model out
// and works out whom the ranks waited on (the ranks table's column), checking `progress` (may
// be null) for a cancel between the steps.
PreparedView prepare_view(traces::Trace first, std::optional<traces::Trace> second, bool raw_clocks,
                          const traces::ReadProgress* progress);

}  // namespace pipescope::gui
