// What an all-to-all event of a mixture-of-experts layer exchanged, read from its typed fields
// and its args, for the details pane and the tooltip: the bytes it sent (and received), whom
// with (a measured trace lists the group's ranks; a predicted one gives the group's size, its
// other members being data-parallel replicas the simulator does not trace) and the layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipescope/traces/trace.hpp"

namespace pipescope::gui {

struct AllToAllDetail {
  std::int64_t bytes_sent = -1;      // -1: not recorded
  std::int64_t bytes_received = -1;  // measured only
  std::vector<int> peers;            // the group's ranks in group order (measured)
  int group_size = 0;                // the group's size (peers.size() when they are listed)
  std::string layer;                 // the MoE layer (measured), or empty
};

// The detail of an all-to-all event (ALL_TO_ALL_DISPATCH_F, ...), nullopt for any other event.
// Args that are not JSON, or fields of another type, are left out rather than refused: a
// trace's args are free-form beyond what SPEC.md names.
std::optional<AllToAllDetail> all_to_all_detail(const traces::Trace& trace, std::size_t event);

// One line for it: "all-to-all with ranks 1, 3 (group of 2), sent 512 B, received 256 B, layer blocks.1".
std::string all_to_all_text(const AllToAllDetail& detail);

}  // namespace pipescope::gui
