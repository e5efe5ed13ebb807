// The differentiable all-to-all and the auxiliary-loss hook of MoE layers (all_to_all.hpp).
#include "moe/all_to_all.hpp"

#include <fmt/format.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/graph_task.h>

#include <cstdint>
#include <memory>
#include <numeric>

#include "runtime/clock.hpp"
#include "runtime/compute_baton.hpp"
#include "transport_wait.hpp"

namespace pipescope::exec::moe {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::int64_t row_bytes_of(const at::Tensor& t) {
  std::int64_t row = t.element_size();
  for (std::int64_t d = 1; d < t.dim(); ++d) row *= t.size(d);
  return row;
}

// The group of the instruction this thread runs (forward or backward), and the wait for its
// exchange with the compute given to the other pass of an overlapped step meanwhile. Returns
// when the bytes were in (the runtime's clock), before the pass took the compute back.
double run_expert_exchange(ExpertParallel& ep, at::Tensor& output, at::Tensor& input,
                           const std::vector<std::int64_t>& output_splits,
                           const std::vector<std::int64_t>& input_splits) {
  Transport* group = ep.group_for(runtime::backward_on_this_thread());
  auto pending = group->all_to_all(output, input, output_splits, input_splits);
  // A pass of an overlapped step hands its core to the other pass while it waits: no spinning.
  const bool overlapped = runtime::pass_on_this_thread().baton != nullptr;
  const SpinWhileWaiting spin(overlapped ? std::chrono::microseconds(0) : ep.spin_limit());
  const runtime::OffCompute on_the_wire;
  pending->wait(ep.timeout());
  return runtime::now_us();
}

// One exchange, timed and recorded.
// `started_us` (the runtime's clock; < 0: now): where the exchange began, when what it needed was
// exchanged before it (the dispatch's count exchange). `before` / `after` (undefined: none): the
// rows' order changed before they leave / after they arrive, inside the exchange's time.
at::Tensor exchange_rows(ExpertParallel& ep, const at::Tensor& given, const std::vector<std::int64_t>& output_splits,
                         const std::vector<std::int64_t>& input_splits, traces::EventKind kind,
                         const std::vector<std::int64_t>& histogram, const std::string& layer, double started_us,
                         const at::Tensor& before, const at::Tensor& after) {
  std::unique_ptr<DeviceTiming> timing = ep.start_device_timing();
  const double called_us = runtime::now_us();
  at::Tensor input = before.defined() ? given.index_select(0, before) : given.contiguous();
  auto sizes = input.sizes().vec();
  sizes.at(0) = std::accumulate(output_splits.begin(), output_splits.end(), std::int64_t{0});
  at::Tensor output = at::empty(sizes, input.options());
  AllToAllRecord record;
  record.kind = kind;
  record.layer = layer;
  if (const Instruction* pass = runtime::pass_on_this_thread().instr) {
    record.stage = pass->stage;
    record.micro_batch = pass->micro_batch;
  }
  record.start_us = started_us >= 0 ? started_us : called_us;
  const double arrived_us = run_expert_exchange(ep, output, input, output_splits, input_splits);
  // In an overlapped step the pass may wait here for the other pass's compute to give the core
  // back: not the exchange's time, which ends when the bytes are in (and the rows reordered).
  const double resumed_us = runtime::now_us();
  if (after.defined()) output = output.index_select(0, after);
  record.end_us = runtime::now_us() - (resumed_us - arrived_us);
  if (timing) timing->stop();
  const std::int64_t row = row_bytes_of(input);
  record.rows_sent = input_splits;
  record.rows_received = output_splits;
  for (auto r : input_splits) record.bytes_sent += r * row;
  for (auto r : output_splits) record.bytes_received += r * row;
  record.peers = ep.group_world_ranks();
  record.tokens_per_expert = histogram;
  ep.record(std::move(record), std::move(timing), started_us >= 0);
  return output;
}

// A permutation's inverse: where each row went.
at::Tensor inverse_of(const at::Tensor& permutation) {
  return permutation.defined() ? at::argsort(permutation, /*stable=*/true, 0) : permutation;
}

// saved_data's key of what a backward exchange brought, while the graph is kept.
constexpr const char* kKeptExchangeGradientKey = "kept_gradient";

// The way back of an exchange: what arrived goes back where it came from.
//
// A split backward walks the graph twice from the same seeds: the input half (BackwardInput)
// keeps the graph, the weight half (BackwardWeight) walks it again. The gradient the exchange
// brings back is the same both times, so a walk that keeps the graph keeps it too, and the next
// walk takes it instead of exchanging: the weight half talks to no other rank. The walk that
// frees the graph (the weight half) frees it; the graph's end frees it otherwise.
at::Tensor gradient_brought_back(AutogradContext* ctx, const at::Tensor& grad) {
  // The walk's own flag, not the runtime's thread-local pass: on a GPU the autograd engine runs
  // this on its device thread.
  const bool graph_kept = torch::autograd::get_current_graph_task_keep_graph();
  auto& saved = ctx->saved_data;
  if (const auto kept = saved.find(kKeptExchangeGradientKey); kept != saved.end()) {
    at::Tensor brought = kept->second.toTensor();
    if (!graph_kept) saved.erase(kept);
    return brought;
  }
  // saved_data holds IValues only, so the group travels as its address; the engine that owns it
  // outlives every graph it runs.
  auto* ep = reinterpret_cast<ExpertParallel*>(  // NOLINT(performance-no-int-to-ptr)
      static_cast<std::intptr_t>(saved["expert_parallel"].toInt()));
  const auto order_of = [&saved](const char* name) {
    const auto found = saved.find(name);
    return found != saved.end() && found->second.isTensor() ? found->second.toTensor() : at::Tensor();
  };
  at::Tensor brought =
      exchange_rows(*ep, grad, saved["input_splits"].toIntVector(), saved["output_splits"].toIntVector(),
                    static_cast<traces::EventKind>(saved["backward_kind"].toInt()), saved["histogram"].toIntVector(),
                    saved["layer"].toStringRef(), -1, order_of("before_leaving"), order_of("after_arrival"));
  if (graph_kept) saved[kKeptExchangeGradientKey] = brought;
  return brought;
}

class AllToAllFunction : public torch::autograd::Function<AllToAllFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, std::vector<std::int64_t> output_splits,
                            std::vector<std::int64_t> input_splits, ExpertParallel* ep, AllToAllKinds kinds,
                            std::vector<std::int64_t> histogram, std::string layer, double started_us, RowOrder order) {
    at::Tensor output = exchange_rows(*ep, input, output_splits, input_splits, kinds.forward, histogram, layer,
                                      started_us, order.before_leaving, order.after_arrival);
    // The way back undoes the orders: the gradients of the rows as they arrived are put back in
    // the order they were sent in (a permutation's gradient is its inverse's: no sums).
    ctx->saved_data["before_leaving"] = inverse_of(order.after_arrival);
    ctx->saved_data["after_arrival"] = inverse_of(order.before_leaving);
    ctx->saved_data["output_splits"] = output_splits;
    ctx->saved_data["input_splits"] = input_splits;
    ctx->saved_data["expert_parallel"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(ep));
    ctx->saved_data["backward_kind"] = static_cast<std::int64_t>(kinds.backward);
    ctx->saved_data["histogram"] = histogram;
    ctx->saved_data["layer"] = layer;
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(9);  // the rows' gradient; the other arguments have none
    out[0] = gradient_brought_back(ctx, grads.at(0));
    return out;
  }
};

class AuxLossFunction : public torch::autograd::Function<AuxLossFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& aux_loss,
                            double aux_gradient) {
    ctx->saved_data["aux_gradient"] = aux_gradient;
    ctx->save_for_backward({aux_loss});
    return hidden.clone();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor aux_loss = ctx->get_saved_variables().at(0);
    return {grads.at(0), at::full_like(aux_loss, ctx->saved_data["aux_gradient"].toDouble()), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_to_all(const at::Tensor& input, const std::vector<std::int64_t>& output_splits,
                      const std::vector<std::int64_t>& input_splits, ExpertParallel& expert_parallel,
                      const AllToAllKinds& kinds, const std::vector<std::int64_t>& tokens_per_expert,
                      const std::string& layer, double started_us, const RowOrder& order) {
  return AllToAllFunction::apply(input, output_splits, input_splits, &expert_parallel, kinds, tokens_per_expert, layer,
                                 started_us, order);
}

at::Tensor exchange_counts(const at::Tensor& counts, ExpertParallel& ep) {
  const std::vector<std::int64_t> equal(static_cast<std::size_t>(ep.size()), ep.experts_per_rank());
  at::Tensor input = counts.contiguous();
  at::Tensor output = at::empty_like(input);
  run_expert_exchange(ep, output, input, equal, equal);
  return output;
}

at::Tensor attach_aux_loss(const at::Tensor& hidden, const at::Tensor& aux_loss, double aux_gradient) {
  return AuxLossFunction::apply(hidden, aux_loss, aux_gradient);
}

}  // namespace pipescope::exec::moe
