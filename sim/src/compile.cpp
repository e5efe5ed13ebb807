// Turns a schedule into the simulator's arrays in one walk over its programs: the instructions
// numbered rank after rank in program order (the numbering of the core's ScheduleIndex), with
// what only the event loop needs: sends matched to receives in order per channel (SPEC.md
// section 3), transfers and links, and same-rank dependencies checked once so that the event
// loop never has to.
#include <algorithm>
#include <map>
#include <optional>
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

std::int32_t CompiledSchedule::step_of(std::int32_t index) const {
  const std::int32_t rank = rank_of_instruction(index);
  const auto first = step_begin.begin() + rank_first_step[rank];
  const auto last = step_begin.begin() + rank_first_step[rank + 1];
  // The last step starting at or before `index`: empty steps before it start there too.
  return static_cast<std::int32_t>(std::upper_bound(first, last, index) - first) - 1;
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

// A send or receive as its channel's list holds it. The lists are only built to name the
// first mismatch of a schedule whose channels do not pair up (ProgramCompiler::refuse_unmatched).
struct ChannelEntry {
  std::int32_t index;
  std::int32_t micro_batch;
};

// The sends (or the receives) of every channel, counted per channel in program order. Channels
// get list ids in the order they are first seen; the map from channel to list id is only asked
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
  // Counts instruction `index` into `list`.
  void add(std::int32_t list, std::int32_t index) {
    if (size[list]++ == 0) first_index[list] = index;
  }

  std::unordered_map<Channel, std::int32_t> id_of_channel;
  std::vector<std::int32_t> size;         // per list: its sends (receives)
  std::vector<std::int32_t> first_index;  // per list: its first instruction

 private:
  std::int32_t id_of(Channel channel) {
    auto [it, inserted] = id_of_channel.try_emplace(channel, static_cast<std::int32_t>(size.size()));
    if (inserted) {
      size.push_back(0);
      first_index.push_back(-1);
    }
    return it->second;
  }

  std::vector<std::int32_t> neighbour_list_;  // per (stage, is gradient, peer is the next stage)
};

// compile() in one walk over the instructions, rank after rank in program order, from a
// Schedule or straight from `lower_streamed`: add() checks each instruction, numbers it and
// counts its send or receive in its channel; finish() pairs each channel's k-th send with its
// k-th receive into transfers.
// The schedule is of a valid shape and its transfers, if its stages cross ranks, are there.
class ProgramCompiler {
 public:
  ProgramCompiler(const Schedule& shell, std::size_t num_instructions)
      : shell_(shell),
        num_stages_(shell.num_stages),
        num_mb_(std::max(shell.num_micro_batches, 1)),
        forward_seen_(static_cast<std::size_t>(num_stages_) * num_mb_, 0),
        backward_seen_(forward_seen_.size(), 0),
        sends_(num_stages_),
        recvs_(num_stages_) {
    out_.name = shell.name;
    out_.num_ranks = shell.num_ranks;
    out_.num_stages = num_stages_;
    out_.num_micro_batches = shell.num_micro_batches;
    out_.stage_to_rank = shell.stage_to_rank;
    out_.instructions.reserve(num_instructions);
    out_.rank_begin.reserve(static_cast<std::size_t>(shell.num_ranks) + 1);
    out_.rank_first_step.reserve(static_cast<std::size_t>(shell.num_ranks) + 1);
  }

  // Starts rank `rank`'s program, `num_steps` steps long (idle ones included).
  void begin_rank(int rank, int num_steps) {
    end_rank();
    rank_ = rank;
    program_steps_ = num_steps;
    out_.rank_begin.push_back(static_cast<std::int32_t>(out_.instructions.size()));
    out_.rank_first_step.push_back(static_cast<std::int32_t>(out_.step_begin.size()));
    steps_ = 0;
  }

  void add(int step_index, const Instruction& instr) {
    reach_step(step_index + 1);
    auto where = [&] { return place(rank_, step_index, instr); };
    if (instr.stage < 0 || instr.stage >= num_stages_)
      throw ScheduleError(where() + ": stage " + std::to_string(instr.stage) + " does not exist (" +
                          std::to_string(num_stages_) + " stages)");
    if (shell_.stage_to_rank[instr.stage] != rank_)
      throw ScheduleError(where() + ": stage " + std::to_string(instr.stage) + " is held by rank " +
                          std::to_string(shell_.stage_to_rank[instr.stage]));
    if (needs_micro_batch(instr.op) && (instr.micro_batch < 0 || instr.micro_batch >= num_mb_))
      throw ScheduleError(where() + ": micro-batch out of range (" + std::to_string(shell_.num_micro_batches) +
                          " micro-batches)");
    const int s = instr.stage;
    const int mb = instr.micro_batch;
    switch (instr.op) {
      case Op::ForwardPass:
        if (same_rank(s, s - 1) && !forward_seen_[slot(s - 1, mb)])
          throw ScheduleError(where() + ": its input, the forward of stage " + std::to_string(s - 1) +
                              ", comes later on the same rank");
        forward_seen_[slot(s, mb)] = 1;
        break;
      case Op::BackwardPass:
      case Op::BackwardInput:
        if (!forward_seen_[slot(s, mb)]) throw ScheduleError(where() + ": its forward comes later on the same rank");
        if (same_rank(s, s + 1) && !backward_seen_[slot(s + 1, mb)])
          throw ScheduleError(where() + ": its gradient, the backward of stage " + std::to_string(s + 1) +
                              ", comes later on the same rank");
        backward_seen_[slot(s, mb)] = 1;
        break;
      case Op::BackwardWeight:
        if (!backward_seen_[slot(s, mb)]) throw ScheduleError(where() + ": its BackwardInput comes later on the same rank");
        break;
      default:
        break;
    }
    CompiledInstruction ci;
    ci.op = instr.op;
    ci.stage = s;
    ci.micro_batch = mb;
    ci.overlaps_next_backward = instr.overlaps_next_backward && instr.op == Op::ForwardPass;
    if (is_p2p_op(instr.op)) {
      const int peer = resolved_peer_stage(instr);
      if (peer < 0 || peer >= num_stages_)
        throw ScheduleError(where() + ": peer stage " + std::to_string(peer) + " does not exist");
      const bool grad = instr.op == Op::SendGrad || instr.op == Op::RecvGrad;
      const bool send = is_send_op(instr.op);
      ChannelLists& lists = send ? sends_ : recvs_;
      const std::int32_t list = lists.list_of(send ? channel_of(grad, s, peer) : channel_of(grad, peer, s), grad, s, peer);
      lists.add(list, static_cast<std::int32_t>(out_.instructions.size()));
      // The list until finish() knows the transfer ids: the k-th send (receive) of a list met
      // in instruction order is its channel's k-th.
      ci.transfer = list;
    }
    out_.instructions.push_back(ci);
  }

  // The current rank's program holds `num_steps` steps (idle ones at its end included).
  void reach_step(int num_steps) {
    for (; steps_ < num_steps; ++steps_) out_.step_begin.push_back(static_cast<std::int32_t>(out_.instructions.size()));
  }

  CompiledSchedule finish(Communication communication) {
    end_rank();
    out_.rank_begin.push_back(static_cast<std::int32_t>(out_.instructions.size()));
    out_.rank_first_step.push_back(static_cast<std::int32_t>(out_.step_begin.size()));
    match_transfers();
    if (communication == Communication::Torch) link_torch_waits(out_);
    return std::move(out_);
  }

 private:
  std::size_t slot(int stage, int mb) const { return static_cast<std::size_t>(stage) * num_mb_ + mb; }
  bool same_rank(int a, int b) const {
    return b >= 0 && b < num_stages_ && shell_.stage_to_rank[a] == shell_.stage_to_rank[b];
  }

  // The text of an instruction leaves out its buffer and peer: op, stage and micro-batch name it.
  std::string describe(std::int32_t i) const {
    const CompiledInstruction& ci = out_.instructions[i];
    return place(out_.rank_of_instruction(i), out_.step_of(i), Instruction{ci.op, ci.stage, ci.micro_batch});
  }

  // Transfer ids channel after channel, in the order the send map holds its channels (the ids
  // the event loop breaks ties with): the k-th send of a channel is matched with its k-th
  // receive, written into the instructions and the transfers in one walk in their order.
  void match_transfers() {
    if (!channels_pair_up()) refuse_unmatched();
    std::vector<std::int32_t> next_of_send_list(sends_.size.size(), 0);
    std::vector<std::int32_t> next_of_recv_list(recvs_.size.size(), 0);
    std::map<std::pair<int, int>, std::int32_t> link_ids;
    std::size_t num_transfers = 0;
    for (std::int32_t n : sends_.size) num_transfers += static_cast<std::size_t>(n);
    out_.transfers.resize(num_transfers);
    std::int32_t first = 0;
    for (const auto& [channel, send_id] : sends_.id_of_channel) {
      const std::int32_t recv_id = recvs_.id_of_channel.find(channel)->second;
      // A channel joins two stages, so all its transfers share the pair of ranks and the link
      // (add() checked that every instruction sits on its stage's rank): found once.
      const std::int32_t from_rank = out_.rank_of_instruction(sends_.first_index[send_id]);
      const std::int32_t to_rank = out_.rank_of_instruction(recvs_.first_index[recv_id]);
      auto [link, inserted] = link_ids.try_emplace({from_rank, to_rank}, static_cast<std::int32_t>(out_.links.size()));
      if (inserted) out_.links.emplace_back(from_rank, to_rank);
      next_of_send_list[send_id] = next_of_recv_list[recv_id] = first;
      const std::int32_t end = first + sends_.size[send_id];
      for (std::int32_t t = first; t < end; ++t) {
        CompiledTransfer& transfer = out_.transfers[t];
        transfer.from_rank = from_rank;
        transfer.to_rank = to_rank;
        transfer.link = link->second;
      }
      first = end;
    }
    // The second end of a transfer to be met compares its micro-batch with the first's.
    bool pairs_agree = true;
    for (std::size_t i = 0; i < out_.instructions.size(); ++i) {
      CompiledInstruction& ci = out_.instructions[i];
      if (!is_p2p_op(ci.op)) continue;
      const bool send = is_send_op(ci.op);
      ci.transfer = (send ? next_of_send_list : next_of_recv_list)[ci.transfer]++;
      CompiledTransfer& transfer = out_.transfers[ci.transfer];
      (send ? transfer.send_index : transfer.recv_index) = static_cast<std::int32_t>(i);
      const std::int32_t other = send ? transfer.recv_index : transfer.send_index;
      if (other >= 0) pairs_agree = pairs_agree && out_.instructions[other].micro_batch == ci.micro_batch;
    }
    if (pairs_agree) return;
    for (const CompiledTransfer& transfer : out_.transfers)  // the first in matching order
      if (out_.instructions[transfer.send_index].micro_batch != out_.instructions[transfer.recv_index].micro_batch)
        throw ScheduleError(describe(transfer.recv_index) + ": matched in order with " + describe(transfer.send_index) +
                            ", which sends another micro-batch");
  }

  // Every channel has as many receives as sends.
  bool channels_pair_up() const {
    for (const auto& [channel, send_id] : sends_.id_of_channel) {
      auto it = recvs_.id_of_channel.find(channel);
      if (it == recvs_.id_of_channel.end() || recvs_.size[it->second] != sends_.size[send_id]) return false;
    }
    return sends_.id_of_channel.size() == recvs_.id_of_channel.size();
  }

  // Names the first problem in the order matching meets it, channel after channel: a receive
  // of another micro-batch than its send, then a send with no receive; after them all, a
  // receive with no send. Only called when some channel does not pair up: it builds the lists.
  [[noreturn, gnu::cold]] void refuse_unmatched() const {
    std::vector<std::vector<ChannelEntry>> send_lists(sends_.size.size()), recv_lists(recvs_.size.size());
    for (std::size_t i = 0; i < out_.instructions.size(); ++i) {
      const CompiledInstruction& ci = out_.instructions[i];
      if (is_p2p_op(ci.op))
        (is_send_op(ci.op) ? send_lists : recv_lists)[ci.transfer].push_back({static_cast<std::int32_t>(i), ci.micro_batch});
    }
    for (const auto& [channel, send_id] : sends_.id_of_channel) {
      const std::vector<ChannelEntry>& send_list = send_lists[send_id];
      auto it = recvs_.id_of_channel.find(channel);
      const std::vector<ChannelEntry> none;
      const std::vector<ChannelEntry>& recv_list = it == recvs_.id_of_channel.end() ? none : recv_lists[it->second];
      for (std::size_t k = 0; k < send_list.size(); ++k) {
        if (k == recv_list.size()) throw ScheduleError(describe(send_list[k].index) + ": no matching receive");
        if (send_list[k].micro_batch != recv_list[k].micro_batch)
          throw ScheduleError(describe(recv_list[k].index) + ": matched in order with " + describe(send_list[k].index) +
                              ", which sends another micro-batch");
      }
    }
    for (const auto& [channel, recv_id] : recvs_.id_of_channel) {
      auto it = sends_.id_of_channel.find(channel);
      const std::size_t matched = it == sends_.id_of_channel.end() ? 0 : send_lists[it->second].size();
      if (matched < recv_lists[recv_id].size())
        throw ScheduleError(describe(recv_lists[recv_id][matched].index) + ": no matching send");
    }
    throw ScheduleError(out_.name + ": the sends and receives do not pair up");  // not reached
  }

  void end_rank() {
    if (rank_ >= 0) reach_step(program_steps_);
  }

  const Schedule& shell_;
  const int num_stages_;
  const int num_mb_;
  CompiledSchedule out_;
  int rank_ = -1;
  int program_steps_ = 0;  // the current rank's program length in steps
  int steps_ = 0;          // of them, recorded in step_begin
  // Per (stage, micro-batch): forward / backward-for-input done so far on its own rank.
  std::vector<char> forward_seen_;
  std::vector<char> backward_seen_;
  ChannelLists sends_, recvs_;
};

CompiledSchedule compile_programs(const Schedule& schedule) {
  ProgramCompiler compiler(schedule, schedule.instruction_count());
  for (int rank = 0; rank < schedule.num_ranks; ++rank) {
    const Program& program = schedule.programs[rank];
    compiler.begin_rank(rank, static_cast<int>(program.size()));
    for (std::size_t t = 0; t < program.size(); ++t)
      for (const Instruction& instr : program[t]) compiler.add(static_cast<int>(t), instr);
  }
  return compiler.finish(schedule.communication);
}

// Compiles lower_streamed's programs as they come: one rank's copy at a time.
class StreamedCompile final : public FlatProgramConsumer {
 public:
  void begin(const Schedule& shell, std::size_t total_instructions) override {
    shell_ = shell;
    compiler_.emplace(shell_, total_instructions);
  }
  void program(const FlatProgram& flat) override {
    compiler_->begin_rank(flat.rank, flat.num_steps);
    for (std::size_t i = 0; i < flat.instructions.size(); ++i) compiler_->add(flat.step_of[i], flat.instructions[i]);
  }
  bool wants_buffers() const override { return false; }  // the simulator does not read them
  CompiledSchedule finish() { return compiler_->finish(shell_.communication); }

 private:
  Schedule shell_;
  std::optional<ProgramCompiler> compiler_;
};

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

CompiledSchedule compile(ComputeOrder&& order) {
  StreamedCompile streamed;
  lower_streamed(std::move(order), streamed);
  return streamed.finish();
}

}  // namespace pipescope::sim
