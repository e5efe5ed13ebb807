#include "torch_message_order.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>

namespace pipescope {
namespace {

struct Position {
  int rank;
  std::size_t index;  // in the rank's program order
};

// One rank's program as one sequence, each instruction with its step.
struct Placed {
  Instruction instr;
  std::size_t step;
};

}  // namespace

void post_receives_in_send_order(Schedule& schedule) {
  const int num_ranks = static_cast<int>(schedule.programs.size());
  auto rank_of = [&](int stage) { return stage >= 0 && stage < schedule.num_stages ? schedule.stage_to_rank[stage] : -1; };
  std::vector<std::vector<Placed>> rows(schedule.programs.size());
  for (int r = 0; r < num_ranks; ++r)
    for (std::size_t t = 0; t < schedule.programs[r].size(); ++t)
      for (const Instruction& instr : schedule.programs[r][t]) rows[r].push_back({instr, t});

  // Pair sends with receives per (from stage, to stage, kind), in order: SPEC section 3.
  std::map<std::tuple<int, int, bool>, std::vector<Position>> sends, receives;
  // Per send: its ordinal among the sends of its rank to the receiving rank.
  std::vector<std::vector<std::size_t>> send_ordinal(rows.size());
  std::map<std::pair<int, int>, std::size_t> sends_so_far;  // (from rank, to rank)
  for (int r = 0; r < num_ranks; ++r) {
    send_ordinal[r].assign(rows[r].size(), 0);
    for (std::size_t i = 0; i < rows[r].size(); ++i) {
      const Instruction& instr = rows[r][i].instr;
      if (!is_p2p(instr.op)) continue;
      const int peer = resolved_peer_stage(instr);
      const bool grad = instr.op == Op::SendGrad || instr.op == Op::RecvGrad;
      if (is_send(instr.op)) {
        sends[{instr.stage, peer, grad}].push_back({r, i});
        send_ordinal[r][i] = sends_so_far[{r, rank_of(peer)}]++;
      } else {
        receives[{peer, instr.stage, grad}].push_back({r, i});
      }
    }
  }
  // Per (receiving rank, sending rank): (send ordinal, position of the receive).
  std::map<std::pair<int, int>, std::vector<std::pair<std::size_t, std::size_t>>> streams;
  for (const auto& [channel, receive_list] : receives) {
    auto it = sends.find(channel);
    if (it == sends.end() || it->second.size() != receive_list.size()) continue;
    for (std::size_t k = 0; k < receive_list.size(); ++k) {
      const Position send = it->second[k];
      const Position receive = receive_list[k];
      streams[{receive.rank, send.rank}].emplace_back(send_ordinal[send.rank][send.index], receive.index);
    }
  }
  // Each instruction's place in the new order: (anchor, receives first, send ordinal). A moved
  // receive anchors at the earliest position of the receives of messages sent after it, and
  // takes that receive's step.
  std::vector<std::vector<std::tuple<std::size_t, int, std::size_t>>> keys(rows.size());
  for (int r = 0; r < num_ranks; ++r) {
    keys[r].resize(rows[r].size());
    for (std::size_t i = 0; i < rows[r].size(); ++i) keys[r][i] = {i, 1, 0};
  }
  for (auto& [ranks, messages] : streams) {
    std::sort(messages.begin(), messages.end());  // in send order
    std::size_t earliest = SIZE_MAX;
    for (auto m = messages.rbegin(); m != messages.rend(); ++m) {
      earliest = std::min(earliest, m->second);
      keys[ranks.first][m->second] = {earliest, 0, m->first};
    }
  }
  for (int r = 0; r < num_ranks; ++r) {
    std::vector<std::size_t> order(rows[r].size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return keys[r][a] < keys[r][b]; });
    Program& program = schedule.programs[r];
    for (Step& step : program) step.clear();
    for (std::size_t i : order) program[rows[r][std::get<0>(keys[r][i])].step].push_back(rows[r][i].instr);
  }
}

}  // namespace pipescope
