// Estimators of the transport: the delay of a transfer (latency and bandwidth), when a send's
// event ends, and the program's own work per message (posting a send, taking a receive whose
// data is already there).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "estimation.hpp"

namespace pipescope::sim::calibration {

// Transfers: delay = latency + bytes / bandwidth, from the receives that were already waiting
// when their send was posted, fitted through the median (or mean) delay of each size; one size
// leaves the bandwidth undetermined.
void estimate_transfers(Estimation& e) {
  constexpr double kUnlimitedBandwidth = 1e15;
  const Collected& c = e.collected;
  Profile& p = e.result.profile;
  Samples waiting;
  std::map<double, std::vector<double>> delays_by_size;
  for (const auto& t : c.transfers)
    if (t.arrival_known && t.recv->ts_us <= t.send_start_us) {
      const double delay_s = (t.recv->end_us() - t.send_start_us) * 1e-6;
      waiting.push_back({delay_s, t.source, t.recv->rank, t.recv->micro_batch});
      delays_by_size[t.bytes].push_back(delay_s);
    }
  if (!waiting.empty()) {
    const double typical_delay_s = e.summary.estimate("transfer delay (receiver waiting)", "s", waiting);
    std::vector<std::pair<double, double>> points;
    for (const auto& [bytes, delays] : delays_by_size) points.push_back({bytes, e.summary.duration(delays)});
    double slope = 0, intercept = typical_delay_s;
    if (points.size() >= 2 && points.back().first >= 2 * points.front().first) {
      double mx = 0, my = 0;
      for (const auto& [x, y] : points) mx += x, my += y;
      mx /= static_cast<double>(points.size());
      my /= static_cast<double>(points.size());
      double sxy = 0, sxx = 0;
      for (const auto& [x, y] : points) sxy += (x - mx) * (y - my), sxx += (x - mx) * (x - mx);
      slope = sxx > 0 ? sxy / sxx : 0;
      intercept = my - slope * mx;
    }
    if (slope > 0 && intercept >= 0) {
      p.transfer = {1.0 / slope, intercept};
    } else {
      p.transfer = {kUnlimitedBandwidth, std::max(0.0, typical_delay_s)};
      e.note(fmt::format(
          "transfers: {} message size(s) seen, too few to separate bandwidth from latency: the whole delay ({:.1f} us) "
          "is latency",
          points.size(), typical_delay_s * 1e6));
    }
  } else if (!c.transfers.empty()) {
    Samples all;
    for (const auto& t : c.transfers)
      if (t.arrival_known)
        all.push_back({(t.recv->end_us() - std::max(t.send_start_us, t.recv->ts_us)) * 1e-6, t.source, t.recv->rank,
                     t.recv->micro_batch});
    p.transfer = {kUnlimitedBandwidth, std::max(0.0, e.summary.estimate("transfer delay (all)", "s", all))};
    e.note("transfers: no receive was waiting when its send was posted; latency from all pairs");
  } else {
    p.transfer = {kUnlimitedBandwidth, 0.0};
    e.note("transfers: none measured (one rank?): communication is free");
  }
}

namespace {

double arrival_us(const Profile& p, const Collected::TransferPair& t) {
  return t.send_start_us + (p.transfer.latency_s + t.bytes / p.transfer.bandwidth_bytes_per_s) * 1e6;
}

}  // namespace

// A runtime whose sends complete when the receiver has the data (Gloo) ends their events nearer
// the receive's end than the arrival; one that completes them on the wire, nearer the arrival.
// Transfers whose receive waited for the data tell neither (both are equal).
void estimate_send_completion(Estimation& e) {
  const Collected& c = e.collected;
  Profile& p = e.result.profile;
  if (c.transfers.empty()) return;
  int nearer_receive = 0, nearer_arrival = 0;
  for (const auto& t : c.transfers) {
    if (!t.arrival_known) continue;
    const double from_receive_end = std::fabs(t.send_end_us - t.recv->end_us());
    const double from_arrival = std::fabs(t.send_end_us - arrival_us(p, t));
    if (from_receive_end < from_arrival) ++nearer_receive;
    if (from_arrival < from_receive_end) ++nearer_arrival;
  }
  p.send_ends_at_receive = nearer_receive > nearer_arrival;
  if (p.send_ends_at_receive)
    e.note(fmt::format("transfers: {} of {} sends end nearer their receive's end than their data's arrival: predicted "
                       "sends are drawn until the receive completes",
                       nearer_receive, c.transfers.size()));
}

// Posting a send and taking a receive whose data is already there are the transport's work per
// message, not a stage's: one estimate from every stage's transfers. Their durations have long
// tails (a rank that blocks can lose its core for a scheduler tick), and a stage that seldom
// finds its data there (the first, in 1F1B: a few dozen receives in a hundred traces) would get
// a mean that two or three tails decide, and charge it to every transfer point of a schedule
// that has more of them (interleaved 1F1B, ZBV). A receive of arrived data costs more when its
// rank's own message to the sender was still undelivered (both ways at once).
void estimate_message_costs(Estimation& e) {
  Collected& c = e.collected;
  const Profile& p = e.result.profile;
  Samples all_late_recvs, all_late_recvs_both_ways;
  const std::vector<char> against_traffic = receives_against_traffic(c.transfers);
  for (std::size_t i = 0; i < c.transfers.size(); ++i) {
    const auto& t = c.transfers[i];
    // A torch receive's own work is its post, whenever its data came (torch_profiler.hpp).
    if (t.post_us >= 0)
      (against_traffic[i] ? all_late_recvs_both_ways : all_late_recvs)
          .push_back({t.post_us * 1e-6, t.source, t.recv->rank, t.recv->micro_batch});
    else if (t.recv->ts_us >= arrival_us(p, t))
      (against_traffic[i] ? all_late_recvs_both_ways : all_late_recvs)
          .push_back({t.recv->dur_us * 1e-6, t.source, t.recv->rank, t.recv->micro_batch});
  }
  // A send's own program time: its span less the overhead of the instruction before it and its own.
  for (auto& [stage, spans] : c.send_spans)
    for (Sample& span : spans) {
      span.value = std::max(0.0, span.value - 2 * p.instruction_overhead_s);
      c.times_s[{stage, Timed::Send}].push_back(span);
    }
  Samples all_sends;
  for (const auto& [key, samples] : c.times_s)
    if (key.second == Timed::Send) all_sends.insert(all_sends.end(), samples.begin(), samples.end());
  const double send_s = all_sends.empty() ? 0.0 : e.summary.estimate("send posting (all stages)", "s", all_sends);
  // With none measured of one kind of receive, the other's estimate stands for both.
  if (all_late_recvs.empty()) all_late_recvs = all_late_recvs_both_ways;
  const double recv_s =
      all_late_recvs.empty() ? 0.0 : e.summary.estimate("receive of arrived data (all stages)", "s", all_late_recvs);
  double recv_contended_s = recv_s;
  if (!all_late_recvs_both_ways.empty())
    recv_contended_s = e.summary.estimate("receive of arrived data, own message to the sender undelivered", "s",
                                          all_late_recvs_both_ways);
  else if (!all_late_recvs.empty())
    e.note("transfers: no receive of arrived data met its rank's own message to the sender undelivered: such receives "
           "are charged as the others");
  // Reported, not modelled yet: the transport threads' CPU time per message.
  if (!c.transport_cpu_per_message.empty())
    e.summary.estimate("transport threads' CPU per message", "s", c.transport_cpu_per_message);
  e.per_message.send_s = send_s;
  e.per_message.recv_s = std::max(0.0, recv_s);
  e.per_message.recv_contended_s = std::max(0.0, recv_contended_s);
}

}  // namespace pipescope::sim::calibration
