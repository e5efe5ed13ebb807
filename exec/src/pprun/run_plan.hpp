// pprun's plan of a run, made once before any worker starts (the launcher checks it) and again
// in each worker: the schedule, the model split into its stages, the text checked, and the
// checkpoint folder checked against --resume. Also the checks a worker repeats when it resumes.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "pipescope/core/partitioner.hpp"
#include "pipescope/core/schedule.hpp"
#include "pipescope/exec/checkpoint.hpp"
#include "pipescope/exec/model.hpp"
#include "data/text_batches.hpp"
#include "pprun/options.hpp"

namespace pipescope::exec {

struct RunPlan {
  RunOptions options;
  ModelSpec model;
  Schedule schedule;
  Partition partition;
  int world_size = 1;
  int pipeline_ranks = 1;
  // The text the run trains on, as run_identity records it ("synthetic" for the generator):
  // "text: F file(s), N bytes", so a resumed run refuses other text.
  std::string data_identity;
};

// Builds and checks the schedule (for world_size / --dp pipeline ranks), validates it, splits
// the model into its stages and opens the text data to check it. Throws UsageError or ScheduleError naming the option or schedule.
RunPlan make_run_plan(const RunOptions& options, int world_size);

// What identifies a run for checkpoints: resuming with a different one is refused.
nlohmann::json run_identity(const RunPlan& plan);

// The text of the run, opened (memory-mapped) and checked; throws UsageError naming the file.
TextBatches open_text_data(const RunOptions& o);

// Refuses a checkpoint written for another model or data; its layout may differ (the engine
// re-splits it by layer), but the micro-batch size may not: the data position counts micro-batches.
void check_resumable(const RunPlan& plan, const Manifest& manifest);

// The refusal of a resumed run whose checkpoint is already at --steps.
std::string nothing_to_do(const RunOptions& o, int checkpoint_step);

// The rows of the metrics file at `path` for steps before `step` (none when there is no file);
// throws UsageError naming the line that is not a metrics row.
std::string metrics_before(const std::string& path, int step);

}  // namespace pipescope::exec
