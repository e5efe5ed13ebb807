// Send/receive pairing. A channel is (from stage, to stage, kind); NCCL only guarantees order
// between the same two endpoints, so the k-th send of a channel meets its k-th receive and the
// two must carry the same micro-batch. Sends of a channel all come from one rank, receives all
// go to one rank, so ordering each by vertex number gives program order.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "checks.hpp"

namespace pipescope::validation {
namespace {

std::string num(long long value) { return std::to_string(value); }

std::string ordinal(long long n) {
  const long long tens = n % 100;
  const char* suffix = (tens >= 11 && tens <= 13) ? "th" : n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
  return num(n) + suffix;
}

struct Endpoint {
  int from_stage;
  int to_stage;
  int kind;  // 0 activation, 1 gradient
};

Endpoint endpoint_of(const Instruction& in) {
  const int peer = resolved_peer_stage(in);
  const int kind = (in.op == Op::SendActivation || in.op == Op::RecvActivation) ? 0 : 1;
  if (is_send(in.op)) return {in.stage, peer, kind};
  return {peer, in.stage, kind};
}

// Vertices ordered by channel, and inside a channel by program order: a stable counting sort
// by (from stage, kind), then a stable sort by destination where a sender has several.
std::vector<Vertex> by_channel(const FlatSchedule& flat, const std::vector<Vertex>& vertices, int num_stages) {
  const std::size_t buckets = static_cast<std::size_t>(num_stages) * 2;
  std::vector<std::size_t> start(buckets + 1, 0);
  for (Vertex v : vertices) {
    const Endpoint e = endpoint_of(*flat.instr[v]);
    ++start[static_cast<std::size_t>(e.from_stage) * 2 + e.kind + 1];
  }
  for (std::size_t b = 0; b < buckets; ++b) start[b + 1] += start[b];
  std::vector<Vertex> sorted(vertices.size());
  std::vector<std::size_t> next(start.begin(), start.end() - 1);
  for (Vertex v : vertices) {
    const Endpoint e = endpoint_of(*flat.instr[v]);
    sorted[next[static_cast<std::size_t>(e.from_stage) * 2 + e.kind]++] = v;
  }
  auto to_stage = [&](Vertex v) { return endpoint_of(*flat.instr[v]).to_stage; };
  for (std::size_t b = 0; b < buckets; ++b) {
    auto first = sorted.begin() + static_cast<std::ptrdiff_t>(start[b]);
    auto last = sorted.begin() + static_cast<std::ptrdiff_t>(start[b + 1]);
    auto by_destination = [&](Vertex a, Vertex c) { return to_stage(a) < to_stage(c); };
    if (!std::is_sorted(first, last, by_destination)) std::stable_sort(first, last, by_destination);
  }
  return sorted;
}

std::int64_t channel_key(const Instruction& in, int num_stages) {
  const Endpoint e = endpoint_of(in);
  return (static_cast<std::int64_t>(e.from_stage) * 2 + e.kind) * num_stages + e.to_stage;
}

}  // namespace

Problem check_channels(const FlatSchedule& flat, std::vector<Vertex>& partner) {
  const Schedule& schedule = *flat.schedule;
  const int num_stages = schedule.num_stages;
  std::vector<Vertex> sends, recvs;
  for (std::size_t v = 0; v < flat.size(); ++v) {
    const Op op = flat.instr[v]->op;
    if (is_send(op)) sends.push_back(static_cast<Vertex>(v));
    else if (is_recv(op)) recvs.push_back(static_cast<Vertex>(v));
  }
  sends = by_channel(flat, sends, num_stages);
  recvs = by_channel(flat, recvs, num_stages);
  partner.assign(flat.size(), -1);

  // stamp[mb] == channel number when the channel already sent mb: catches a micro-batch sent twice.
  std::vector<std::int64_t> stamp(static_cast<std::size_t>(schedule.num_micro_batches), -1);
  std::vector<Vertex> first_send_of(static_cast<std::size_t>(schedule.num_micro_batches), -1);
  constexpr std::int64_t kEnd = INT64_MAX;
  std::size_t i = 0, j = 0;
  std::int64_t channel_number = 0;
  while (i < sends.size() || j < recvs.size()) {
    const std::int64_t send_key = i < sends.size() ? channel_key(*flat.instr[sends[i]], num_stages) : kEnd;
    const std::int64_t recv_key = j < recvs.size() ? channel_key(*flat.instr[recvs[j]], num_stages) : kEnd;
    const std::int64_t key = std::min(send_key, recv_key);
    std::size_t send_end = i, recv_end = j;
    while (send_end < sends.size() && channel_key(*flat.instr[sends[send_end]], num_stages) == key) ++send_end;
    while (recv_end < recvs.size() && channel_key(*flat.instr[recvs[recv_end]], num_stages) == key) ++recv_end;
    const std::size_t num_sends = send_end - i, num_recvs = recv_end - j;
    const Instruction& any = *flat.instr[num_sends ? sends[i] : recvs[j]];
    const Endpoint e = endpoint_of(any);
    const std::string kind = e.kind == 0 ? "activation" : "gradient";
    const std::string from = "stage " + num(e.from_stage) + " (rank " + num(schedule.stage_to_rank[e.from_stage]) + ")";
    const std::string to = "stage " + num(e.to_stage) + " (rank " + num(schedule.stage_to_rank[e.to_stage]) + ")";

    for (std::size_t k = 0; k < num_sends; ++k) {
      const Vertex send = sends[i + k];
      const int mb = flat.instr[send]->micro_batch;
      if (stamp[mb] == channel_number)
        return flat.problem_at(send, "sends the " + kind + " of micro-batch " + num(mb) + " to " + to + " a second time (first at " +
                                         flat.short_name(first_send_of[mb]) + ")");
      stamp[mb] = channel_number;
      first_send_of[mb] = send;
    }
    for (std::size_t k = 0; k < std::min(num_sends, num_recvs); ++k) {
      const Vertex send = sends[i + k], recv = recvs[j + k];
      if (flat.instr[send]->micro_batch != flat.instr[recv]->micro_batch)
        return flat.problem_at(recv, "receives micro-batch " + num(flat.instr[recv]->micro_batch) + " as the " + ordinal(k + 1) + " " +
                                         kind + " from " + from + ", but the " + ordinal(k + 1) + " one sent is micro-batch " +
                                         num(flat.instr[send]->micro_batch) + " (" + flat.short_name(send) +
                                         "); sends and receives between two stages are matched in order");
      partner[send] = recv;
      partner[recv] = send;
    }
    if (num_sends > num_recvs)
      return flat.problem_at(sends[i + num_recvs], "is never received: " + to + " receives " + num(static_cast<long long>(num_recvs)) +
                                                      " " + kind + "s from stage " + num(e.from_stage) + ", this is the " +
                                                      ordinal(static_cast<long long>(num_recvs) + 1) + " send");
    if (num_recvs > num_sends)
      return flat.problem_at(recvs[j + num_sends], "has no matching send: " + from + " sends " + num(static_cast<long long>(num_sends)) +
                                                      " " + kind + "s to stage " + num(e.to_stage) + ", this is the " +
                                                      ordinal(static_cast<long long>(num_sends) + 1) + " receive");
    i = send_end;
    j = recv_end;
    ++channel_number;
  }
  return std::nullopt;
}

}  // namespace pipescope::validation
