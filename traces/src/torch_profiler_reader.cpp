// Reads torch.profiler Chrome traces of a torch.distributed.pipelining run as one measured
// Trace (torch_profiler.hpp says what becomes what; docs/TORCH-TRACES.md in full). Each file
// is one rank's process: its own CPU threads, the GPUs it drove, and the profiler's own tracks
// ("Spans", "Traces"), which are left out. Files are small enough (a few steps) to hold as
// JSON documents.
#include "pipescope/traces/torch_profiler.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pipescope/core/instruction.hpp"
#include "pipescope/core/terminal_text.hpp"
#include "pipescope/traces/trace_limits.hpp"
#include "torch_profiler_actions.hpp"
#include "torch_profiler_files.hpp"
#include "pipescope/traces/trace_io.hpp"

namespace pipescope::traces {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

using detail::Action;
using detail::action_number;
using detail::bytes_of;
using detail::check_numbering;
using detail::id_text;
using detail::is_gpu_activity;
using detail::is_host_memory;
using detail::is_transport_call;
using detail::kActionPrefix;
using detail::kBackwardOperatorPrefix;
using detail::kStepPrefix;
using detail::lane_of;
using detail::parse_pp_action;
using detail::program_period;
using detail::RankFile;
using detail::step_number;
using detail::text_field;

// The N of every step of a file, in order: its ProfilerStep#N spans, or the repetitions of its
// program (defined after RankReader, which finds them).
std::vector<int> profiled_steps(const RankFile& file);

// One rank's file turned into events (times still the file's own).
class RankReader {
 public:
  // `first`: the run's first rank file, whose last step the others read when no step is given
  // (a rank that lacks it is refused: the files are not one profiled window).
  RankReader(const RankFile& file, const RankFile& first, const TorchReadOptions& options,
             std::vector<std::string>& notes)
      : file_(file), first_(first), options_(options), notes_(notes) {}

  // The step's window and the actions in it; the stage map needs every rank's actions
  // before the events are made.
  void read_actions() {
    find_process();
    choose_step();
    for (const json* e : spans_) {
      const std::string name = (*e)["name"].get<std::string>();
      if (name.rfind(kActionPrefix, 0) != 0 || !in_step(*e)) continue;
      auto action = parse_pp_action(std::string_view(name).substr(kActionPrefix.size()));
      if (!action) {
        notes_.push_back(
            fmt::format("{}: '{}' is not an action torch writes; kept as an operator", file_.path, printable(name)));
        continue;
      }
      action->start_us = (*e)["ts"].get<double>();
      action->end_us = action->start_us + (*e)["dur"].get<double>();
      if (!action->parts.empty() && split_overlap(*action)) continue;
      actions_.push_back(*action);
    }
    std::sort(actions_.begin(), actions_.end(),
              [](const Action& a, const Action& b) { return a.start_us < b.start_us; });
    attach_transport_calls();
    attach_kernels();
    find_waiting_receives();
  }

  // DualPipeV's OVERLAP_F_B runs its forward, then its backward (torch 2.15's runtime), inside
  // one span: the backward starts at the span's first autograd operator, the forward ends with
  // the last operator that started before it (between the two the backward waited for its
  // data, if it had to). Both become actions of their own; without such an operator (or parts
  // that are not a forward and a backward) the span stays one action.
  bool split_overlap(const Action& overlap) {
    const auto semicolon = overlap.parts.find(';');
    if (semicolon == std::string::npos) return false;
    auto forward = parse_pp_action(std::string_view(overlap.parts).substr(0, semicolon));
    auto backward = parse_pp_action(std::string_view(overlap.parts).substr(semicolon + 1));
    if (!forward || !backward || forward->kind != EventKind::Forward ||
        (backward->kind != EventKind::Backward && backward->kind != EventKind::BackwardInput))
      return false;
    double split_us = overlap.end_us;
    for (const json* e : spans_) {
      const double ts = (*e)["ts"].get<double>();
      if (ts <= overlap.start_us || ts >= split_us) continue;
      if ((*e)["name"].get_ref<const std::string&>().rfind(kBackwardOperatorPrefix, 0) == 0) split_us = ts;
    }
    if (split_us >= overlap.end_us) return false;
    double forward_end_us = overlap.start_us;
    for (const json* e : spans_) {
      const double ts = (*e)["ts"].get<double>();
      if (ts <= overlap.start_us || ts >= split_us || is_transport_call((*e)["name"].get_ref<const std::string&>()))
        continue;
      forward_end_us = std::max(forward_end_us, std::min(split_us, ts + (*e)["dur"].get<double>()));
    }
    forward->start_us = overlap.start_us, forward->end_us = forward_end_us;
    backward->start_us = split_us, backward->end_us = overlap.end_us;
    actions_.push_back(*forward);
    actions_.push_back(*backward);
    return true;
  }

  // The rank of each stage that computes here, and the micro-batches each stage's forwards ran.
  void add_stages(std::map<int, int>& stage_rank, std::map<int, std::set<int>>& forwards) const {
    for (const auto& a : actions_) {
      if (a.stage < 0 || lane_of(a.kind) != static_cast<int>(Lane::Compute)) continue;
      stage_rank.emplace(a.stage, file_.rank);
      if (a.kind == EventKind::Forward && a.micro_batch >= 0) forwards[a.stage].insert(a.micro_batch);
    }
  }

  void emit(const std::map<int, int>& stage_rank, Trace& out, std::vector<std::pair<std::size_t, std::string>>& args) {
    if (actions_.empty()) note_missing_actions(out);
    for (const auto& a : actions_) {
      TraceEvent ev;
      ev.rank = file_.rank;
      ev.lane = lane_of(a.kind);
      ev.name = std::string(event_kind_name(a.kind));
      ev.kind = a.kind;
      ev.category = std::string(event_kind_category(a.kind));
      ev.stage = a.stage;
      ev.micro_batch = a.micro_batch;
      ev.ts_us = a.start_us;
      double end = a.end_us;
      if (a.launched_kernels() && ev.lane != static_cast<int>(Lane::Recv)) {
        ev.ts_us = a.kernel_start_us;
        end = a.kernel_end_us;
      } else if (ev.lane == static_cast<int>(Lane::Compute) && a.data_ready_us > ev.ts_us) {
        // The span's time up to the data's arrival was a wait (an idle rank), not the work.
        ev.ts_us = std::min(a.data_ready_us, end);
        args.emplace_back(out.events.size(), json{{kDataWaitArg, ev.ts_us - a.start_us}}.dump());
      } else if (ev.lane == static_cast<int>(Lane::Recv) && a.arrival_measured) {
        end = std::max(end, a.transport_end_us);
        ev.category = kWaitedReceiveCategory;
      } else if (ev.lane == static_cast<int>(Lane::Recv)) {
        ev.category = kPostedReceiveCategory;  // its data came before its consumer asked: no arrival time
      }
      ev.dur_us = std::max(0.0, end - ev.ts_us);
      // A receive's own work is its post, whatever its span (docs/TORCH-TRACES.md).
      if (ev.lane == static_cast<int>(Lane::Recv))
        args.emplace_back(out.events.size(), json{{kReceivePostArg, a.end_us - a.start_us}}.dump());
      if (ev.lane == static_cast<int>(Lane::Send) || ev.lane == static_cast<int>(Lane::Recv)) {
        ev.bytes = a.bytes;
        const bool activation = carries_activation(a.kind);
        const bool send = ev.lane == static_cast<int>(Lane::Send);
        const int peer_stage = a.stage + ((activation == send) ? 1 : -1);
        if (const auto it = stage_rank.find(peer_stage); it != stage_rank.end()) ev.peer_rank = it->second;
      }
      out.events.push_back(std::move(ev));
    }
    if (options_.keep_operators) emit_operators(out, args);
    emit_memory(out);
  }

  int rank() const { return file_.rank; }
  double step_start_us() const { return window_.start_us; }
  // The ProfilerStep#N span's length and the CPU operators recorded in it (0 without steps).
  double step_duration_us() const { return step_ ? window_.end_us - window_.start_us : 0.0; }
  std::size_t step_operators() const {
    return step_ ? static_cast<std::size_t>(
                       std::count_if(spans_.begin(), spans_.end(),
                                     [&](const json* e) { return (*e)["cat"] == "cpu_op" && in_step(*e); }))
                 : 0;
  }
  // The GPU stream lanes (lane, name) that emit added.
  const std::vector<std::pair<int, std::string>>& stream_lanes() const { return stream_lanes_; }
  std::optional<int> step() const { return step_; }
  // The numbers of the steps the file holds (ProfilerStep#N, or those its actions repeat).
  std::vector<int> step_numbers() {
    find_process();
    std::vector<int> numbers;
    for (const auto& [n, _] : step_windows()) numbers.push_back(n);
    return numbers;
  }

 private:
  // The process's pid is the one of its CPU operators; the profiler's own tracks have string pids.
  void find_process() {
    std::map<std::int64_t, std::size_t> cpu_ops_by_pid;
    for (const auto& e : file_.doc["traceEvents"]) {
      if (!e.is_object() || text_field(e, "ph") != "X" || !e.contains("pid") || !e["pid"].is_number_integer()) continue;
      if (!e.contains("ts") || !e.contains("dur") || !e.contains("name")) continue;
      const std::string cat(text_field(e, "cat"));
      if (is_gpu_activity(cat)) {
        kernels_.push_back(&e);
      } else if (cat == "cuda_runtime" || cat == "cuda_driver") {
        launches_.push_back(&e);
      } else if (cat == "cpu_op" || cat == "user_annotation") {
        ++cpu_ops_by_pid[e["pid"].get<std::int64_t>()];
        spans_.push_back(&e);
      }
    }
    if (cpu_ops_by_pid.empty())
      throw TraceError(file_.path + ": no CPU operators: not a torch.profiler trace of a run");
    pid_ = std::max_element(cpu_ops_by_pid.begin(), cpu_ops_by_pid.end(), [](const auto& a, const auto& b) {
             return a.second < b.second;
           })->first;
    std::erase_if(spans_, [&](const json* e) { return (*e)["pid"].get<std::int64_t>() != pid_; });
  }

  void choose_step() {
    const std::map<int, TimeRange> steps = step_windows();
    // Without --step every rank reads the first rank's last step: each its own last would mix
    // steps (a rank that recorded one more) into one "iteration".
    const std::vector<int> first_steps = &first_ == &file_ ? std::vector<int>() : profiled_steps(first_);
    if (steps.empty()) {
      if (options_.step)
        throw TraceError(
            fmt::format("{}: --step {}: the trace marks no steps (no ProfilerStep#N spans: torch marks "
                        "them only when the profiler has a schedule)",
                        file_.path, *options_.step));
      if (!first_steps.empty())
        throw TraceError(fmt::format("{} marks no steps (no ProfilerStep#N spans), {} does: not one profiled window",
                                     file_.path, first_.path));
      notes_.push_back(file_.path +
                       ": no ProfilerStep#N spans (profile with a schedule to mark steps): "
                       "the whole trace is read as one step");
      window_ = {-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
      return;
    }
    if (steps_repeated_) {
      const std::string note = fmt::format(
          "no ProfilerStep#N spans: each rank's trace is split into steps where its PP: actions repeat (every rank "
          "runs its program once per step): {} steps",
          steps.size());
      if (std::find(notes_.begin(), notes_.end(), note) == notes_.end()) notes_.push_back(note);
    }
    if (&first_ != &file_ && !options_.step && first_steps.empty())
      throw TraceError(fmt::format("{} marks steps (ProfilerStep#N spans), {} does not: not one profiled window",
                                   file_.path, first_.path));
    const int chosen = options_.step         ? *options_.step
                       : first_steps.empty() ? steps.rbegin()->first
                                             : first_steps.back();
    const auto it = steps.find(chosen);
    if (it == steps.end()) {
      std::string present;
      for (const auto& [n, _] : steps) present += (present.empty() ? "" : ", ") + std::to_string(n);
      if (!options_.step)
        throw TraceError(
            fmt::format("{}: no ProfilerStep#{}, the last step of {} (steps there: {}): not one profiled window",
                        file_.path, chosen, first_.path, present));
      throw TraceError(
          fmt::format("{}: --step {}: no ProfilerStep#{} (steps there: {})", file_.path, chosen, chosen, present));
    }
    step_ = chosen;
    window_ = it->second;
  }

  // The ProfilerStep#N spans; without them, the steps the repetition of the PP: actions shows.
  std::map<int, TimeRange> step_windows() {
    std::map<int, TimeRange> steps;
    for (const json* e : spans_) {
      const std::string name = (*e)["name"].get<std::string>();
      if (name.rfind(kStepPrefix, 0) != 0) continue;
      const double ts = (*e)["ts"].get<double>();
      if (const auto step = step_number(name)) steps[*step] = {ts, ts + (*e)["dur"].get<double>()};
    }
    if (!steps.empty()) return steps;
    std::vector<const json*> actions;
    for (const json* e : spans_)
      if ((*e)["name"].get<std::string>().rfind(kActionPrefix, 0) == 0) actions.push_back(e);
    std::stable_sort(actions.begin(), actions.end(),
                     [](const json* a, const json* b) { return (*a)["ts"].get<double>() < (*b)["ts"].get<double>(); });
    const std::size_t period = program_period(actions);
    if (period == 0) return steps;
    steps_repeated_ = true;
    // Step k runs from its first action to the next step's first; the last to the end of the
    // rank's last operator (the optimizer step after it included, as a ProfilerStep#N holds it).
    double trace_end_us = 0;
    for (const json* e : spans_)
      trace_end_us = std::max(trace_end_us, (*e)["ts"].get<double>() + (*e)["dur"].get<double>());
    const std::size_t count = actions.size() / period;
    for (std::size_t k = 0; k < count; ++k)
      steps[static_cast<int>(k)] = {(*actions[k * period])["ts"].get<double>(),
                                    k + 1 < count ? (*actions[(k + 1) * period])["ts"].get<double>() : trace_end_us};
    return steps;
  }

  bool in_step(const json& e) const {
    const double ts = e["ts"].get<double>();
    return ts >= window_.start_us && ts < window_.end_us;
  }

  // The action whose CPU span holds time `t_us`, or nullptr.
  Action* action_at(double t_us) {
    auto it = std::upper_bound(actions_.begin(), actions_.end(), t_us,
                               [](double t, const Action& a) { return t < a.start_us; });
    if (it == actions_.begin()) return nullptr;
    --it;
    return t_us < it->end_us ? &*it : nullptr;
  }

  // A send's or receive's gloo/NCCL call starts inside its span and may end long after it:
  // a receive's ends when the compute that needs the data has it.
  void attach_transport_calls() {
    for (const json* e : spans_) {
      const std::string name = (*e)["name"].get<std::string>();
      if (!is_transport_call(name)) continue;
      Action* a = action_at((*e)["ts"].get<double>());
      if (!a || !is_transfer(a->kind)) continue;
      a->transport_end_us = std::max(a->transport_end_us, (*e)["ts"].get<double>() + (*e)["dur"].get<double>());
      if (a->bytes < 0 && e->contains("args")) a->bytes = bytes_of((*e)["args"]);
    }
  }

  // torch's RECV posts the receive; the first compute of its stage and micro-batch that needs
  // the data waits for it, and the transport call ends when that wait returns. The wait
  // returns at the data's arrival when it blocked, and right away when the data was already
  // there: then the end says only that the data came earlier. The rank's quickest wait is one
  // of the latter (the time to reach the wait); a wait longer than twice it blocked. Without
  // a transport call (no shapes, other backends) the kernels' end is the arrival on a GPU.
  void find_waiting_receives() {
    std::vector<std::pair<Action*, double>> waits;  // receive, its wait's length
    for (std::size_t i = 0; i < actions_.size(); ++i) {
      Action& recv = actions_[i];
      if (!is_receive(recv.kind)) continue;
      if (recv.launched_kernels()) {
        recv.arrival_measured = true;
        recv.transport_end_us = std::max(recv.transport_end_us, recv.kernel_end_us);
        continue;
      }
      if (recv.transport_end_us < 0) continue;
      const bool activation = carries_activation(recv.kind);
      for (std::size_t j = i + 1; j < actions_.size(); ++j) {
        Action& c = actions_[j];
        const bool consumes = activation ? c.kind == EventKind::Forward
                                         : (c.kind == EventKind::Backward || c.kind == EventKind::BackwardInput);
        if (!consumes || c.stage != recv.stage || c.micro_batch != recv.micro_batch) continue;
        waits.push_back({&recv, recv.transport_end_us - c.start_us});
        // torch waits for the data first thing in the action (_wait_batch_p2p), inside its span:
        // the work starts when the data is there.
        c.data_ready_us = std::max(c.data_ready_us, recv.transport_end_us);
        break;
      }
    }
    if (waits.empty()) return;
    const double quickest =
        std::max(0.0, std::min_element(waits.begin(), waits.end(), [](const auto& a, const auto& b) {
                        return a.second < b.second;
                      })->second);
    for (auto& [recv, wait_us] : waits) recv->arrival_measured = wait_us > 2 * quickest;
  }

  // GPU work: each kernel's "correlation" id is its launch's; the launch's time names the action.
  void attach_kernels() {
    std::map<std::int64_t, double> launch_time;
    for (const json* e : launches_)
      if (const auto c = correlation_of(*e)) launch_time[*c] = (*e)["ts"].get<double>();
    for (const json* k : kernels_) {
      const auto c = correlation_of(*k);
      const auto launched = c ? launch_time.find(*c) : launch_time.end();
      Action* a = launched == launch_time.end() ? nullptr : action_at(launched->second);
      kernel_action_.push_back(a ? static_cast<int>(a - actions_.data()) : -1);
      if (!a) continue;
      const double ts = (*k)["ts"].get<double>();
      a->kernel_start_us = std::min(a->kernel_start_us, ts);
      a->kernel_end_us = std::max(a->kernel_end_us, ts + (*k)["dur"].get<double>());
    }
  }

  static std::optional<std::int64_t> correlation_of(const json& e) {
    const auto args = e.find("args");
    if (args == e.end() || !args->is_object()) return std::nullopt;
    const auto c = args->find("correlation");
    if (c == args->end() || !c->is_number_integer()) return std::nullopt;
    return c->get<std::int64_t>();
  }

  // Single-stage schedule classes record `Forward i` / `Backward i` spans and no actions: kept
  // under their own names with their micro-batch, without a stage (the trace does not say it).
  void note_missing_actions(Trace& out) {
    bool any = false;
    for (const json* e : spans_) {
      const std::string name = (*e)["name"].get<std::string>();
      const bool forward = name.rfind("Forward ", 0) == 0, backward = name.rfind("Backward ", 0) == 0;
      if ((!forward && !backward) || !in_step(*e)) continue;
      TraceEvent ev;
      ev.rank = file_.rank;
      ev.lane = static_cast<int>(Lane::Compute);
      ev.name = name;
      ev.category = "compute";
      ev.ts_us = (*e)["ts"].get<double>();
      ev.dur_us = (*e)["dur"].get<double>();
      ev.micro_batch = action_number(std::string_view(name).substr(forward ? 8 : 9)).value_or(-1);
      out.events.push_back(std::move(ev));
      any = true;
    }
    notes_.push_back(
        fmt::format("{}: no PP: action spans{}: events have no stage; compare and calibrate need a "
                    "multi-stage schedule class (which records PP: spans)",
                    file_.path, any ? " (a single-stage schedule class: Forward i / Backward i only)" : ""));
  }

  void emit_operators(Trace& out, std::vector<std::pair<std::size_t, std::string>>& args) {
    for (const json* e : spans_) {
      const std::string name = (*e)["name"].get<std::string>();
      if (name.rfind(kActionPrefix, 0) == 0 || name.rfind(kStepPrefix, 0) == 0 || !in_step(*e)) continue;
      if (name.rfind("Forward ", 0) == 0 || name.rfind("Backward ", 0) == 0) {
        if (actions_.empty()) continue;  // already the compute lane's events
      }
      const double ts = (*e)["ts"].get<double>();
      const Action* a = action_at(ts);
      TraceEvent ev;
      ev.rank = file_.rank;
      ev.lane = kOperatorsLane;
      ev.name = name;
      ev.category = is_transport_call(name) ? "p2p" : "operator";
      ev.ts_us = ts;
      ev.dur_us = (*e)["dur"].get<double>();
      if (a) ev.stage = a->stage, ev.micro_batch = a->micro_batch;
      if (const auto it = e->find("args"); it != e->end() && it->contains("Input Dims")) {
        json shapes = json::object();
        for (const char* key : {"Input Dims", "Input type"})
          if (it->contains(key)) shapes[key] = (*it)[key];
        args.emplace_back(out.events.size(), shapes.dump());
      }
      out.events.push_back(std::move(ev));
    }
    std::map<std::pair<std::int64_t, std::string>, int> lane_of_stream;
    for (std::size_t i = 0; i < kernels_.size(); ++i) {
      const json& k = *kernels_[i];
      // A GPU runs behind its host: an action's kernels may end after the step's CPU span.
      if (kernel_action_[i] < 0 && !in_step(k)) continue;
      const auto key = std::make_pair(k["pid"].get<std::int64_t>(), id_text(k, "tid"));
      const auto [it, added] =
          lane_of_stream.emplace(key, kOperatorsLane + 1 + static_cast<int>(lane_of_stream.size()));
      if (added) stream_lanes_.emplace_back(it->second, fmt::format("GPU {} stream {}", key.first, key.second));
      TraceEvent ev;
      ev.rank = file_.rank;
      ev.lane = it->second;
      ev.name = k["name"].get<std::string>();
      ev.category = ev.name.find("nccl") != std::string::npos ? "p2p" : "kernel";
      ev.ts_us = k["ts"].get<double>();
      ev.dur_us = k["dur"].get<double>();
      if (kernel_action_[i] >= 0) {
        const Action& a = actions_[static_cast<std::size_t>(kernel_action_[i])];
        ev.stage = a.stage, ev.micro_batch = a.micro_batch;
      }
      out.events.push_back(std::move(ev));
    }
  }

  // "[memory]" events hold the allocator's total after each allocation or free; a GPU run's
  // curve is its GPU's (Device Type 1), a CPU run's the host's. The value held when the step
  // starts opens the curve.
  void emit_memory(Trace& out) {
    std::vector<std::pair<double, std::int64_t>> cpu, gpu;
    for (const auto& e : file_.doc["traceEvents"]) {
      if (!e.is_object() || text_field(e, "name") != "[memory]" || !e.contains("args") || !e.contains("ts")) continue;
      const json& a = e["args"];
      if (!a.contains("Total Allocated") || !a["Total Allocated"].is_number()) continue;
      (is_host_memory(a) ? cpu : gpu).push_back({e["ts"].get<double>(), a["Total Allocated"].get<std::int64_t>()});
    }
    auto& chosen = gpu.empty() ? cpu : gpu;
    std::stable_sort(chosen.begin(), chosen.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    // The value held when the window opens (the last sample before it), then the window's own.
    bool held_before = false;
    std::int64_t bytes_before = 0;
    for (const auto& [ts, bytes] : chosen) {
      if (ts < window_.start_us) {
        held_before = true;
        bytes_before = bytes;
        continue;
      }
      if (ts >= window_.end_us) break;
      if (held_before) out.memory.push_back({file_.rank, window_.start_us, bytes_before}), held_before = false;
      out.memory.push_back({file_.rank, ts, bytes});
    }
  }

 private:
  std::vector<std::pair<int, std::string>> stream_lanes_;
  const RankFile& file_;
  const RankFile& first_;
  const TorchReadOptions& options_;
  std::vector<std::string>& notes_;
  std::int64_t pid_ = 0;
  std::vector<const json*> spans_, kernels_, launches_;
  std::vector<int> kernel_action_;  // per kernel: index into actions_, or -1
  std::vector<Action> actions_;
  TimeRange window_;
  std::optional<int> step_;
  bool steps_repeated_ = false;  // the steps are the repetitions of the program, not ProfilerStep#N
};

std::vector<int> profiled_steps(const RankFile& file) {
  std::vector<std::string> ignored;
  return RankReader(file, file, TorchReadOptions{}, ignored).step_numbers();
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
  check_numbering(files, stage_rank, forwards, readers.front().step().has_value(), run.notes);
  Trace& t = run.trace;
  std::vector<std::pair<std::size_t, std::string>> args;
  for (auto& r : readers) r.emit(stage_rank, t, args);

  const int world = files.front().world_size;
  if (static_cast<int>(files.size()) < world) {
    std::string missing;
    for (int r = 0; r < world; ++r)
      if (std::none_of(files.begin(), files.end(), [&](const RankFile& f) { return f.rank == r; }))
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    run.notes.push_back(fmt::format("the run has {} ranks; no file of rank(s) {}", world, missing));
  }

  // Times from the step's start on the rank that started it first (ranks of one host share a
  // clock); without step marks, from the earliest event or memory sample.
  double origin = std::numeric_limits<double>::infinity();
  for (const auto& r : readers) origin = std::min(origin, r.step_start_us());
  if (!std::isfinite(origin))
    for (const auto& e : t.events) origin = std::min(origin, e.ts_us);
  for (const auto& m : t.memory) origin = std::min(origin, m.ts_us);
  if (!std::isfinite(origin)) origin = 0;
  for (auto& e : t.events) e.ts_us -= origin;
  for (auto& m : t.memory) m.ts_us -= origin;

  // Events in time order; the args follow their events.
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

  int stages = 0, micro_batches = 0;
  for (const auto& e : t.events)
    if (e.lane < kNumLanes)
      stages = std::max(stages, e.stage + 1), micro_batches = std::max(micro_batches, e.micro_batch + 1);
  t.meta.source = "measured";
  t.meta.schedule = "torch.distributed.pipelining";
  t.meta.num_ranks = world;
  t.meta.num_stages = stages;
  t.meta.num_micro_batches = micro_batches;
  t.meta.iteration = readers.front().step().value_or(0);
  json sources = json::array();
  for (const auto& f : files) sources.push_back(f.path);
  t.meta.extra["torch_profiler"] = {{"files", sources},
                                    {"step", readers.front().step() ? json(*readers.front().step()) : json()}};
  if (readers.front().step()) {
    double duration_us = 0, operators = 0;
    for (const auto& r : readers)
      duration_us += r.step_duration_us(), operators += static_cast<double>(r.step_operators());
    t.meta.extra["torch_profiler"][kStepDurationKey] = duration_us / static_cast<double>(readers.size());
    t.meta.extra["torch_profiler"][kStepOperatorsKey] = operators / static_cast<double>(readers.size());
  }

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
      options.every_step && !options.step ? profiled_steps(files.front()) : std::vector<int>{};
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
