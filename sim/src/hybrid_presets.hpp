// The hybrid presets (Nemotron-H, Nemotron 3, Qwen3.5: Mamba-2, Gated DeltaNet, attention, MLP and
// expert blocks), apart from the others because each needs its pattern and its mixer's widths
// (docs/MODEL.md, "Presets" and "Hybrid models").
#pragma once

#include <vector>

#include "pipescope/sim/model.hpp"

namespace pipescope::sim::detail {

std::vector<ModelSpec> hybrid_presets();

}  // namespace pipescope::sim::detail
