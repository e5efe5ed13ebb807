// What `ppsim plan` prints (a table, CSV or JSON) and the predicted traces it writes.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "pipescope/sim/planner.hpp"
#include "pipescope/sim/prediction_interval.hpp"
#include "plan_options.hpp"

namespace pipescope::cli {

// What a plan found, for one of the three formats.
struct PlanOutput {
  const PlanOptions& options;
  const sim::PlanRequest& request;
  const sim::PlanResult& result;
  std::size_t shown;
  std::vector<std::optional<sim::PredictionInterval>> intervals;
};

void print_plan_json(const PlanOutput& out);
void print_plan_csv(const PlanOutput& out);
void print_plan_table(const PlanOutput& out);
// --trace-dir: the predicted trace of each row shown (of every row with --top 0).
void write_plan_traces(const PlanOutput& out);

}  // namespace pipescope::cli
