// `ppsim plan [model+gpu+cluster] [--max-mem BYTES] [--top K] [--format table|csv|json]`:
// searches tensor/pipeline/data-parallel sizes, chunks, micro-batching, schedules, recomputation
// and sequence parallelism for a model on a cluster and ranks what fits by simulated throughput. With no arguments it
// plans gpt-7b on 64 H100 (8 per node) with a global batch of 512. With `--profile FILE` it
// plans with the costs pprun measured (ppsim calibrate) for that model and world size.
#include <boost/program_options.hpp>
#include <cmath>
#include <iostream>

#include <fmt/format.h>

#include "command.hpp"
#include "pipescope/sim/planner.hpp"
#include "pipescope/sim/prediction_interval.hpp"
#include "megatron_size_names.hpp"
#include "plan_options.hpp"
#include "plan_output.hpp"

namespace po = boost::program_options;

namespace pipescope::cli {
namespace {

class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  void operator()(std::size_t done, std::size_t total) {
    if (!enabled_ || total == 0) return;
    const int width = 40;
    const int filled = static_cast<int>(width * done / total);
    std::cerr << fmt::format("\r[{}{}] {}/{} configurations", std::string(filled, '#'),
                             std::string(width - filled, '.'), done, total)
              << std::flush;
    if (done == total) std::cerr << "\n";
  }

 private:
  bool enabled_;
};

// With --profile: each shown row's interval (prediction_interval.hpp). Whether a row splits its
// backwards needs no schedule built: a schedule of full backwards takes each B whole
// (full_backward_s), so a larger overhead of the estimated split leaves its time as it is. (The
// interval itself cannot tell: the steps' spread widens it whether the split moved it or not.)
std::vector<std::optional<sim::PredictionInterval>> row_intervals(const sim::PlanRequest& request,
                                                                  const sim::PlanResult& result, std::size_t shown) {
  std::vector<std::optional<sim::PredictionInterval>> intervals(shown);
  if (!request.profile) return intervals;
  for (std::size_t i = 0; i < shown; ++i) {
    const sim::PlanRow& row = result.rows[i];
    auto simulate_profile = [&](const sim::Profile& moved) {
      sim::PlanRequest other = request;
      other.profile = moved;
      return sim::simulate_candidate(other, row.candidate, false).summary.iteration_time_s;
    };
    bool uses_split = false;
    if (const auto& e = request.profile->backward_split_estimate) {
      const double more_overhead =
          simulate_profile(sim::with_backward_split(*request.profile, e->input_share, e->overhead + 0.1));
      uses_split = std::fabs(more_overhead - row.iteration_time_s) > 1e-12 * row.iteration_time_s;
    }
    intervals[i] = sim::prediction_interval(*request.profile, uses_split, row.iteration_time_s, simulate_profile);
  }
  return intervals;
}

int run_plan(const std::vector<std::string>& args) {
  PlanOptions o;
  po::options_description options("ppsim plan [options]");
  add_plan_options(options, o);
  add_megatron_plan_names(options);
  add_megatron_model_names(options);
  po::variables_map vm;
  po::store(po::command_line_parser(with_megatron_model(with_megatron_plan_names(args))).options(options).run(), vm);
  if (vm.count("help")) {
    std::cout << options;
    return 0;
  }
  po::notify(vm);
  const sim::PlanRequest request = plan_request(o, vm);

  ProgressBar bar(progress_enabled(o.quiet));
  const sim::PlanResult result = sim::plan(request, std::ref(bar));
  const std::size_t shown = o.top == 0 ? result.rows.size() : std::min<std::size_t>(o.top, result.rows.size());
  const PlanOutput out{o, request, result, shown, row_intervals(request, result, shown)};
  if (o.format == "json")
    print_plan_json(out);
  else if (o.format == "csv")
    print_plan_csv(out);
  else
    print_plan_table(out);
  if (!o.trace_dir.empty()) write_plan_traces(out);
  return 0;
}

const CommandRegistrar plan_registrar{
    {"plan", "rank tensor/pipeline/data-parallel layouts, schedules and micro-batching of a model on a cluster",
     run_plan}};

}  // namespace
}  // namespace pipescope::cli
