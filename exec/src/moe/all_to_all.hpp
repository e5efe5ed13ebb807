// The differentiable all-to-all of a MoE layer: the forward sends rows by `input_splits` and
// receives them by `output_splits` over the expert-parallel group; the backward sends the
// gradients back the other way. Each exchange is recorded (ExpertParallel::record) for the
// measured trace under its forward or backward name. A backward walk that keeps the graph (the
// runtime's BackwardInput) keeps what the way back brought, and the next walk from the same
// seeds (its BackwardWeight) takes it instead of exchanging again (docs/MOE-EXEC.md).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pipescope/exec/expert_parallel.hpp"

namespace pipescope::exec::moe {

// What an exchange and its way back are recorded as.
struct AllToAllKinds {
  traces::EventKind forward = traces::EventKind::Other;   // AllToAllDispatchForward or AllToAllCombineForward
  traces::EventKind backward = traces::EventKind::Other;  // AllToAllDispatchBackward or AllToAllCombineBackward
};

// The rows' order on this rank's side of an exchange (undefined: as they are): the dispatch
// regroups what arrived (by source rank, then expert) by local expert, and the combine puts the
// experts' rows back into arrival order before they leave. That reordering is the exchange's own
// work, so it lies inside its recorded event (and its gradient's inside the way back's): a run
// without expert parallelism does none of it, and calibration takes the events out of the passes.
struct RowOrder {
  at::Tensor after_arrival;   // output = exchanged rows.index_select(0, after_arrival)
  at::Tensor before_leaving;  // rows sent = input.index_select(0, before_leaving)
};

// `tokens_per_expert`: the routing histogram of this rank's tokens, kept in the records.
// `started_us` (runtime/clock.hpp; < 0: when called): where the forward's exchange began; the
// dispatch passes the start of its count exchange, so that its event holds that meeting of the
// ranks too (calibration takes the event's time out of the pass, and a run without expert
// parallelism has neither).
at::Tensor all_to_all(const at::Tensor& input, const std::vector<std::int64_t>& output_splits,
                      const std::vector<std::int64_t>& input_splits, ExpertParallel& expert_parallel,
                      const AllToAllKinds& kinds, const std::vector<std::int64_t>& tokens_per_expert,
                      const std::string& layer, double started_us = -1, const RowOrder& order = {});

// The same without autograd or a record: the routing counts each rank sends ahead of the tokens.
at::Tensor exchange_counts(const at::Tensor& counts, ExpertParallel& expert_parallel);

// `hidden` unchanged in the forward; in the backward, `aux_loss` (a scalar) gets the gradient
// `aux_gradient` besides: how an auxiliary loss computed mid-model joins the backward
// (Megatron's MoEAuxLossAutoScaler).
at::Tensor attach_aux_loss(const at::Tensor& hidden, const at::Tensor& aux_loss, double aux_gradient);

}  // namespace pipescope::exec::moe
