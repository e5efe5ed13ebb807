// tiny-moe: a GPT-like model whose blocks are mixture-of-experts blocks (see moe_model.cpp).
#pragma once

#include "pipescope/exec/model.hpp"

namespace pipescope::exec {

// Throws UsageError naming the option when the sizes do not fit (top-k above the experts, an
// expert parallelism that does not divide them).
ModelSpec tiny_moe_spec(const ModelConfig& config);

}  // namespace pipescope::exec
