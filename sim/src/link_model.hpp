// The simulator's links, apart from its event loop (SimGrid's split of resource models from
// the engine): each directed link between two ranks has a bandwidth and a latency; a transfer
// posted on it either takes latency + bytes / bandwidth alone, or, when links are shared,
// divides the bandwidth evenly with the transfers moving bytes on that link at the same time.
// The model says when a link next finishes a transfer and which transfers finish then; the
// event loop keeps the clock and wakes the ranks.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pipescope/sim/topology.hpp"

namespace pipescope::sim {

struct CompiledSchedule;

// When a shared link next finishes a transfer. `version` tells a stale event from the current
// one: every change to the link's transfers makes the events planned before it stale.
struct LinkEvent {
  std::int32_t link = -1;
  double time_s = 0;
  std::uint32_t version = 0;
};

// A transfer that has finished moving its bytes, and when its data is there (the link's
// latency later).
struct FinishedTransfer {
  std::int32_t transfer = -1;
  double arrival_s = 0;
};

class LinkModel {
 public:
  LinkModel() = default;
  // Per link its bandwidth (> 0) and latency; per transfer its link and bytes.
  LinkModel(std::vector<LinkSpec> links, std::vector<std::int32_t> transfer_link, std::vector<double> transfer_bytes,
            bool share_links);
  // The links of a compiled schedule on `topology`, each transfer carrying its sending stage's
  // activation (`activation_bytes`, per stage). Throws UsageError for a bandwidth not > 0.
  static LinkModel for_schedule(const CompiledSchedule& schedule, const std::vector<std::int64_t>& activation_bytes,
                                const Topology& topology, bool share_links);

  // What the transfer takes with its link to itself: latency + bytes / bandwidth.
  double unshared_time_s(std::int32_t transfer) const;
  // Posts `transfer` at `now`. Returns its arrival when that is known at once (links not
  // shared, or no bytes to move); otherwise the transfer joins its link's active ones and
  // next_event(its link) says when the link next finishes one. Posts must come in time order
  // per link.
  std::optional<double> post(std::int32_t transfer, double now);
  // The event that finishes the link's next transfer; none while the link moves nothing.
  std::optional<LinkEvent> next_event(std::int32_t link) const;
  // Handles `event` at its time: false, and nothing changes, when it is stale. Otherwise
  // appends to `finished` every transfer of the link done by then, in the order they were
  // posted, and plans the link's next event.
  bool finish(const LinkEvent& event, std::vector<FinishedTransfer>& finished);

  std::int32_t link_of(std::int32_t transfer) const { return transfer_link_[static_cast<std::size_t>(transfer)]; }

 private:
  struct Link {
    LinkSpec spec;
    double last_update_s = 0;
    std::uint32_t version = 0;
    double next_finish_s = 0;
    std::vector<std::int32_t> active;  // transfer ids moving bytes now, in posting order
  };
  void advance(Link& link, double now);
  void reschedule(Link& link, double now);

  std::vector<Link> links_;
  std::vector<std::int32_t> transfer_link_;
  std::vector<double> total_bytes_;
  std::vector<double> remaining_bytes_;
  bool share_links_ = true;
};

}  // namespace pipescope::sim
