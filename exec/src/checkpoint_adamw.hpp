// AdamW's state of one parameter (step, exp_avg, exp_avg_sq, max_exp_avg_sq with amsgrad) read
// from and written into the optimizer that holds it, so that checkpoints can file it by the
// parameter's model-wide name instead of by its position in one stage's optimizer.
#pragma once

#include <torch/optim/adamw.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

namespace pipescope::exec::checkpoint_detail {

// The optimizer as AdamW (FusedAdamW included), or null for any other optimizer.
torch::optim::AdamW* as_adamw(torch::optim::Optimizer& optimizer);

// Writes `parameter`'s state into `out` and returns true, or returns false when it has none yet
// (no step taken).
bool save_adamw_state(const torch::optim::AdamW& optimizer, const at::Tensor& parameter, torch::serialize::OutputArchive& out);

// Gives `parameter` the state in `in` (moved to the parameter's device), replacing any it had.
// Throws UsageError naming `name` when a tensor is missing or of another shape.
void load_adamw_state(torch::optim::AdamW& optimizer, const at::Tensor& parameter, const std::string& name,
                      torch::serialize::InputArchive& in);

// Drops `parameter`'s state: a checkpoint taken before the first step has none.
void clear_adamw_state(torch::optim::AdamW& optimizer, const at::Tensor& parameter);

}  // namespace pipescope::exec::checkpoint_detail
