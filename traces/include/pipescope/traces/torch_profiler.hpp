// torch.profiler Chrome traces (what `profile.export_chrome_trace` writes, one file per rank)
// read as one measured pipescope Trace. docs/TORCH-TRACES.md gives the whole mapping:
// - the files of one run are merged by `distributedInfo.rank`;
// - `PP:<action>` spans of torch.distributed.pipelining become events with stage and
//   micro-batch: F/B/I/W on the compute lane, SEND_* on the send lane, RECV_* on the receive
//   lane, REDUCE_GRAD on the collectives lane, UNSHARD/RESHARD/WAIT_*/OVERLAP_F_B on the compute
//   lane under their own names;
// - a RECV lasts from its post to the data's arrival where the trace shows it: torch's RECV
//   span only times the post, and its transport call (gloo:recv; on a GPU the NCCL kernels)
//   ends when the compute that needs the data has it. When that compute waited, the end is the
//   arrival (category kWaitedReceiveCategory); when the data was there first, the RECV keeps
//   its post's span and the category kPostedReceiveCategory (no arrival time to learn from);
// - `ProfilerStep#N` spans mark steps; one step is read (the last by default);
// - `[memory]` instant events give each rank's memory curve ("Total Allocated");
// - with operators kept, the CPU operators, gloo/NCCL calls and GPU kernels that ran inside an
//   action are events of the "operators" lane (and one lane per GPU stream), with the
//   action's stage and micro-batch; GPU kernels are tied to the CPU launch that made them by
//   their "correlation" id (kineto's "ac2g" flows), and an action that launched kernels lasts
//   from its first kernel's start to its last kernel's end.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pipescope/traces/read_progress.hpp"
#include "pipescope/traces/trace.hpp"

namespace pipescope::traces {

// The first lane past the four of SPEC.md section 5: CPU operators run inside actions.
inline constexpr int kOperatorsLane = kNumLanes;

// The categories of torch receives (torch_profiler_reader.cpp): one whose event times only
// its post (its data came first), and one that lasts from its post to its data's arrival.
inline constexpr const char* kPostedReceiveCategory = "p2p posted";
inline constexpr const char* kWaitedReceiveCategory = "p2p waited";
// The arg of a torch receive that holds its post's duration (us): its own work.
inline constexpr const char* kReceivePostArg = "post_us";
// The arg of a torch computation whose span began by waiting for received data: the wait (us).
// Its event starts at the data's arrival; the program reached it that long before.
inline constexpr const char* kDataWaitArg = "data_wait_us";

struct TorchReadOptions {
  std::optional<int> step;     // ProfilerStep#N to read; default: the last one
  bool keep_operators = true;  // false: only the pipeline's actions (compare, calibrate)
  bool every_step = false;     // without `step`: every ProfilerStep#N, one trace each (calibrate)
  // Hears how far the reading of the files is, and may cancel it (ppview's progress bar); the
  // pipescope traces among read_trace_arguments' inputs report to it too. May be null.
  ReadProgress* progress = nullptr;
};

struct TorchRun {
  Trace trace;                     // its meta.run.torch_profiler names the files and the step read
  std::vector<std::string> notes;  // what the trace lacks, one line each (e.g. no PP: spans)
};

// Whether `path` is a torch.profiler trace (a file whose JSON starts with torch's
// "schemaVersion"/"distributedInfo" header; gzip or not) or a folder holding such files.
bool is_torch_profiler_input(const std::string& path);

// The torch.profiler trace files of `paths`: files as given, folders expanded to the files
// in them whose names end in .json or .json.gz (sorted). Throws TraceError for a folder that
// holds none.
std::vector<std::string> torch_profiler_files(const std::vector<std::string>& paths);

// Reads the per-rank files of one profiled run (files or folders) as one measured trace.
// Throws TraceError naming the file for files of different runs, two files of one rank, a
// step that is not there, or a file that is not a torch.profiler trace.
TorchRun read_torch_profiler_run(const std::vector<std::string>& paths, const TorchReadOptions& options = {});

// The same, one run per profiled step (every ProfilerStep#N of the first rank's file, in order)
// when options.every_step is set and no step is given; otherwise the one run above.
std::vector<TorchRun> read_torch_profiler_steps(const std::vector<std::string>& paths, const TorchReadOptions& options);

}  // namespace pipescope::traces
