// The mixture-of-experts presets (Mixtral, Qwen3-MoE, DeepSeek-V3), apart from the dense ones of
// model_spec.cpp because each needs its own fields and sources (docs/MODEL.md, "Presets").
#pragma once

#include <vector>

#include "pipescope/sim/model.hpp"

namespace pipescope::sim::detail {

std::vector<ModelSpec> moe_presets();

}  // namespace pipescope::sim::detail
