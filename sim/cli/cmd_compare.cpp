// `ppsim compare PREDICTED MEASURED... [--json] [--top N] [--step N] [--raw-clocks]`: how far a
// predicted trace is from a measured one, or (both measured) what got slower from run A to run B.
// MEASURED is a trace file, or the per-rank torch.profiler files of one run (several files or
// their folder; --step picks the profiled step). A table for people by default; with --json the
// fields of SPEC.md section 7 (errors are signed fractions of the measured value) plus per-rank
// detail, each rank's time by operation and the receives' costs.
// `ppsim compare --explain MEASURED [PREDICTED]`: which rank held the step back, and why
// (compare_explain.hpp). Measured ranks are put on one clock first unless --raw-clocks.
#include <cmath>
#include <iostream>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "command.hpp"
#include "compare_explain.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/terminal_text.hpp"
#include "pipescope/traces/compare.hpp"
#include "pipescope/traces/trace_arguments.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "pipescope/traces/trace_matching.hpp"

namespace po = boost::program_options;

namespace pipescope::cli {
namespace {

std::string percent(double fraction) {
  return std::isfinite(fraction) ? fmt::format("{:+.1f}%", fraction * 100) : std::string("n/a");
}

std::string share(double fraction) { return fmt::format("{:.1f}%", fraction * 100); }

std::string mib(std::int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

std::string seconds(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

std::string mean_of(std::size_t count, double mean_us) {
  return count ? fmt::format("{} x {:.1f} us", count, mean_us) : std::string("none");
}

// Receives whose data was posted before them cost the transport's own work; those that waited
// took the message's latency: a receive model that is off shows here first.
void print_receives(const traces::ReceiveCosts& p, const traces::ReceiveCosts& m, const std::string& a,
                    const std::string& b, std::ostream& out) {
  if (p.ready + p.waited + m.ready + m.waited == 0) return;
  out << fmt::format("\nreceives whose data was sent before them (their own cost): {} {}, {} {}\n", a,
                     mean_of(p.ready, p.ready_mean_us()), b, mean_of(m.ready, m.ready_mean_us()));
  out << fmt::format("receives that waited (from the send to the data): {} {}, {} {}\n", a,
                     mean_of(p.waited, p.waited_mean_us()), b, mean_of(m.waited, m.waited_mean_us()));
}

// Column titles: a prediction against a measurement, or run A against run B.
struct SideLabels {
  std::string a = "predicted", b = "measured", a_short = "pred", b_short = "meas";
};

const SideLabels kRunLabels{"run A", "run B", "A", "B"};

void print_top_differences(const traces::Comparison& c, const traces::Trace& predicted, const SideLabels& l,
                           std::ostream& out) {
  if (c.top_differences.empty()) return;
  out << fmt::format("\noperations that differ most:\n{:<6}{:<12}{:>6}{:>6}{:>14}{:>14}{:>14}{:>10}\n", "rank", "name",
                     "stage", "mb", l.a_short + " dur us", l.b_short + " dur us", l.a_short + "-" + l.b_short + " us",
                     "error");
  for (const auto& op : c.top_differences) {
    const auto& e = predicted.events[op.predicted_index];
    out << fmt::format("{:<6}{:<12}{:>6}{:>6}{:>14.2f}{:>14.2f}{:>+14.2f}{:>10}\n", e.rank, printable(e.name),
                       e.stage < 0 ? std::string("-") : std::to_string(e.stage),
                       e.micro_batch < 0 ? std::string("-") : std::to_string(e.micro_batch), op.predicted_dur_us,
                       op.measured_dur_us, op.difference_us(), percent(op.duration_error()));
  }
}

void print_table(const traces::Comparison& c, const traces::Trace& predicted, const SideLabels& l, std::ostream& out) {
  out << fmt::format("{:<24}{:>14}{:>14}{:>10}\n", "", l.a, l.b, "error");
  out << fmt::format("{:<24}{:>14}{:>14}{:>10}\n", "iteration time", seconds(c.iteration_time_predicted_s),
                     seconds(c.iteration_time_measured_s), percent(c.iteration_time_error));
  out << fmt::format("{:<24}{:>14}{:>14}\n", "bubble (mean of ranks)", share(c.bubble_fraction_predicted),
                     share(c.bubble_fraction_measured));
  if (std::isfinite(c.stolen_fraction_measured)) {
    out << fmt::format("{:<24}{:>14}{:>14}\n", "stolen by the host", "", share(c.stolen_fraction_measured));
    if (c.stolen_fraction_measured > traces::kDisturbedStolenFraction)
      out << fmt::format(
          "warning: the host took {} of a rank's measured step from its cores (steal): the measurement "
          "is disturbed; measure again when the machine is quiet\n",
          share(c.stolen_fraction_measured));
  }
  out << fmt::format(
      "operation durations: MAPE {:.1f}%, weighted by duration {:.1f}%, over {} matched operations ({} only {}, {} "
      "only {})\n\n",
      c.op_duration_mape * 100, c.op_duration_weighted_error * 100, c.matched.size(), c.unmatched_predicted, l.a,
      c.unmatched_measured, l.b);

  out << fmt::format("{:<6}{:>12}{:>12}{:>16}{:>16}{:>10}\n", "rank", "bubble " + l.a_short, "bubble " + l.b_short,
                     "peak mem " + l.a_short, "peak mem " + l.b_short, "error");
  for (const auto& r : c.ranks)
    out << fmt::format("{:<6}{:>12}{:>12}{:>16}{:>16}{:>10}\n", r.rank, share(r.bubble_fraction_predicted),
                       share(r.bubble_fraction_measured), mib(r.peak_memory_predicted_bytes),
                       mib(r.peak_memory_measured_bytes), percent(r.peak_memory_error));

  if (!c.operation_times.empty()) {
    out << fmt::format("\ntime by operation (summed over the iteration):\n{:<6}{:<12}{:>8}{:>8}{:>14}{:>14}{:>14}\n",
                       "rank", "name", "n " + l.a_short, "n " + l.b_short, l.a_short + " ms", l.b_short + " ms",
                       l.a_short + "-" + l.b_short + " ms");
    for (const auto& t : c.operation_times)
      out << fmt::format("{:<6}{:<12}{:>8}{:>8}{:>14.3f}{:>14.3f}{:>+14.3f}\n", t.rank, printable(t.name),
                         t.predicted_count, t.measured_count, t.predicted_total_us * 1e-3, t.measured_total_us * 1e-3,
                         t.difference_us() * 1e-3);
  }
  print_receives(c.receives_predicted, c.receives_measured, l.a, l.b, out);
  print_top_differences(c, predicted, l, out);
}

// What run A against run B changed: one line, then the operations that got slower most.
void print_run_difference(const traces::RunDifference& d, const traces::Trace& a, std::ostream& out) {
  out << printable(traces::summarize_run_difference(d)) << "\n";
  if (d.top_changes.empty()) return;
  out << fmt::format("\noperations that got slower most:\n{:<6}{:<12}{:>6}{:>6}{:>14}{:>14}{:>14}\n", "rank", "name",
                     "stage", "mb", "A dur us", "B dur us", "B-A us");
  for (const auto& op : d.top_changes) {
    const auto& e = a.events[op.predicted_index];
    out << fmt::format("{:<6}{:<12}{:>6}{:>6}{:>14.2f}{:>14.2f}{:>+14.2f}\n", e.rank, printable(e.name),
                       e.stage < 0 ? std::string("-") : std::to_string(e.stage),
                       e.micro_batch < 0 ? std::string("-") : std::to_string(e.micro_batch), op.predicted_dur_us,
                       op.measured_dur_us, op.measured_dur_us - op.predicted_dur_us);
  }
}

struct CompareOptions {
  std::vector<std::string> paths;
  bool json = false;
  bool explain = false;
  bool raw_clocks = false;
  bool align_clocks = false;  // torch.profiler traces too
  int top = 10;
  traces::TorchReadOptions torch;
};

// Parses the command line; returns false after printing --help.
bool parse_compare_options(const std::vector<std::string>& args, CompareOptions& o) {
  int step = -1;
  po::options_description options(
      "ppsim compare PREDICTED MEASURED... [options]\nppsim compare --explain MEASURED [PREDICTED] [options]");
  auto add = options.add_options();
  add("help,h", "this text");
  add("json", po::bool_switch(&o.json), "print one JSON object (SPEC.md section 7) instead of a table");
  add("top", po::value(&o.top)->default_value(o.top), "how many of the most different operations to list");
  add("step", po::value(&step), "torch.profiler traces: the ProfilerStep#N to compare (default: the last)");
  add("explain", po::bool_switch(&o.explain), "say which rank (or transfer) held the measured step back, and why");
  add("raw-clocks", po::bool_switch(&o.raw_clocks), "keep each rank's times as written (no clock alignment)");
  add("align-clocks", po::bool_switch(&o.align_clocks),
      "align torch.profiler traces' clocks too (their send/receive spans are postings: docs/EXPLAIN.md)");
  po::options_description hidden;
  hidden.add_options()("traces", po::value(&o.paths));
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("traces", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  if (vm.count("help")) {
    std::cout << options
              << "\nPREDICTED and MEASURED are trace files (.json or .json.gz; SPEC.md section 5), usually\n"
                 "from `ppsim simulate --trace` and `pprun --trace`. Events are matched by rank, name,\n"
                 "stage and micro-batch; errors are (predicted - measured) / measured. When both traces\n"
                 "were measured they are run A and run B, and the summary says what got slower.\n"
                 "MEASURED may also be the per-rank torch.profiler traces of one torch.distributed.pipelining\n"
                 "run (several files or their folder; docs/TORCH-TRACES.md), merged by rank.\n"
                 "Ranks whose clocks disagree (a receive ending before its send began) are aligned by\n"
                 "their transfers and collectives (docs/EXPLAIN.md) unless --raw-clocks.\n";
    return false;
  }
  po::notify(vm);
  if (o.top < 0) throw UsageError("--top: must be 0 or more, not " + std::to_string(o.top));
  if (vm.count("step") && step < 0) throw UsageError("--step: must be 0 or more, not " + std::to_string(step));
  if (vm.count("step")) o.torch.step = step;
  // Only the pipeline's actions are compared: a torch trace's operators would be unmatched noise.
  o.torch.keep_operators = false;
  return true;
}

// Puts a measured trace's ranks on one clock (unless --raw-clocks), saying so on stderr.
traces::ClockAlignment align(traces::NamedTrace& input, const CompareOptions& o) {
  if (o.raw_clocks || input.trace.meta.source == "predicted") return {};
  traces::ClockAlignment alignment = traces::align_clocks(input.trace, o.align_clocks);
  if (alignment.applied)
    std::cerr << "note: " << printable(input.name) << ": " << traces::describe_clock_alignment(alignment) << "\n";
  return alignment;
}

int run_explain(const CompareOptions& o) {
  std::vector<std::string> notes;
  std::vector<traces::NamedTrace> inputs = traces::read_trace_arguments(o.paths, o.torch, notes);
  if (inputs.empty() || inputs.size() > 2)
    throw UsageError("compare --explain: needs MEASURED and at most one PREDICTED trace, not " +
                     std::to_string(inputs.size()));
  for (const auto& note : notes) std::cerr << "note: " << printable(note) << "\n";
  const traces::ClockAlignment clocks = align(inputs.front(), o);
  const traces::Trace& measured = inputs.front().trace;
  const traces::StepAttribution attribution = traces::attribute_step(measured);
  if (inputs.size() == 2) traces::check_same_rank_count(inputs[1].trace, measured, inputs[1].name, inputs.front().name);
  if (o.json) {
    nlohmann::json out = explanation_json(attribution, measured, clocks);
    if (inputs.size() == 2) {
      const auto comparison = traces::compare_traces(inputs[1].trace, measured, static_cast<std::size_t>(o.top));
      out["comparison"] = traces::comparison_to_json(comparison, inputs[1].trace, measured);
    }
    std::cout << printable_json(out.dump()) << "\n";
    return 0;
  }
  print_explanation(attribution, measured, std::cout);
  if (inputs.size() == 2) {
    const auto comparison = traces::compare_traces(inputs[1].trace, measured, static_cast<std::size_t>(o.top));
    std::cout << fmt::format("predicted: iteration {} against {} measured ({}); bubble {} against {}\n",
                             seconds(comparison.iteration_time_predicted_s),
                             seconds(comparison.iteration_time_measured_s), percent(comparison.iteration_time_error),
                             share(comparison.bubble_fraction_predicted), share(comparison.bubble_fraction_measured));
  }
  return 0;
}

int run_pair(const CompareOptions& o) {
  if (o.paths.size() < 2)
    throw UsageError("compare needs two trace files: PREDICTED MEASURED (see ppsim compare --help)");
  std::vector<std::string> notes;
  traces::NamedTrace first{traces::read_trace(o.paths.front()), o.paths.front()};
  std::vector<traces::NamedTrace> measured_inputs =
      traces::read_trace_arguments({o.paths.begin() + 1, o.paths.end()}, o.torch, notes);
  if (measured_inputs.size() != 1)
    throw UsageError("compare: MEASURED is one trace file or the torch.profiler files of one run, not several traces");
  for (const auto& note : notes) std::cerr << "note: " << printable(note) << "\n";
  align(first, o);
  align(measured_inputs.front(), o);
  const traces::Trace& predicted = first.trace;
  const traces::Trace& measured = measured_inputs.front().trace;
  traces::check_same_rank_count(predicted, measured, first.name, measured_inputs.front().name);
  const traces::Comparison comparison = traces::compare_traces(predicted, measured, static_cast<std::size_t>(o.top));
  const bool runs = traces::both_measured(predicted, measured);
  const auto difference =
      runs ? traces::difference_of_runs(predicted, measured, comparison, static_cast<std::size_t>(o.top))
           : traces::RunDifference{};
  if (o.json) {
    nlohmann::json out = traces::comparison_to_json(comparison, predicted, measured);
    if (runs) out["run_difference"] = traces::run_difference_to_json(difference, predicted);
    std::cout << printable_json(out.dump()) << "\n";
  } else if (runs) {
    print_run_difference(difference, predicted, std::cout);
    std::cout << "\n";
    traces::Comparison without_top = comparison;
    without_top.top_differences.clear();  // the slower-first list above says it for runs
    print_table(without_top, predicted, kRunLabels, std::cout);
  } else {
    print_table(comparison, predicted, SideLabels{}, std::cout);
  }
  return 0;
}

int run_compare(const std::vector<std::string>& args) {
  CompareOptions o;
  if (!parse_compare_options(args, o)) return 0;
  if (o.paths.empty()) throw UsageError("compare needs two trace files: PREDICTED MEASURED (see ppsim compare --help)");
  return o.explain ? run_explain(o) : run_pair(o);
}

const CommandRegistrar compare_registrar{
    {"compare", "compare a predicted trace with a measured one, or two runs; --explain: who held the step back",
     run_compare}};

}  // namespace
}  // namespace pipescope::cli
