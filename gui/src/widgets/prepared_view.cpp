// The model a read is shown with (prepared_view.hpp).
#include "prepared_view.hpp"

#include <utility>

#include "pipescope/traces/clock_alignment.hpp"

namespace pipescope::gui {
namespace {

bool cancel_asked(const traces::ReadProgress* progress) { return progress && progress->cancel_requested.load(); }

}  // namespace

PreparedView prepare_view(traces::Trace first, std::optional<traces::Trace> second, bool raw_clocks,
                          const traces::ReadProgress* progress) {
  PreparedView view;
  // Ranks on different clocks are put on one first; a prediction has one clock by construction.
  for (traces::Trace* t : {&first, second ? &*second : nullptr})
    if (t && !raw_clocks && t->meta.source != "predicted")
      if (const auto a = traces::align_clocks(*t); a.applied)
        view.aligned << QString::fromStdString(traces::describe_clock_alignment(a));
  if (cancel_asked(progress)) return {};
  auto model = std::make_shared<TimelineModel>();
  model->set_traces(std::move(first), std::move(second));
  if (cancel_asked(progress)) return {};
  // The ranks table asks the shown series (the measurement of a pair) whom its ranks waited
  // on: a replay of the step, made here rather than on the GUI thread.
  if (!model->empty()) model->step_attribution(model->series_count() - 1);
  if (cancel_asked(progress)) return {};
  view.model = std::move(model);
  return view;
}

}  // namespace pipescope::gui
