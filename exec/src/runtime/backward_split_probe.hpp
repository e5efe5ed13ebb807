// The backward-split probe: times a full backward and, apart, its input-gradient and
// weight-gradient halves on a synthetic micro-batch of each stage held here, for calibration
// (full-backward schedules time only whole backwards). Runs outside any step; a 16-bit run's
// probe computes in its compute dtype, as its steps do, and leaves the fp32 masters in place.
#pragma once

#include <vector>

#include "runtime/rank_context.hpp"

namespace pipescope::exec::runtime {

std::vector<PipelineRuntime::BackwardSplitTiming> probe_backward_split(RankContext& ctx, int repetitions);

// The backward split of the stage's layers [from_layer, end): a synthetic input at that layer
// (the data itself for the first stage's first layer), the loss where the stage ends the model.
PipelineRuntime::BackwardSplitSamples time_backward_split(RankContext& ctx, StageState& st, int from_layer,
                                                          int repetitions);

}  // namespace pipescope::exec::runtime
