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

struct Endpoint {
  int from_stage;
  int to_stage;
  int kind;  // 0 activation, 1 gradient
};

Endpoint endpoint_of(const Node& in) {
  const int kind = (in.op == Op::SendActivation || in.op == Op::RecvActivation) ? 0 : 1;
  if (is_send(in.op)) return {in.stage, in.peer, kind};
  return {in.peer, in.stage, kind};
}

// One send or receive, with its channel spelled out so the pairing walks memory in order.
struct Transfer {
  std::int64_t channel;  // ((from stage * 2 + kind) * stages + to stage)
  int micro_batch;
  Vertex vertex;
};

// The transfers of one direction (sends or receives) ordered by channel, and inside a channel
// by program order: a stable counting sort by (from stage, kind), then a stable sort by
// destination where a sender has several (skip connections).
std::vector<Transfer> by_channel(const FlatSchedule& flat, bool want_sends, int num_stages) {
  const std::size_t buckets = static_cast<std::size_t>(num_stages) * 2;
  std::vector<std::size_t> start(buckets + 1, 0);
  const Vertex n = static_cast<Vertex>(flat.size());
  for (Vertex v = 0; v < n; ++v) {
    const Node& in = flat.node[v];
    if (want_sends ? !is_send(in.op) : !is_recv(in.op)) continue;
    const Endpoint e = endpoint_of(in);
    ++start[static_cast<std::size_t>(e.from_stage) * 2 + e.kind + 1];
  }
  for (std::size_t b = 0; b < buckets; ++b) start[b + 1] += start[b];
  std::vector<Transfer> sorted(start.back());
  std::vector<std::size_t> next(start.begin(), start.end() - 1);
  for (Vertex v = 0; v < n; ++v) {
    const Node& in = flat.node[v];
    if (want_sends ? !is_send(in.op) : !is_recv(in.op)) continue;
    const Endpoint e = endpoint_of(in);
    const std::size_t bucket = static_cast<std::size_t>(e.from_stage) * 2 + e.kind;
    sorted[next[bucket]++] = {static_cast<std::int64_t>(bucket) * num_stages + e.to_stage, in.micro_batch, v};
  }
  auto by_key = [](const Transfer& a, const Transfer& b) { return a.channel < b.channel; };
  for (std::size_t b = 0; b < buckets; ++b) {
    auto first = sorted.begin() + static_cast<std::ptrdiff_t>(start[b]);
    auto last = sorted.begin() + static_cast<std::ptrdiff_t>(start[b + 1]);
    if (!std::is_sorted(first, last, by_key)) std::stable_sort(first, last, by_key);
  }
  return sorted;
}

}  // namespace

Problem check_channels(const FlatSchedule& flat, std::vector<Vertex>& partner) {
  const Schedule& schedule = *flat.schedule;
  const int num_stages = schedule.num_stages;
  const std::vector<Transfer> sent = by_channel(flat, true, num_stages);
  const std::vector<Transfer> received = by_channel(flat, false, num_stages);
  partner.assign(flat.size(), -1);

  // stamp[mb] == channel number when the channel already sent mb: catches a micro-batch sent twice.
  std::vector<std::int64_t> stamp(static_cast<std::size_t>(schedule.num_micro_batches), -1);
  std::vector<Vertex> first_send_of(static_cast<std::size_t>(schedule.num_micro_batches), -1);
  constexpr std::int64_t kEnd = INT64_MAX;
  std::size_t i = 0, j = 0;
  std::int64_t channel_number = 0;
  while (i < sent.size() || j < received.size()) {
    const std::int64_t key = std::min(i < sent.size() ? sent[i].channel : kEnd, j < received.size() ? received[j].channel : kEnd);
    std::size_t send_end = i, recv_end = j;
    while (send_end < sent.size() && sent[send_end].channel == key) ++send_end;
    while (recv_end < received.size() && received[recv_end].channel == key) ++recv_end;
    const std::size_t num_sends = send_end - i, num_recvs = recv_end - j;

    for (std::size_t k = i; k < send_end; ++k) {
      const int mb = sent[k].micro_batch;
      if (stamp[mb] == channel_number) {
        const Endpoint e = endpoint_of(flat.node[sent[k].vertex]);
        return problem_at(flat, sent[k].vertex, "sends the " + std::string(e.kind == 0 ? "activation" : "gradient") + " of micro-batch " +
                                                    num(mb) + " to stage " + num(e.to_stage) + " a second time (first at " +
                                                    flat.short_name(first_send_of[mb]) + ")");
      }
      stamp[mb] = channel_number;
      first_send_of[mb] = sent[k].vertex;
    }
    for (std::size_t k = 0; k < std::min(num_sends, num_recvs); ++k) {
      const Transfer& send = sent[i + k];
      const Transfer& recv = received[j + k];
      if (send.micro_batch != recv.micro_batch) {
        const Endpoint e = endpoint_of(flat.node[send.vertex]);
        return problem_at(flat, recv.vertex, "receives micro-batch " + num(recv.micro_batch) + " as the " + ordinal(static_cast<long long>(k) + 1) +
                                                 " " + (e.kind == 0 ? "activation" : "gradient") + " from stage " + num(e.from_stage) +
                                                 ", but the " + ordinal(static_cast<long long>(k) + 1) + " one sent is micro-batch " +
                                                 num(send.micro_batch) + " (" + flat.short_name(send.vertex) +
                                                 "); sends and receives between two stages are matched in order");
      }
      partner[send.vertex] = recv.vertex;
      partner[recv.vertex] = send.vertex;
    }
    if (num_sends != num_recvs) {
      const Endpoint e = endpoint_of(flat.node[num_sends ? sent[i].vertex : received[j].vertex]);
      const std::string kind = e.kind == 0 ? "activation" : "gradient";
      if (num_sends > num_recvs)
        return problem_at(flat, sent[i + num_recvs].vertex,
                                "is never received: stage " + num(e.to_stage) + " (rank " + num(schedule.stage_to_rank[e.to_stage]) +
                                    ") receives " + num(static_cast<long long>(num_recvs)) + " " + kind + "s from stage " +
                                    num(e.from_stage) + ", this is the " + ordinal(static_cast<long long>(num_recvs) + 1) + " send");
      return problem_at(flat, received[j + num_sends].vertex,
                              "has no matching send: stage " + num(e.from_stage) + " (rank " + num(schedule.stage_to_rank[e.from_stage]) +
                                  ") sends " + num(static_cast<long long>(num_sends)) + " " + kind + "s to stage " + num(e.to_stage) +
                                  ", this is the " + ordinal(static_cast<long long>(num_sends) + 1) + " receive");
    }
    i = send_end;
    j = recv_end;
    ++channel_number;
  }
  return std::nullopt;
}

}  // namespace pipescope::validation
