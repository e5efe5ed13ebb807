// Turns a schedule into the simulator's arrays in one walk over its programs: the instructions
// numbered rank after rank in program order (the numbering of the core's ScheduleIndex), with
// what only the event loop needs: sends matched to receives in order per channel (SPEC.md
// section 3), transfers and links, and same-rank dependencies checked once so that the event
// loop never has to.
#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/passes.hpp"
#include "pipescope/core/schedule_index.hpp"
#include "pipescope/sim/simulator.hpp"

namespace pipescope::sim {
namespace {

std::string place(int rank, int step, const Instruction& instr) {
  return "rank " + std::to_string(rank) + ", step " + std::to_string(step) + ", instruction " + to_string(instr);
}

bool has_p2p(const Schedule& schedule) {
  for (const auto& program : schedule.programs)
    for (const auto& step : program)
      for (const auto& instr : step)
        if (is_p2p(instr.op)) return true;
  return false;
}

bool crosses_ranks(const Schedule& schedule) {
  for (std::size_t s = 1; s < schedule.stage_to_rank.size(); ++s)
    if (schedule.stage_to_rank[s] != schedule.stage_to_rank[s - 1]) return true;
  return false;
}

// (is gradient, from stage, to stage) packed into one integer: the sends and receives of a
// channel are matched in order.
using Channel = std::uint64_t;
Channel channel_of(bool grad, int from_stage, int to_stage) {
  return (static_cast<std::uint64_t>(grad) << 62) | (static_cast<std::uint64_t>(from_stage) << 31) |
         static_cast<std::uint64_t>(to_stage);
}

constexpr bool is_send_op(Op op) { return op == Op::SendActivation || op == Op::SendGrad; }
constexpr bool is_p2p_op(Op op) {
  return op == Op::SendActivation || op == Op::SendGrad || op == Op::RecvActivation || op == Op::RecvGrad;
}

}  // namespace

std::int32_t CompiledSchedule::rank_of_instruction(std::int32_t index) const {
  auto it = std::upper_bound(rank_begin.begin(), rank_begin.end(), index);
  return static_cast<std::int32_t>(it - rank_begin.begin()) - 1;
}

namespace {

// Torch's semantics: a receive only posts, and the first compute of its (stage, micro-batch)
// and kind after it (F for an activation, B or I for a gradient) waits for its data; a
// WaitSend* waits for the last send of its (stage, micro-batch) and kind before it. Both get
// that transfer in CompiledInstruction::transfer.
// Out of line: only torch's schedules need it (and g++ 12, inlining it, warns falsely of a free
// of a non-heap pointer).
[[gnu::noinline]] void link_torch_waits(CompiledSchedule& out) {
  out.receives_post_only = true;
  const std::size_t num_mb = static_cast<std::size_t>(std::max(out.num_micro_batches, 1));
  // Per (stage, micro-batch, is gradient): the transfer posted and not yet consumed, -1 if none.
  std::vector<std::int32_t> received(static_cast<std::size_t>(out.num_stages) * num_mb * 2, -1);
  std::vector<std::int32_t> sent(received.size(), -1);
  auto key = [&](const CompiledInstruction& ci, bool grad) {
    return (static_cast<std::size_t>(ci.stage) * num_mb + static_cast<std::size_t>(ci.micro_batch)) * 2 + grad;
  };
  // Stages live on one rank, so one walk over all ranks keeps the per-rank meaning.
  for (CompiledInstruction& ci : out.instructions) {
    switch (ci.op) {
      case Op::RecvActivation:
      case Op::RecvGrad: received[key(ci, ci.op == Op::RecvGrad)] = ci.transfer; break;
      case Op::SendActivation:
      case Op::SendGrad: sent[key(ci, ci.op == Op::SendGrad)] = ci.transfer; break;
      case Op::ForwardPass:
      case Op::BackwardPass:
      case Op::BackwardInput: {
        std::int32_t& posted = received[key(ci, ci.op != Op::ForwardPass)];
        ci.transfer = posted;
        posted = -1;
        break;
      }
      case Op::WaitSendActivation:
      case Op::WaitSendGrad: ci.transfer = sent[key(ci, ci.op == Op::WaitSendGrad)]; break;
      default: break;
    }
  }
}

// A send or receive as its channel's list holds it: the micro-batch is kept beside the index so
// that matching sends with receives reads the lists alone, in order.
struct ChannelEntry {
  std::int32_t index;
  std::int32_t micro_batch;
};

// The sends (or the receives) of every channel, in program order per channel. Channels get
// list ids in the order they are first seen; the map from channel to list id is only asked
// for channels between stages that are not neighbours, the neighbours' ids are kept by
// position. The map sees every channel once, in the order first seen, so it iterates in the
// same order whatever else changes here.
class ChannelLists {
 public:
  explicit ChannelLists(int num_stages) : neighbour_list_(static_cast<std::size_t>(num_stages) * 4, -1) {}

  std::int32_t list_of(Channel channel, bool grad, int stage, int peer) {
    if (peer != stage - 1 && peer != stage + 1) return id_of(channel);
    std::int32_t& cached = neighbour_list_[static_cast<std::size_t>(stage) * 4 + grad * 2 + (peer > stage)];
    if (cached < 0) cached = id_of(channel);
    return cached;
  }
  // Appends to `list`; returns the entry's place in it.
  std::int32_t add(std::int32_t list, std::int32_t index, std::int32_t micro_batch) {
    std::vector<ChannelEntry>& entries = lists[list];
    entries.push_back({index, micro_batch});
    return static_cast<std::int32_t>(entries.size()) - 1;
  }

  std::unordered_map<Channel, std::int32_t> id_of_channel;
  std::vector<std::vector<ChannelEntry>> lists;

 private:
  std::int32_t id_of(Channel channel) {
    auto [it, inserted] = id_of_channel.try_emplace(channel, static_cast<std::int32_t>(lists.size()));
    if (inserted) lists.emplace_back();
    return it->second;
  }

  std::vector<std::int32_t> neighbour_list_;  // per (stage, is gradient, peer is the next stage)
};

// compile() of a schedule of a valid shape whose transfers, if its stages cross ranks, are there.
CompiledSchedule compile_programs(const Schedule& schedule) {
  const int num_stages = schedule.num_stages;
  const int num_mb = std::max(schedule.num_micro_batches, 1);

  CompiledSchedule out;
  out.name = schedule.name;
  out.num_ranks = schedule.num_ranks;
  out.num_stages = num_stages;
  out.num_micro_batches = schedule.num_micro_batches;
  out.stage_to_rank = schedule.stage_to_rank;
  const std::size_t size = schedule.instruction_count();
  out.instructions.reserve(size);
  out.step_of.reserve(size);
  out.rank_begin.reserve(static_cast<std::size_t>(schedule.num_ranks) + 1);

  // Per (stage, micro-batch): forward / backward-for-input done so far on its own rank.
  std::vector<char> forward_seen(static_cast<std::size_t>(num_stages) * num_mb, 0);
  std::vector<char> backward_seen(forward_seen.size(), 0);
  auto slot = [&](int stage, int mb) { return static_cast<std::size_t>(stage) * num_mb + mb; };
  auto same_rank = [&](int a, int b) {
    return b >= 0 && b < num_stages && schedule.stage_to_rank[a] == schedule.stage_to_rank[b];
  };

  ChannelLists sends(num_stages), recvs(num_stages);
  // Per send or receive, in instruction order: its list, and its place in the list in
  // CompiledInstruction::transfer until the transfer ids are known.
  std::vector<std::int32_t> list_of_p2p;
  // The programs rank after rank, step after step, read once: instruction v is the core's
  // ScheduleIndex vertex v (the validator's numbering), with its step in step_of.
  std::int32_t v = 0;
  for (int rank = 0; rank < schedule.num_ranks; ++rank) {
    out.rank_begin.push_back(v);
    const Program& program = schedule.programs[rank];
    for (std::size_t t = 0; t < program.size(); ++t) {
      const int step_index = static_cast<int>(t);
      for (const Instruction& instr : program[t]) {
        auto where = [&] { return place(rank, step_index, instr); };
        if (instr.stage < 0 || instr.stage >= num_stages)
          throw ScheduleError(where() + ": stage " + std::to_string(instr.stage) + " does not exist (" +
                              std::to_string(num_stages) + " stages)");
        if (schedule.stage_to_rank[instr.stage] != rank)
          throw ScheduleError(where() + ": stage " + std::to_string(instr.stage) + " is held by rank " +
                              std::to_string(schedule.stage_to_rank[instr.stage]));
        if (needs_micro_batch(instr.op) && (instr.micro_batch < 0 || instr.micro_batch >= num_mb))
          throw ScheduleError(where() + ": micro-batch out of range (" + std::to_string(schedule.num_micro_batches) +
                              " micro-batches)");
        const int s = instr.stage;
        const int mb = instr.micro_batch;
        switch (instr.op) {
          case Op::ForwardPass:
            if (same_rank(s, s - 1) && !forward_seen[slot(s - 1, mb)])
              throw ScheduleError(where() + ": its input, the forward of stage " + std::to_string(s - 1) +
                                  ", comes later on the same rank");
            forward_seen[slot(s, mb)] = 1;
            break;
          case Op::BackwardPass:
          case Op::BackwardInput:
            if (!forward_seen[slot(s, mb)]) throw ScheduleError(where() + ": its forward comes later on the same rank");
            if (same_rank(s, s + 1) && !backward_seen[slot(s + 1, mb)])
              throw ScheduleError(where() + ": its gradient, the backward of stage " + std::to_string(s + 1) +
                                  ", comes later on the same rank");
            backward_seen[slot(s, mb)] = 1;
            break;
          case Op::BackwardWeight:
            if (!backward_seen[slot(s, mb)])
              throw ScheduleError(where() + ": its BackwardInput comes later on the same rank");
            break;
          default:
            break;
        }
        CompiledInstruction ci;
        ci.op = instr.op;
        ci.stage = s;
        ci.micro_batch = mb;
        if (is_p2p_op(instr.op)) {
          const int peer = resolved_peer_stage(instr);
          if (peer < 0 || peer >= num_stages)
            throw ScheduleError(where() + ": peer stage " + std::to_string(peer) + " does not exist");
          const bool grad = instr.op == Op::SendGrad || instr.op == Op::RecvGrad;
          const bool send = is_send_op(instr.op);
          ChannelLists& lists = send ? sends : recvs;
          const std::int32_t list = lists.list_of(send ? channel_of(grad, s, peer) : channel_of(grad, peer, s), grad, s, peer);
          ci.transfer = lists.add(list, v, mb);
          list_of_p2p.push_back(list);
        }
        out.instructions.push_back(ci);
        out.step_of.push_back(step_index);
        ++v;
      }
    }
  }

  out.rank_begin.push_back(v);
  // The text of an instruction leaves out its buffer and peer: op, stage and micro-batch name it.
  auto describe = [&](std::int32_t i) {
    const CompiledInstruction& ci = out.instructions[i];
    return place(out.rank_of_instruction(i), out.step_of[i], Instruction{ci.op, ci.stage, ci.micro_batch});
  };

  // Transfer ids channel after channel, in the order the send map holds its channels (the ids
  // the event loop breaks ties with), written into the instructions in one walk in their order.
  std::vector<std::int32_t> first_transfer_of_send_list(sends.lists.size(), 0);
  std::vector<std::int32_t> first_transfer_of_recv_list(recvs.lists.size(), 0);
  std::map<std::pair<int, int>, std::int32_t> link_ids;
  std::size_t num_sends = 0;
  for (const auto& list : sends.lists) num_sends += list.size();
  out.transfers.reserve(num_sends);  // grown by doubling, it would touch twice the memory
  for (const auto& [channel, send_id] : sends.id_of_channel) {
    const std::vector<ChannelEntry>& send_list = sends.lists[send_id];
    auto it = recvs.id_of_channel.find(channel);
    const std::vector<ChannelEntry>* recv_list = it == recvs.id_of_channel.end() ? nullptr : &recvs.lists[it->second];
    const std::size_t matched = recv_list ? recv_list->size() : 0;
    if (matched < send_list.size()) throw ScheduleError(describe(send_list[matched].index) + ": no matching receive");
    if (send_list.empty()) continue;
    // A channel joins two stages, so all its transfers share the pair of ranks and the link
    // (the loop above checked that every instruction sits on its stage's rank): found once.
    const std::int32_t from_rank = out.rank_of_instruction(send_list.front().index);
    const std::int32_t to_rank = out.rank_of_instruction(recv_list->front().index);
    auto [link, inserted] = link_ids.try_emplace({from_rank, to_rank}, static_cast<std::int32_t>(out.links.size()));
    if (inserted) out.links.emplace_back(from_rank, to_rank);
    first_transfer_of_send_list[send_id] = static_cast<std::int32_t>(out.transfers.size());
    first_transfer_of_recv_list[it->second] = static_cast<std::int32_t>(out.transfers.size());
    for (std::size_t k = 0; k < send_list.size(); ++k) {
      const ChannelEntry& send = send_list[k];
      const ChannelEntry& recv = (*recv_list)[k];
      if (send.micro_batch != recv.micro_batch)
        throw ScheduleError(describe(recv.index) + ": matched in order with " + describe(send.index) +
                            ", which sends another micro-batch");
      CompiledTransfer transfer;
      transfer.send_index = send.index;
      transfer.recv_index = recv.index;
      transfer.from_rank = from_rank;
      transfer.to_rank = to_rank;
      transfer.link = link->second;
      out.transfers.push_back(transfer);
    }
  }
  for (const auto& [channel, recv_id] : recvs.id_of_channel) {
    auto it = sends.id_of_channel.find(channel);
    const std::size_t matched = it == sends.id_of_channel.end() ? 0 : sends.lists[it->second].size();
    const std::vector<ChannelEntry>& recv_list = recvs.lists[recv_id];
    if (matched < recv_list.size()) throw ScheduleError(describe(recv_list[matched].index) + ": no matching send");
  }
  auto next_list = list_of_p2p.begin();
  for (CompiledInstruction& ci : out.instructions)
    if (is_p2p_op(ci.op))
      ci.transfer += (is_send_op(ci.op) ? first_transfer_of_send_list : first_transfer_of_recv_list)[*next_list++];
  if (schedule.communication == Communication::Torch) link_torch_waits(out);
  return out;
}

}  // namespace

CompiledSchedule compile(const Schedule& input) {
  if (std::optional<std::string> shape = shape_problem(input)) throw ScheduleError(input.name + ": " + *shape);
  if (!has_p2p(input) && crosses_ranks(input)) {
    Schedule lowered = input;
    add_send_recv(lowered);
    return compile_programs(lowered);
  }
  return compile_programs(input);
}

}  // namespace pipescope::sim
