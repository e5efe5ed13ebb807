// A rank's PP: actions in the step read, and their times as the trace shows them: DualPipeV's
// OVERLAP_F_B split into its forward and backward, a transfer's transport call, the kernels an
// action launched, and a receive's data arrival where the computation that needed it waited
// (torch_profiler_rank.hpp; docs/TORCH-TRACES.md says why each).
#include <algorithm>

#include <fmt/format.h>

#include "pipescope/core/terminal_text.hpp"
#include "torch_profiler_rank.hpp"

namespace pipescope::traces::detail {
void RankReader::read_actions() {
  find_process();
  choose_step();
  for (const RankSpan& e : spans_) {
    if (e.role != SpanRole::Action || !in_step(*e)) continue;
    const std::string& name = name_of(*e);
    auto action = parse_pp_action(span_role_argument(name, SpanRole::Action));
    if (!action) {
      notes_.push_back(
          fmt::format("{}: '{}' is not an action torch writes; kept as an operator", file_.path, printable(name)));
      continue;
    }
    action->start_us = e->ts_us;
    action->end_us = e->end_us();
    if (!action->parts.empty() && split_overlap(*action)) continue;
    actions_.push_back(*action);
  }
  std::sort(actions_.begin(), actions_.end(), [](const Action& a, const Action& b) { return a.start_us < b.start_us; });
  attach_transport_calls();
  attach_kernels();
  find_waiting_receives();
}

// DualPipeV's OVERLAP_F_B runs its forward, then its backward (torch 2.15's runtime), inside
// one span: the backward starts at the span's first autograd operator, the forward ends with
// the last operator that started before it (between the two the backward waited for its
// data, if it had to). Both become actions of their own; without such an operator (or parts
// that are not a forward and a backward) the span stays one action.
bool RankReader::split_overlap(const Action& overlap) {
  const auto semicolon = overlap.parts.find(';');
  if (semicolon == std::string::npos) return false;
  auto forward = parse_pp_action(std::string_view(overlap.parts).substr(0, semicolon));
  auto backward = parse_pp_action(std::string_view(overlap.parts).substr(semicolon + 1));
  if (!forward || !backward || forward->kind != EventKind::Forward ||
      (backward->kind != EventKind::Backward && backward->kind != EventKind::BackwardInput))
    return false;
  double split_us = overlap.end_us;
  for (const RankSpan& e : spans_) {
    const double ts = e->ts_us;
    if (ts <= overlap.start_us || ts >= split_us) continue;
    if (e.role == SpanRole::AutogradOperator) split_us = ts;
  }
  if (split_us >= overlap.end_us) return false;
  double forward_end_us = overlap.start_us;
  for (const RankSpan& e : spans_) {
    const double ts = e->ts_us;
    if (ts <= overlap.start_us || ts >= split_us || e.role == SpanRole::TransportCall) continue;
    forward_end_us = std::max(forward_end_us, std::min(split_us, e->end_us()));
  }
  forward->start_us = overlap.start_us, forward->end_us = forward_end_us;
  backward->start_us = split_us, backward->end_us = overlap.end_us;
  actions_.push_back(*forward);
  actions_.push_back(*backward);
  return true;
}

void RankReader::add_stages(std::map<int, int>& stage_rank, std::map<int, std::set<int>>& forwards) const {
  for (const auto& a : actions_) {
    if (a.stage < 0 || lane_of(a.kind) != static_cast<int>(Lane::Compute)) continue;
    stage_rank.emplace(a.stage, file_.rank);
    if (a.kind == EventKind::Forward && a.micro_batch >= 0) forwards[a.stage].insert(a.micro_batch);
  }
}

// The action whose CPU span holds time `t_us`, or nullptr.
Action* RankReader::action_at(double t_us) {
  auto it = std::upper_bound(actions_.begin(), actions_.end(), t_us,
                             [](double t, const Action& a) { return t < a.start_us; });
  if (it == actions_.begin()) return nullptr;
  --it;
  return t_us < it->end_us ? &*it : nullptr;
}

// A send's or receive's gloo/NCCL call starts inside its span and may end long after it:
// a receive's ends when the compute that needs the data has it.
void RankReader::attach_transport_calls() {
  for (const RankSpan& e : spans_) {
    if (e.role != SpanRole::TransportCall) continue;
    Action* a = action_at(e->ts_us);
    if (!a || !is_transfer(a->kind)) continue;
    a->transport_end_us = std::max(a->transport_end_us, e->end_us());
    if (a->bytes < 0 && e->shapes != kNoShapes) a->bytes = bytes_of(nlohmann::json::parse(file_.events.shapes_of(*e)));
  }
}

// torch's RECV posts the receive; the first compute of its stage and micro-batch that needs
// the data waits for it, and the transport call ends when that wait returns. The wait
// returns at the data's arrival when it blocked, and right away when the data was already
// there: then the end says only that the data came earlier. The rank's quickest wait is one
// of the latter (the time to reach the wait); a wait longer than twice it blocked. Without
// a transport call (no shapes, other backends) the kernels' end is the arrival on a GPU.
void RankReader::find_waiting_receives() {
  std::vector<std::pair<Action*, double>> waits;  // receive, its wait's length
  for (std::size_t i = 0; i < actions_.size(); ++i) {
    Action& recv = actions_[i];
    if (!is_receive(recv.kind)) continue;
    if (recv.launched_kernels()) {
      recv.arrival_measured = true;
      recv.transport_end_us = std::max(recv.transport_end_us, recv.kernel_end_us);
      continue;
    }
    if (recv.transport_end_us < 0) continue;
    const bool activation = carries_activation(recv.kind);
    for (std::size_t j = i + 1; j < actions_.size(); ++j) {
      Action& c = actions_[j];
      const bool consumes = activation ? c.kind == EventKind::Forward
                                       : (c.kind == EventKind::Backward || c.kind == EventKind::BackwardInput);
      if (!consumes || c.stage != recv.stage || c.micro_batch != recv.micro_batch) continue;
      waits.push_back({&recv, recv.transport_end_us - c.start_us});
      // torch waits for the data first thing in the action (_wait_batch_p2p), inside its span:
      // the work starts when the data is there.
      c.data_ready_us = std::max(c.data_ready_us, recv.transport_end_us);
      break;
    }
  }
  if (waits.empty()) return;
  const double quickest = std::max(0.0, std::min_element(waits.begin(), waits.end(), [](const auto& a, const auto& b) {
                                          return a.second < b.second;
                                        })->second);
  for (auto& [recv, wait_us] : waits) recv->arrival_measured = wait_us > 2 * quickest;
}

// GPU work: each kernel's "correlation" id is its launch's; the launch's time names the action.
void RankReader::attach_kernels() {
  std::map<std::int64_t, double> launch_time;
  for (const TorchSpan* e : launches_)
    if (e->has_correlation) launch_time[e->correlation] = e->ts_us;
  for (const TorchSpan* k : kernels_) {
    const auto launched = k->has_correlation ? launch_time.find(k->correlation) : launch_time.end();
    Action* a = launched == launch_time.end() ? nullptr : action_at(launched->second);
    kernel_action_.push_back(a ? static_cast<int>(a - actions_.data()) : -1);
    if (!a) continue;
    a->kernel_start_us = std::min(a->kernel_start_us, k->ts_us);
    a->kernel_end_us = std::max(a->kernel_end_us, k->end_us());
  }
}

}  // namespace pipescope::traces::detail
