// A rank's file before any action is read: its process among the tracks of the file, its
// spans with their roles (span_role, once), and the step read: a ProfilerStep#N span, or
// where torch marked no steps, a repetition of the rank's program (torch_profiler_rank.hpp).
#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "torch_profiler_rank.hpp"

namespace pipescope::traces::detail {

// The process's pid is the one of its CPU operators; the profiler's own tracks have string pids.
void RankReader::find_process() {
  std::map<std::int64_t, std::size_t> cpu_ops_by_pid;
  for (const TorchSpan& e : file_.events.spans) {
    if (e.activity == TorchActivity::GpuActivity) {
      kernels_.push_back(&e);
    } else if (e.activity == TorchActivity::Launch) {
      launches_.push_back(&e);
    } else {
      ++cpu_ops_by_pid[e.pid];
      spans_.push_back({&e, span_role(name_of(e))});
    }
  }
  if (cpu_ops_by_pid.empty()) throw TraceError(file_.path + ": no CPU operators: not a torch.profiler trace of a run");
  pid_ = std::max_element(cpu_ops_by_pid.begin(), cpu_ops_by_pid.end(), [](const auto& a, const auto& b) {
           return a.second < b.second;
         })->first;
  std::erase_if(spans_, [&](const RankSpan& s) { return s->pid != pid_; });
}

void RankReader::choose_step() {
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
  const int chosen = options_.step ? *options_.step : first_steps.empty() ? steps.rbegin()->first : first_steps.back();
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
std::map<int, TimeRange> RankReader::step_windows() {
  std::map<int, TimeRange> steps;
  for (const RankSpan& e : spans_) {
    if (e.role != SpanRole::Step) continue;
    if (const auto step = step_number(name_of(*e))) steps[*step] = {e->ts_us, e->end_us()};
  }
  if (!steps.empty()) return steps;
  std::vector<const TorchSpan*> actions;
  for (const RankSpan& e : spans_)
    if (e.role == SpanRole::Action) actions.push_back(e.event);
  std::stable_sort(actions.begin(), actions.end(),
                   [](const TorchSpan* a, const TorchSpan* b) { return a->ts_us < b->ts_us; });
  std::vector<std::uint32_t> names;
  names.reserve(actions.size());
  for (const TorchSpan* a : actions) names.push_back(a->name);
  const std::size_t period = program_period(names);
  if (period == 0) return steps;
  steps_repeated_ = true;
  // Step k runs from its first action to the next step's first; the last to the end of the
  // rank's last operator (the optimizer step after it included, as a ProfilerStep#N holds it).
  double trace_end_us = 0;
  for (const RankSpan& e : spans_) trace_end_us = std::max(trace_end_us, e->end_us());
  const std::size_t count = actions.size() / period;
  for (std::size_t k = 0; k < count; ++k)
    steps[static_cast<int>(k)] = {actions[k * period]->ts_us,
                                  k + 1 < count ? actions[(k + 1) * period]->ts_us : trace_end_us};
  return steps;
}

bool RankReader::in_step(const TorchSpan& e) const { return e.ts_us >= window_.start_us && e.ts_us < window_.end_us; }

std::vector<int> RankReader::step_numbers() {
  find_process();
  std::vector<int> numbers;
  for (const auto& [n, _] : step_windows()) numbers.push_back(n);
  return numbers;
}

std::size_t RankReader::step_operators() const {
  if (!step_) return 0;
  return static_cast<std::size_t>(std::count_if(spans_.begin(), spans_.end(), [&](const RankSpan& e) {
    return e->activity == TorchActivity::CpuOperator && in_step(*e);
  }));
}

std::vector<int> profiled_steps(const RankFile& file) {
  std::vector<std::string> ignored;
  return RankReader(file, file, TorchReadOptions{}, ignored).step_numbers();
}

}  // namespace pipescope::traces::detail
