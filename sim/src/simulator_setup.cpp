// The event loop's set-up: per stage its costs and effects, per rank its static memory, per
// transfer its state and the links, the ranks each barrier waits for; and the check that no
// clock can overflow.
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"
#include "simulator_engine.hpp"

namespace pipescope::sim::event_loop {

// Per stage its costs and effects; per rank its static memory and first instruction.
void Engine::prepare_stages() {
  costs_.check(s_.num_stages);
  links_mode_ = costs_.transfer_model == TransferModel::Links;
  stage_.resize(static_cast<std::size_t>(s_.num_stages));
  for (int s = 0; s < s_.num_stages; ++s) stage_[s] = costs_.stage(s);
  effects_.resize(static_cast<std::size_t>(s_.num_stages));
  for (int s = 0; s < s_.num_stages; ++s) effects_[s] = costs_.runtime.stage(s);
  grad_buffer_held_.assign(static_cast<std::size_t>(s_.num_stages), 0);
  find_overlapped_steps();
  weight_pass_start_s_.assign(static_cast<std::size_t>(s_.num_stages), 0.0);
  weight_pass_s_.assign(static_cast<std::size_t>(s_.num_stages), 0.0);
  deferred_ = deferred_weights(s_, costs_);
  flushed_before_.assign(static_cast<std::size_t>(s_.num_ranks), -1);

  ranks_.assign(static_cast<std::size_t>(s_.num_ranks), RankState{});
  for (int s = 0; s < s_.num_stages; ++s) {
    std::int64_t& held = ranks_[s_.stage_to_rank[s]].memory_bytes;
    if (__builtin_add_overflow(held, stage_[s].static_bytes, &held))
      throw UsageError(fmt::format("rank {}: its stages' static memory passes 2^63 bytes", s_.stage_to_rank[s]));
  }
  for (std::int32_t rank = 0; rank < s_.num_ranks; ++rank) {
    ranks_[rank].pc = s_.rank_begin[rank];
    ranks_[rank].peak_bytes = ranks_[rank].memory_bytes;
  }
}

// Per transfer its arrival (unknown yet) and waiters; the receive contention lists; the links.
void Engine::prepare_transfers() {
  const std::size_t num_transfers = s_.transfers.size();
  for (int s = 0; s < s_.num_stages && !contention_; ++s) contention_ = effects_[s].receives_contend();
  if (contention_) {
    undelivered_.assign(s_.links.size(), {});
    std::map<std::pair<int, int>, std::int32_t> link_of;
    for (std::size_t l = 0; l < s_.links.size(); ++l) link_of.emplace(s_.links[l], static_cast<std::int32_t>(l));
    reverse_link_.assign(s_.links.size(), -1);
    for (std::size_t l = 0; l < s_.links.size(); ++l)
      if (auto it = link_of.find({s_.links[l].second, s_.links[l].first}); it != link_of.end())
        reverse_link_[l] = it->second;
    received_s_.assign(num_transfers, kUnknown);
  }
  arrival_s_.assign(num_transfers, kUnknown);
  if (options_.build_trace) posted_s_.assign(num_transfers, 0.0);
  receiver_waiting_.assign(num_transfers, 0);
  if (links_mode_) {
    std::vector<std::int64_t> activation_bytes;
    activation_bytes.reserve(stage_.size());
    for (const StageCost& c : stage_) activation_bytes.push_back(c.activation_bytes);
    links_ = LinkModel::for_schedule(s_, activation_bytes, topology_, options_.share_links);
  }
}

// Which ranks each barrier waits for.
void Engine::prepare_barriers() {
  tied_member_.assign(static_cast<std::size_t>(s_.num_ranks), 0);
  for (std::int32_t rank = 0; rank < s_.num_ranks; ++rank) {
    // From the end, where the lowering puts them: a training program is read no further back
    // than its last step.
    bool steps = false, reduces_tied = false;
    for (std::int32_t i = s_.rank_begin[rank + 1] - 1; i >= s_.rank_begin[rank] && !(steps && reduces_tied); --i) {
      steps = steps || s_.instructions[i].op == Op::OptimizerStep;
      reduces_tied = reduces_tied || s_.instructions[i].op == Op::ReduceTiedGrads;
    }
    const bool holds_ends = s_.num_stages > 0 && (s_.stage_to_rank.front() == rank || s_.stage_to_rank.back() == rank);
    tied_member_[rank] = reduces_tied && holds_ends;
    if (costs_.runtime.optimizer_sync && steps) ++barriers_[kOptimizerBarrier].members;
    if (costs_.runtime.reduce_tied_sync && tied_member_[rank]) ++barriers_[kTiedBarrier].members;
  }
}

// No clock of the simulation can pass the sum of every instruction's longest cost and every
// transfer's: when that sum is not finite (or near it) the event loop would meet infinities,
// which it reads as "never" and reports as a deadlock.
void Engine::check_time_bound() const {
  const double overhead_s = costs_.runtime.instruction_overhead_s;
  // The longest an instruction can take, per (stage, op): a table, so that the walk below is
  // a lookup and an add per instruction.
  std::vector<double> longest(static_cast<std::size_t>(s_.num_stages) * kNumOps, 0.0);
  for (int stage = 0; stage < s_.num_stages; ++stage) {
    const StageCost& c = stage_[stage];
    const StageRuntimeEffects& e = effects_[stage];
    for (int op_index = 0; op_index < kNumOps; ++op_index) {
      double op_longest = 0;
      switch (static_cast<Op>(op_index)) {
        case Op::ForwardPass: op_longest = c.f_s; break;
        case Op::BackwardPass: op_longest = c.backward_pass_s(); break;
        case Op::BackwardInput: op_longest = c.b_s; break;
        case Op::BackwardWeight: op_longest = c.w_s; break;
        case Op::LoadMicroBatch: op_longest = c.load_s; break;
        case Op::ReduceGrads: op_longest = c.reduce_grads_s; break;
        case Op::ReduceTiedGrads: op_longest = c.reduce_tied_s; break;
        case Op::OptimizerStep: op_longest = c.optimizer_s; break;
        case Op::SendActivation:
        case Op::SendGrad: op_longest = e.send_s; break;
        case Op::RecvActivation:
        case Op::RecvGrad: op_longest = std::max(e.recv_s, e.recv_contended_s); break;
        case Op::WaitSendActivation:
        case Op::WaitSendGrad:
        case Op::WaitReduceGrads:
        case Op::Unshard:
        case Op::Reshard: break;
      }
      longest[static_cast<std::size_t>(stage) * kNumOps + op_index] = op_longest + overhead_s;
    }
  }
  // Four running sums, not one: the adds of one chain would wait for each other.
  std::array<double, 4> sums{costs_.runtime.step_overhead_s, 0.0, 0.0, 0.0};
  const std::size_t n = s_.instructions.size();
  for (std::size_t i = 0; i < n; ++i) {
    const CompiledInstruction& ci = s_.instructions[i];
    sums[i % 4] += longest[static_cast<std::size_t>(ci.stage) * kNumOps + static_cast<std::size_t>(ci.op)];
  }
  double bound_s = (sums[0] + sums[1]) + (sums[2] + sums[3]);
  for (std::size_t t = 0; t < s_.transfers.size(); ++t) {
    if (!links_mode_) {
      bound_s += costs_.c_s;
      continue;
    }
    bound_s += links_.unshared_time_s(static_cast<std::int32_t>(t));
  }
  if (!(bound_s <= kMaxSimulatedTimeS))
    throw CostOverflowError(
        fmt::format("the costs add up to {:g} s over the {} instructions of one iteration, more than "
                    "the simulator's clock holds ({:g} s)",
                    bound_s, s_.instructions.size(), kMaxSimulatedTimeS));
}

}  // namespace pipescope::sim::event_loop
