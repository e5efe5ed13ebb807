// The run description (run_description.hpp) as otherData fields: the one place that knows
// their keys and JSON types. Only the trace reader and writer use it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "pipescope/traces/run_description.hpp"

namespace pipescope::traces {

// Moves the run description's fields out of `other_data` (what remains is the trace's extra
// fields). A null field counts as absent; a field of the wrong type throws TraceError naming
// `source` and the field ("run.json: otherData.stage_bounds must be an array of integers").
RunDescription take_run_description(nlohmann::json& other_data, const std::string& source);

// Adds the description's present fields to `other_data` (an object), replacing fields of the
// same name.
void put_run_description(const RunDescription& run, nlohmann::json& other_data);

}  // namespace pipescope::traces
