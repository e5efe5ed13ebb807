// The files of a torch.profiler run, found, read and checked before any event is made of them
// (torch_profiler_reader.cpp makes the events): which files of a folder are traces, each
// file's header (rank, world size, host), and every event the reader will use held to the
// rules of pipescope's own traces (types, bounds: trace_limits.hpp). Private to the traces library.
#pragma once

#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "pipescope/traces/read_progress.hpp"
#include "torch_profiler_events.hpp"

namespace pipescope::traces::detail {

// A file's header, the rank it holds and the events the reader uses (as checked by load_rank_file).
struct RankFile {
  std::string path;
  TorchEvents events;
  int rank = 0;
  int world_size = 1;
  bool has_distributed_info = false;  // the header names the rank (a run with a process group)
  std::string host;
  double first_us = std::numeric_limits<double>::infinity(), last_us = -std::numeric_limits<double>::infinity();
};

// Reads and checks one file: a regular file, gzip or not, JSON (a UTF-8 byte order mark is
// skipped) nested no deeper than kMaxJsonDepth, torch's header, and every complete ("X") event
// with a string name, numeric times within trace_limits.hpp's bounds and a non-negative
// duration, every `[memory]` sample's bytes likewise. Throws TraceError naming the file, the
// event (traceEvents[i] and its name) and the field. The file is read in one streaming pass
// into the compact event store (torch_profiler_stream.cpp; a plain file mapped, its pages let
// go behind the pass); where that pass gives way, the reference parser's document
// (torch_profiler_document.cpp) is checked and makes the store, and says what is wrong.
// `progress` (may be null) hears how far the reading is; ReadCancelled when it asks to stop.
RankFile load_rank_file(const std::string& path, ReadProgress* progress = nullptr);

// The rank files of one run (files as given, folders expanded), loaded, checked to be one run
// (one world size, distinct ranks, ranks named when there are several files, overlapping
// recordings on one host) and sorted by rank.
std::vector<RankFile> load_run_files(const std::vector<std::string>& paths, ReadProgress* progress = nullptr);

// Stages are numbered 0..S-1 and every stage forwards micro-batches 0..M-1 in a step: refuses
// (or notes, where a missing rank file may hold the gap) numbers past a gap. `stage_rank`: the
// rank of each stage seen; `forwards`: the micro-batches each stage forwarded.
void check_numbering(const std::vector<RankFile>& files, const std::map<int, int>& stage_rank,
                     const std::map<int, std::set<int>>& forwards, bool steps_marked, std::vector<std::string>& notes);

}  // namespace pipescope::traces::detail
