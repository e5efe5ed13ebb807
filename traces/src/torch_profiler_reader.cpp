// Reads torch.profiler Chrome traces of a torch.distributed.pipelining run as one measured
// Trace (torch_profiler.hpp says what becomes what; docs/TORCH-TRACES.md in full). Each file
// is one rank's process: its own CPU threads, the GPUs it drove, and the profiler's own tracks
// ("Spans", "Traces"), which are left out. Each file is held as a compact store of the events
// the reader uses (torch_profiler_events.hpp), not as a document. This file merges the ranks: each rank's file is read by a RankReader
// (torch_profiler_rank.hpp), then the run's events are put on one clock and in time order, and
// the trace says what it is (its metadata, the run's torch.profiler record, lane names).
#include "pipescope/traces/torch_profiler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "pipescope/traces/trace_io.hpp"
#include "torch_profiler_rank.hpp"

namespace pipescope::traces {
namespace {

using detail::PendingArgs;
using detail::RankFile;
using detail::RankReader;

void note_missing_rank_files(const std::vector<RankFile>& files, std::vector<std::string>& notes) {
  const int world = files.front().world_size;
  if (static_cast<int>(files.size()) >= world) return;
  std::string missing;
  for (int r = 0; r < world; ++r)
    if (std::none_of(files.begin(), files.end(), [&](const RankFile& f) { return f.rank == r; }))
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  notes.push_back(fmt::format("the run has {} ranks; no file of rank(s) {}", world, missing));
}

// Times from the step's start on the rank that started it first (ranks of one host share a
// clock); without step marks, from the earliest event or memory sample.
void shift_torch_times_to_step_start(const std::vector<RankReader>& readers, Trace& t) {
  double origin = std::numeric_limits<double>::infinity();
  for (const auto& r : readers) origin = std::min(origin, r.step_start_us());
  if (!std::isfinite(origin))
    for (const auto& e : t.events) origin = std::min(origin, e.ts_us);
  for (const auto& m : t.memory) origin = std::min(origin, m.ts_us);
  if (!std::isfinite(origin)) origin = 0;
  for (auto& e : t.events) e.ts_us -= origin;
  for (auto& m : t.memory) m.ts_us -= origin;
}

// Events in time order; the args follow their events.
void sort_torch_events(Trace& t, PendingArgs& args) {
  std::vector<std::size_t> order(t.events.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return t.events[a].ts_us < t.events[b].ts_us; });
  std::vector<std::size_t> new_index(order.size());
  std::vector<TraceEvent> sorted;
  sorted.reserve(order.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    new_index[order[i]] = i, sorted.push_back(std::move(t.events[order[i]]));
  t.events = std::move(sorted);
  for (auto& [event, text] : args) t.args.push_back({new_index[event], std::move(text)});
  std::sort(t.args.begin(), t.args.end(), [](const EventArgs& a, const EventArgs& b) { return a.event < b.event; });
}

// The trace's metadata and the run's torch.profiler record: the files, the step read, and
// its length and operator count as the mean of the ranks'.
void describe_torch_run(const std::vector<RankFile>& files, const std::vector<RankReader>& readers, Trace& t) {
  int stages = 0, micro_batches = 0;
  for (const auto& e : t.events)
    if (e.lane < kNumLanes)
      stages = std::max(stages, e.stage + 1), micro_batches = std::max(micro_batches, e.micro_batch + 1);
  t.meta.source = "measured";
  t.meta.schedule = "torch.distributed.pipelining";
  t.meta.num_ranks = files.front().world_size;
  t.meta.num_stages = stages;
  t.meta.num_micro_batches = micro_batches;
  t.meta.iteration = readers.front().step().value_or(0);
  TorchProfilerRun& about = t.meta.run.torch_profiler.emplace();
  for (const auto& f : files) about.files.push_back(f.path);
  about.step = readers.front().step();
  if (!about.step) return;
  double duration_us = 0, operators = 0;
  for (const auto& r : readers)
    duration_us += r.step_duration_us(), operators += static_cast<double>(r.step_operators());
  about.step_duration_us = duration_us / static_cast<double>(readers.size());
  about.operators_per_rank = operators / static_cast<double>(readers.size());
}

// Every rank of the run named, and the lanes of each rank that has a file: the four of SPEC.md
// section 5, then with operators kept the operators lane and the GPU streams'.
void name_torch_ranks_and_lanes(const std::vector<RankFile>& files, const std::vector<RankReader>& readers,
                                const TorchReadOptions& options, Trace& t) {
  const int world = files.front().world_size;
  t.rank_names.resize(static_cast<std::size_t>(world));
  t.lane_names.resize(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) t.rank_names[static_cast<std::size_t>(r)] = fmt::format("rank {}", r);
  for (std::size_t i = 0; i < files.size(); ++i) {
    auto& lanes = t.lane_names[static_cast<std::size_t>(files[i].rank)];
    for (int l = 0; l < kNumLanes; ++l) lanes.push_back(default_lane_name(l));
    if (!options.keep_operators) continue;
    lanes.push_back("operators");
    for (const auto& [lane, name] : readers[i].stream_lanes()) {
      if (static_cast<int>(lanes.size()) <= lane) lanes.resize(static_cast<std::size_t>(lane) + 1);
      lanes[static_cast<std::size_t>(lane)] = name;
    }
  }
}

TorchRun read_run(const std::vector<RankFile>& files, const TorchReadOptions& options) {
  TorchRun run;
  std::vector<RankReader> readers;
  readers.reserve(files.size());
  std::map<int, int> stage_rank;
  std::map<int, std::set<int>> forwards;
  for (const auto& f : files) {
    readers.emplace_back(f, files.front(), options, run.notes);
    readers.back().read_actions();
    readers.back().add_stages(stage_rank, forwards);
  }
  detail::check_numbering(files, stage_rank, forwards, readers.front().step().has_value(), run.notes);
  Trace& t = run.trace;
  PendingArgs args;
  for (auto& r : readers) r.emit(stage_rank, t, args);
  note_missing_rank_files(files, run.notes);
  shift_torch_times_to_step_start(readers, t);
  sort_torch_events(t, args);
  describe_torch_run(files, readers, t);
  name_torch_ranks_and_lanes(files, readers, options, t);
  return run;
}

}  // namespace

TorchRun read_torch_profiler_run(const std::vector<std::string>& paths, const TorchReadOptions& options) {
  return read_run(detail::load_run_files(paths, options.progress), options);
}

std::vector<TorchRun> read_torch_profiler_steps(const std::vector<std::string>& paths,
                                                const TorchReadOptions& options) {
  const std::vector<RankFile> files = detail::load_run_files(paths, options.progress);
  std::vector<TorchRun> runs;
  const std::vector<int> steps =
      options.every_step && !options.step ? detail::profiled_steps(files.front()) : std::vector<int>{};
  if (steps.size() < 2) {
    runs.push_back(read_run(files, options));
    return runs;
  }
  for (const int step : steps) {
    TorchReadOptions one = options;
    one.step = step;
    runs.push_back(read_run(files, one));
  }
  return runs;
}

}  // namespace pipescope::traces
