// One rank's torch.profiler file turned into events, the reader's work per rank in the order
// its data flows (torch_profiler_reader.cpp then merges the ranks into one trace):
// - torch_profiler_rank_steps.cpp: the rank's process, its spans with their roles, the steps
//   the file holds and the window of the one read;
// - torch_profiler_rank_actions.cpp: the PP: actions in that window, timed by their transport
//   calls, their kernels and the waits of the computations that needed their data;
// - torch_profiler_rank_events.cpp: the actions, operators, kernels and memory samples made
//   trace events (times still the file's own).
// Private to the traces library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "pipescope/traces/torch_profiler.hpp"
#include "pipescope/traces/trace.hpp"
#include "torch_profiler_actions.hpp"
#include "torch_profiler_events.hpp"
#include "torch_profiler_files.hpp"

namespace pipescope::traces::detail {

// A CPU operator or annotation of the rank's process, with what its name says it is.
struct RankSpan {
  const TorchSpan* event = nullptr;
  SpanRole role = SpanRole::Operator;
  const TorchSpan& operator*() const { return *event; }
  const TorchSpan* operator->() const { return event; }
};

// The args of events made, each with the index of its event in the trace being built.
using PendingArgs = std::vector<std::pair<std::size_t, std::string>>;

class RankReader {
 public:
  // `first`: the run's first rank file, whose last step the others read when no step is given
  // (a rank that lacks it is refused: the files are not one profiled window).
  RankReader(const RankFile& file, const RankFile& first, const TorchReadOptions& options,
             std::vector<std::string>& notes)
      : file_(file), first_(first), options_(options), notes_(notes) {}

  // The step's window and the actions in it; the stage map needs every rank's actions
  // before the events are made.
  void read_actions();
  // The rank of each stage that computes here, and the micro-batches each stage's forwards ran.
  void add_stages(std::map<int, int>& stage_rank, std::map<int, std::set<int>>& forwards) const;
  // The rank's events, memory samples and their args, appended to `out` and `args`.
  void emit(const std::map<int, int>& stage_rank, Trace& out, PendingArgs& args);

  int rank() const { return file_.rank; }
  double step_start_us() const { return window_.start_us; }
  // The ProfilerStep#N span's length and the CPU operators recorded in it (0 without steps).
  double step_duration_us() const { return step_ ? window_.end_us - window_.start_us : 0.0; }
  std::size_t step_operators() const;
  // The GPU stream lanes (lane, name) that emit added.
  const std::vector<std::pair<int, std::string>>& stream_lanes() const { return stream_lanes_; }
  std::optional<int> step() const { return step_; }
  // The numbers of the steps the file holds (ProfilerStep#N, or those its actions repeat).
  std::vector<int> step_numbers();

 private:
  // torch_profiler_rank_steps.cpp
  void find_process();
  void choose_step();
  std::map<int, TimeRange> step_windows();
  bool in_step(const TorchSpan& e) const;
  const std::string& name_of(const TorchSpan& e) const { return file_.events.name_of(e); }

  // torch_profiler_rank_actions.cpp
  bool split_overlap(const Action& overlap);
  Action* action_at(double t_us);
  void attach_transport_calls();
  void find_waiting_receives();
  void attach_kernels();

  // torch_profiler_rank_events.cpp
  void emit_action(const Action& a, const std::map<int, int>& stage_rank, Trace& out, PendingArgs& args) const;
  void note_missing_actions(Trace& out);
  void emit_operators(Trace& out, PendingArgs& args);
  void emit_kernels(Trace& out);
  void emit_memory(Trace& out) const;

  std::vector<std::pair<int, std::string>> stream_lanes_;
  const RankFile& file_;
  const RankFile& first_;
  const TorchReadOptions& options_;
  std::vector<std::string>& notes_;
  std::int64_t pid_ = 0;
  std::vector<RankSpan> spans_;
  std::vector<const TorchSpan*> kernels_, launches_;
  std::vector<int> kernel_action_;  // per kernel: index into actions_, or -1
  std::vector<Action> actions_;
  TimeRange window_;
  std::optional<int> step_;
  bool steps_repeated_ = false;  // the steps are the repetitions of the program, not ProfilerStep#N
};

// The N of every step of a file, in order: its ProfilerStep#N spans, or the repetitions of its
// program.
std::vector<int> profiled_steps(const RankFile& file);

}  // namespace pipescope::traces::detail
