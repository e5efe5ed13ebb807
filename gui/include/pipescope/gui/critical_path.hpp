// The critical path of a series in the viewer: the chain of events that ends the iteration,
// walked back from the latest-ending event through what each one waited for.
#pragma once

#include <cstddef>
#include <vector>

#include "pipescope/gui/timeline_model.hpp"

namespace pipescope::gui {

// From the latest-ending event (the lowest lane among those ending together), each step goes
// from a receive that waited (its send started after it was posted) to that send on the peer
// rank, from a receive fed by a flow to the flow's source, and otherwise to the latest event
// of the same rank that ended by the time this one started; it stops at an event starting at
// 0 or one already on the path. Returned in time order (event indices of the series).
std::vector<std::size_t> critical_path_of(const TimelineModel& model, int series);

}  // namespace pipescope::gui
