// What a stage takes and gives must fit the model: the checks run around a stage's forward,
// each failing with a message that names the stage, the layer and the tensor.
#pragma once

#include <string>
#include <vector>

#include "runtime/rank_context.hpp"

namespace pipescope::exec::runtime {

// A stage's outputs must be defined tensors and, with declared shapes, match them.
void check_outputs(const RankContext& ctx, const StageState& st, const TensorList& outputs, const std::vector<std::string>& names);

// A dict arriving at a stage whose first layer takes other keys fails here, naming both.
void check_input_keys(const RankContext& ctx, const StageState& st, const std::vector<std::string>& names, std::size_t count);

// Moves the skip tensors the stage's layers stashed for later stages from `left` into
// state.skip_outputs; every other one must have been popped.
void take_skip_outputs(const RankContext& ctx, const StageState& st, SkipTensors& left, MicroBatchState& state);

// The model's loss of the last stage's outputs, as a scalar.
at::Tensor compute_loss(const RankContext& ctx, const StageState& st, const TensorList& outputs, const at::Tensor& labels);

}  // namespace pipescope::exec::runtime
