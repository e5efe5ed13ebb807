// Torch's semantics only: its runtime posts all messages between two ranks on one ordered
// stream (torch_message_order.hpp), so the k-th receive rank b posts from rank a must be the
// partner of the k-th send a posts to b. Otherwise the runtime hands one tensor to another
// action's receive: a crash when the shapes differ, wrong values when they agree.
#include <string>
#include <unordered_map>
#include <vector>

#include "checks.hpp"

namespace pipescope::validation {

Problem check_rank_pair_order(const FlatSchedule& flat, const std::vector<Vertex>& partner) {
  const Schedule& schedule = *flat.schedule;
  if (schedule.communication != Communication::Torch) return std::nullopt;
  const long long num_ranks = schedule.num_ranks;
  auto stream = [&](int from_rank, int to_rank) { return from_rank * num_ranks + to_rank; };
  // Per vertex: its ordinal among the sends (receives) of its stream, in program order.
  std::vector<long long> ordinal_of(flat.size(), -1);
  std::unordered_map<long long, long long> sent, received;
  for (Vertex v = 0; v < static_cast<Vertex>(flat.size()); ++v) {
    const Node& in = flat.node[v];
    if (!is_send(in.op) && !is_recv(in.op)) continue;
    const int rank = flat.rank_of(v);
    const int peer_rank = schedule.stage_to_rank[in.peer];
    ordinal_of[v] = is_send(in.op) ? sent[stream(rank, peer_rank)]++ : received[stream(peer_rank, rank)]++;
  }
  for (Vertex v = 0; v < static_cast<Vertex>(flat.size()); ++v) {
    if (!is_recv(flat.node[v].op) || partner[v] < 0 || ordinal_of[partner[v]] == ordinal_of[v]) continue;
    const int rank = flat.rank_of(v);
    const int sender = flat.rank_of(partner[v]);
    return problem_at(flat, v, "is the " + ordinal(ordinal_of[v] + 1) + " receive rank " + num(rank) + " posts from rank " +
                                   num(sender) + ", but its send, " + flat.short_name(partner[v]) + ", is the " +
                                   ordinal(ordinal_of[partner[v]] + 1) + " message rank " + num(sender) + " posts to rank " + num(rank) +
                                   "; torch's runtime matches the messages between two ranks in the order they are posted");
  }
  return std::nullopt;
}

}  // namespace pipescope::validation
