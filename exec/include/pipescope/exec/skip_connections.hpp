// Skip connections between pipeline stages (torchgpipe's stash and pop, carried by the
// schedule's peer_stage of SPEC.md section 3). A skip tensor from stage A to stage B travels:
// not at all when A and B are the same stage or on the same rank (it stays in memory), with the
// activation message when B is A + 1 (it rides along), and otherwise directly from A's rank to
// B's rank, by SendActivation/RecvActivation with peer_stage (its gradient back by
// SendGrad/RecvGrad), never through the stages in between.
#pragma once

#include <string>
#include <vector>

#include "pipescope/core/partitioner.hpp"
#include "pipescope/core/schedule.hpp"
#include "pipescope/exec/model.hpp"

namespace pipescope::exec {

enum class SkipCarrier {
  SameStage,       // produced and consumed inside one stage
  Memory,          // other stage, same rank: handed over in memory
  WithActivation,  // the next stage, another rank: an extra message with the activation
  Direct,          // a later stage on another rank: its own transfers, peer_stage = the other end
};

struct SkipRoute {
  std::string name;
  int from_layer = 0, to_layer = 0;
  int from_stage = 0, to_stage = 0;
  SkipCarrier carrier = SkipCarrier::SameStage;
};

// The routes of the model's skip edges (ModelSpec::skip_edges) for this split and placement,
// in name order. Throws UsageError (from skip_edges) for badly declared skips.
std::vector<SkipRoute> skip_routes(const ModelSpec& model, const Partition& partition, const std::vector<int>& stage_to_rank);

// `schedule` with the transfers of the Direct routes added to the programs of the two ranks:
// per (producer stage A, consumer stage B) and micro-batch, SendActivation(A, peer B) right
// after A's ForwardPass and RecvActivation(B, peer A) right before B's ForwardPass; in training
// RecvGrad(A, peer B) right before A's backward (BackwardPass or BackwardInput) and
// SendGrad(B, peer A) right after B's. The ordinary transfers already order A before B (and B's
// backward before A's), and sends do not wait, so the additions cannot deadlock; the result is
// checked by the core's validator all the same (ValidationError naming the instruction).
// Returns `schedule` unchanged when no route is Direct.
Schedule with_skip_transfers(const Schedule& schedule, const std::vector<SkipRoute>& routes);

}  // namespace pipescope::exec
