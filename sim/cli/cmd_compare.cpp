// `ppsim compare PREDICTED MEASURED... [--json] [--top N] [--step N]`: how far a predicted trace
// is from a measured one. MEASURED is a trace file, or the per-rank torch.profiler files of one
// run (several files or their folder; --step picks the profiled step). A table for people by default; with --json the fields of SPEC.md section 7
// (errors are signed fractions of the measured value) plus per-rank detail, each rank's time by
// operation and the receives' costs.
#include <cmath>
#include <iostream>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "command.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/terminal_text.hpp"
#include "pipescope/traces/compare.hpp"
#include "pipescope/traces/trace_arguments.hpp"
#include "pipescope/traces/trace_io.hpp"

namespace po = boost::program_options;

namespace pipescope::cli {
namespace {

std::string percent(double fraction) {
  return std::isfinite(fraction) ? fmt::format("{:+.1f}%", fraction * 100) : std::string("n/a");
}

std::string share(double fraction) { return fmt::format("{:.1f}%", fraction * 100); }

std::string mib(std::int64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

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
void print_receives(const traces::ReceiveCosts& p, const traces::ReceiveCosts& m, std::ostream& out) {
  if (p.ready + p.waited + m.ready + m.waited == 0) return;
  out << fmt::format("\nreceives whose data was sent before them (their own cost): predicted {}, measured {}\n",
                     mean_of(p.ready, p.ready_mean_us()), mean_of(m.ready, m.ready_mean_us()));
  out << fmt::format("receives that waited (from the send to the data): predicted {}, measured {}\n",
                     mean_of(p.waited, p.waited_mean_us()), mean_of(m.waited, m.waited_mean_us()));
}

void print_table(const traces::Comparison& c, const traces::Trace& predicted, std::ostream& out) {
  out << fmt::format("{:<24}{:>14}{:>14}{:>10}\n", "", "predicted", "measured", "error");
  out << fmt::format("{:<24}{:>14}{:>14}{:>10}\n", "iteration time", seconds(c.iteration_time_predicted_s),
                     seconds(c.iteration_time_measured_s), percent(c.iteration_time_error));
  out << fmt::format("{:<24}{:>14}{:>14}\n", "bubble (mean of ranks)", share(c.bubble_fraction_predicted),
                     share(c.bubble_fraction_measured));
  if (std::isfinite(c.stolen_fraction_measured)) {
    out << fmt::format("{:<24}{:>14}{:>14}\n", "stolen by the host", "", share(c.stolen_fraction_measured));
    if (c.stolen_fraction_measured > traces::kDisturbedStolenFraction)
      out << fmt::format("warning: the host took {} of a rank's measured step from its cores (steal): the measurement "
                         "is disturbed; measure again when the machine is quiet\n",
                         share(c.stolen_fraction_measured));
  }
  out << fmt::format("operation durations: MAPE {:.1f}% over {} matched operations ({} only predicted, {} only measured)\n\n",
                     c.op_duration_mape * 100, c.matched.size(), c.unmatched_predicted, c.unmatched_measured);

  out << fmt::format("{:<6}{:>12}{:>12}{:>16}{:>16}{:>10}\n", "rank", "bubble pred", "bubble meas", "peak mem pred",
                     "peak mem meas", "error");
  for (const auto& r : c.ranks)
    out << fmt::format("{:<6}{:>12}{:>12}{:>16}{:>16}{:>10}\n", r.rank, share(r.bubble_fraction_predicted),
                       share(r.bubble_fraction_measured), mib(r.peak_memory_predicted_bytes),
                       mib(r.peak_memory_measured_bytes), percent(r.peak_memory_error));

  if (!c.operation_times.empty()) {
    out << fmt::format("\ntime by operation (summed over the iteration):\n{:<6}{:<12}{:>8}{:>8}{:>14}{:>14}{:>14}\n", "rank",
                       "name", "n pred", "n meas", "pred ms", "meas ms", "pred-meas ms");
    for (const auto& t : c.operation_times)
      out << fmt::format("{:<6}{:<12}{:>8}{:>8}{:>14.3f}{:>14.3f}{:>+14.3f}\n", t.rank, printable(t.name), t.predicted_count,
                         t.measured_count, t.predicted_total_us * 1e-3, t.measured_total_us * 1e-3,
                         t.difference_us() * 1e-3);
  }
  print_receives(c.receives_predicted, c.receives_measured, out);

  if (c.top_differences.empty()) return;
  out << fmt::format("\noperations that differ most:\n{:<6}{:<12}{:>6}{:>6}{:>14}{:>14}{:>14}{:>10}\n", "rank", "name",
                     "stage", "mb", "pred dur us", "meas dur us", "pred-meas us", "error");
  for (const auto& op : c.top_differences) {
    const auto& e = predicted.events[op.predicted_index];
    out << fmt::format("{:<6}{:<12}{:>6}{:>6}{:>14.2f}{:>14.2f}{:>+14.2f}{:>10}\n", e.rank, printable(e.name),
                       e.stage < 0 ? std::string("-") : std::to_string(e.stage),
                       e.micro_batch < 0 ? std::string("-") : std::to_string(e.micro_batch), op.predicted_dur_us,
                       op.measured_dur_us, op.difference_us(), percent(op.duration_error()));
  }
}

int run_compare(const std::vector<std::string>& args) {
  std::string predicted_path;
  std::vector<std::string> measured_paths;
  bool json = false;
  int top = 10;
  int step = -1;
  po::options_description options("ppsim compare PREDICTED MEASURED... [options]");
  options.add_options()
      ("help,h", "this text")
      ("json", po::bool_switch(&json), "print one JSON object (SPEC.md section 7) instead of a table")
      ("top", po::value(&top)->default_value(top), "how many of the most different operations to list")
      ("step", po::value(&step), "torch.profiler traces: the ProfilerStep#N to compare (default: the last)");
  po::options_description hidden;
  hidden.add_options()("predicted", po::value(&predicted_path))("measured", po::value(&measured_paths));
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("predicted", 1).add("measured", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  if (vm.count("help")) {
    std::cout << options
              << "\nPREDICTED and MEASURED are trace files (.json or .json.gz; SPEC.md section 5), usually\n"
                 "from `ppsim simulate --trace` and `pprun --trace`. Events are matched by rank, name,\n"
                 "stage and micro-batch; errors are (predicted - measured) / measured.\n"
                 "MEASURED may also be the per-rank torch.profiler traces of one torch.distributed.pipelining\n"
                 "run (several files or their folder; docs/TORCH-TRACES.md), merged by rank.\n";
    return 0;
  }
  po::notify(vm);
  if (predicted_path.empty() || measured_paths.empty())
    throw UsageError("compare needs two trace files: PREDICTED MEASURED (see ppsim compare --help)");
  if (top < 0) throw UsageError("--top: must be 0 or more, not " + std::to_string(top));
  if (vm.count("step") && step < 0) throw UsageError("--step: must be 0 or more, not " + std::to_string(step));

  const traces::Trace predicted = traces::read_trace(predicted_path);
  // Only the pipeline's actions are compared: a torch trace's operators would be unmatched noise.
  traces::TorchReadOptions torch_options;
  torch_options.keep_operators = false;
  if (vm.count("step")) torch_options.step = step;
  std::vector<std::string> notes;
  std::vector<traces::NamedTrace> measured_inputs = traces::read_trace_arguments(measured_paths, torch_options, notes);
  if (measured_inputs.size() != 1)
    throw UsageError("compare: MEASURED is one trace file or the torch.profiler files of one run, not several traces");
  for (const auto& note : notes) std::cerr << "note: " << printable(note) << "\n";
  const traces::Trace measured = std::move(measured_inputs.front().trace);
  const std::string measured_path = measured_inputs.front().name;
  traces::check_same_rank_count(predicted, measured, predicted_path, measured_path);
  const traces::Comparison comparison = traces::compare_traces(predicted, measured, static_cast<std::size_t>(top));
  if (json) {
    std::cout << printable_json(traces::comparison_to_json(comparison, predicted, measured).dump()) << "\n";
  } else {
    print_table(comparison, predicted, std::cout);
  }
  return 0;
}

const CommandRegistrar compare_registrar{{"compare", "compare a predicted trace with a measured one", run_compare}};

}  // namespace
}  // namespace pipescope::cli
