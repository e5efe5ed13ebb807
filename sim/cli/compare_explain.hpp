// `ppsim compare --explain`: why a measured step took this long, in one line and a per-rank
// table (traces/step_attribution.hpp), for people or as JSON.
#pragma once

#include <ostream>

#include <nlohmann/json.hpp>

#include "pipescope/traces/clock_alignment.hpp"
#include "pipescope/traces/step_attribution.hpp"

namespace pipescope::cli {

void print_explanation(const traces::StepAttribution& attribution, const traces::Trace& measured, std::ostream& out);

nlohmann::json explanation_json(const traces::StepAttribution& attribution, const traces::Trace& measured,
                                const traces::ClockAlignment& clocks);

}  // namespace pipescope::cli
