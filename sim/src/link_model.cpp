// Shared links divide their bandwidth evenly among the transfers moving bytes at once: between
// two changes on a link (a post, a finish) each of its n transfers moves bandwidth / n per
// second, so the one with the fewest bytes left finishes first, at a time known in advance.
#include "link_model.hpp"

#include <algorithm>
#include <limits>
#include <utility>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/simulator.hpp"

namespace pipescope::sim {

LinkModel::LinkModel(std::vector<LinkSpec> links, std::vector<std::int32_t> transfer_link,
                     std::vector<double> transfer_bytes, bool share_links)
    : transfer_link_(std::move(transfer_link)),
      total_bytes_(std::move(transfer_bytes)),
      remaining_bytes_(total_bytes_.size(), 0.0),
      share_links_(share_links) {
  if (transfer_link_.size() != total_bytes_.size())
    throw UsageError("link model: " + std::to_string(transfer_link_.size()) + " transfer links for " +
                     std::to_string(total_bytes_.size()) + " transfer sizes");
  links_.resize(links.size());
  for (std::size_t l = 0; l < links.size(); ++l) {
    if (!(links[l].bandwidth_bytes_per_s > 0)) throw UsageError("link bandwidth must be > 0");
    links_[l].spec = links[l];
  }
  for (const std::int32_t link : transfer_link_)
    if (link < 0 || static_cast<std::size_t>(link) >= links_.size())
      throw UsageError("link model: a transfer on link " + std::to_string(link) + " of " +
                       std::to_string(links_.size()));
}

LinkModel LinkModel::for_schedule(const CompiledSchedule& schedule, const std::vector<std::int64_t>& activation_bytes,
                                  const Topology& topology, bool share_links) {
  std::vector<LinkSpec> links;
  links.reserve(schedule.links.size());
  for (const auto& [from_rank, to_rank] : schedule.links) links.push_back(topology.link_between(from_rank, to_rank));
  std::vector<std::int32_t> transfer_link;
  std::vector<double> transfer_bytes;
  transfer_link.reserve(schedule.transfers.size());
  transfer_bytes.reserve(schedule.transfers.size());
  for (const CompiledTransfer& t : schedule.transfers) {
    transfer_link.push_back(t.link);
    const std::int32_t stage = schedule.instructions[static_cast<std::size_t>(t.send_index)].stage;
    transfer_bytes.push_back(static_cast<double>(activation_bytes[static_cast<std::size_t>(stage)]));
  }
  return LinkModel(std::move(links), std::move(transfer_link), std::move(transfer_bytes), share_links);
}

double LinkModel::unshared_time_s(std::int32_t transfer) const {
  const LinkSpec& spec = links_[static_cast<std::size_t>(link_of(transfer))].spec;
  return spec.latency_s + total_bytes_[static_cast<std::size_t>(transfer)] / spec.bandwidth_bytes_per_s;
}

std::optional<double> LinkModel::post(std::int32_t transfer, double now) {
  Link& link = links_[static_cast<std::size_t>(link_of(transfer))];
  const double bytes = total_bytes_[static_cast<std::size_t>(transfer)];
  if (!share_links_ || bytes <= 0) return now + link.spec.latency_s + bytes / link.spec.bandwidth_bytes_per_s;
  advance(link, now);
  remaining_bytes_[static_cast<std::size_t>(transfer)] = bytes;
  link.active.push_back(transfer);
  reschedule(link, now);
  return std::nullopt;
}

std::optional<LinkEvent> LinkModel::next_event(std::int32_t link_id) const {
  const Link& link = links_[static_cast<std::size_t>(link_id)];
  if (link.active.empty()) return std::nullopt;
  return LinkEvent{link_id, link.next_finish_s, link.version};
}

bool LinkModel::finish(const LinkEvent& event, std::vector<FinishedTransfer>& finished) {
  Link& link = links_[static_cast<std::size_t>(event.link)];
  if (event.version != link.version) return false;
  const double now = event.time_s;
  advance(link, now);
  // Every transfer within rounding of its end finishes now. Rounding includes what the link
  // moves in a few units of the clock's precision, or a very fast link would never finish.
  const double clock_resolution_bytes = link.spec.bandwidth_bytes_per_s * std::max(1.0, now) * 1e-15;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < link.active.size(); ++i) {
    const std::int32_t id = link.active[i];
    const auto index = static_cast<std::size_t>(id);
    if (remaining_bytes_[index] <= total_bytes_[index] * 1e-9 + 1e-6 + clock_resolution_bytes)
      finished.push_back({id, now + link.spec.latency_s});
    else
      link.active[kept++] = id;
  }
  link.active.resize(kept);
  reschedule(link, now);
  return true;
}

void LinkModel::advance(Link& link, double now) {
  if (!link.active.empty() && now > link.last_update_s) {
    const double moved = (now - link.last_update_s) * link.spec.bandwidth_bytes_per_s / link.active.size();
    for (const std::int32_t id : link.active) remaining_bytes_[static_cast<std::size_t>(id)] -= moved;
  }
  link.last_update_s = now;
}

// The transfer with the fewest bytes left finishes first: at the link's bandwidth divided
// among its active transfers, all of which move until then.
void LinkModel::reschedule(Link& link, double now) {
  ++link.version;
  if (link.active.empty()) return;
  double least = std::numeric_limits<double>::infinity();
  for (const std::int32_t id : link.active) least = std::min(least, remaining_bytes_[static_cast<std::size_t>(id)]);
  link.next_finish_s = now + std::max(least, 0.0) * link.active.size() / link.spec.bandwidth_bytes_per_s;
}

}  // namespace pipescope::sim
