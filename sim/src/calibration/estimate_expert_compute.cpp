// The experts' own compute of a MoE run (Profile::expert_compute): a cost per call and per row
// fitted to the expert calls of the passes (forward and backward apart), the rows a layer's
// local experts got per micro-batch, the experts' parameters per layer, and what a parameter
// more costs the data-parallel reduction. The stages' F and B samples are
// already net of the calls (collect_rank_expert_calls).
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "estimation.hpp"
#include "line_fit.hpp"

namespace pipescope::sim::calibration {

namespace {

// The calls' rows against their times, as sums for a line fit.
LineSums rows_against_time(const std::vector<const ExpertCallSample*>& samples) {
  return line_sums(
      samples, [](const ExpertCallSample& s) { return s.rows; },
      [](const ExpertCallSample& s) { return s.duration_s; });
}

// call_s + rows x row_s by least squares over the run's `calls` calls (sums `l`). The routing
// gives the rows their spread; where they hardly vary (under 1% relative standard deviation),
// or the fit has a negative cost per call or per row, a call's cost cannot be told from a row's:
// the cost is per row alone (a line through the origin), or, with no rows at all, per call alone.
ExpertCallCost fit_run_calls(const LineSums& l, std::size_t calls) {
  ExpertCallCost cost;
  cost.samples = static_cast<std::int64_t>(calls);
  if (calls == 0) return cost;
  if (l.x_varies() && l.sxy > 0) {
    const double row_s = l.sxy / l.sxx;
    const double call_s = l.mean_y - row_s * l.mean_x;
    if (call_s >= 0) {
      cost.call_s = call_s;
      cost.row_s = row_s;
      return cost;
    }
  }
  cost.per_row_only = true;
  if (l.sxx_origin > 0)
    cost.row_s = std::max(0.0, l.sxy_origin / l.sxx_origin);
  else
    cost.call_s = l.mean_y;  // no rows at all: what a call costs empty
  return cost;
}

// With the executor's probe, whose row counts spread from a quarter to twice a call's: the cost
// per row is the probe's slope, and the cost per call what the run's own calls leave at their
// mean rows. The run's calls keep the level (the probe runs an expert alone, outside the
// passes, where caches and the other rank's work differ); the probe gives what the routing's
// narrow spread cannot, how a call's time follows its rows. Without a usable probe (no spread,
// no positive slope, no run calls), the run's calls alone.
ExpertCallCost fit_expert_calls(const std::vector<const ExpertCallSample*>& run,
                                const std::vector<const ExpertCallSample*>& probe) {
  const LineSums r = rows_against_time(run);
  ExpertCallCost cost = fit_run_calls(r, run.size());
  if (run.empty() || probe.empty()) return cost;
  const LineSums p = rows_against_time(probe);
  if (!p.x_varies() || p.sxy <= 0) return cost;
  const double probe_row_s = p.sxy / p.sxx;
  // At most the run's mean time per row: the cost per call stays >= 0.
  cost.row_s = r.mean_x > 0 ? std::min(probe_row_s, r.mean_y / r.mean_x) : probe_row_s;
  cost.call_s = r.mean_y - cost.row_s * r.mean_x;
  cost.per_row_only = false;
  cost.probe_samples = static_cast<std::int64_t>(probe.size());
  return cost;
}

std::string describe(const char* pass, const ExpertCallCost& c) {
  return fmt::format(
      "experts' {}: {:.1f} us per call + {:.3f} us per row over {} calls{}", pass, c.call_s * 1e6, c.row_s * 1e6,
      c.samples,
      c.probe_samples > 0
          ? fmt::format(" (the cost per row from the probe's {} row counts)", c.probe_samples)
          : std::string(c.per_row_only ? " (the rows did not separate a call's cost from a row's: per row alone)"
                                       : ""));
}

// What a parameter more adds to the data-parallel reduction of its stage, reduced over all D
// replicas: its gradient's bytes (fp32, as pprun reduces them) sent 2 (D - 1) / D times by the
// ring, over the link the run measured: the all-to-all's where its time followed its bytes,
// else the pipeline transfers'. The measured reduction is one size: it cannot tell its fixed
// cost from its cost per byte, and pricing the measured time per parameter charged an E = 1
// prediction, whose replicas also reduce the experts' gradients, several times what it took
// (tiny-moe: 19 ms predicted where 1.4 ms was measured, docs/ACCURACY.md). Without a measured
// link: 0, with a note.
double reduce_s_per_parameter(Estimation& e) {
  constexpr double kGradientBytes = 4;
  constexpr double kUnmeasuredBandwidth = 1e15;  // estimate_transfers' stand-in for "no byte term"
  const Profile& p = e.result.profile;
  if (p.data_parallel <= 1) return 0;
  double bandwidth = 0;
  std::string link;
  if (p.all_to_all)
    for (const AllToAllCost& c : p.all_to_all->costs)
      if (c.bandwidth_bytes_per_s > 0 && c.bandwidth_bytes_per_s < kUnmeasuredBandwidth) {
        bandwidth = c.bandwidth_bytes_per_s;
        link = fmt::format("the all-to-all's of {} ranks", c.group_size);
      }
  if (bandwidth <= 0 && p.transfer.bandwidth_bytes_per_s > 0 &&
      p.transfer.bandwidth_bytes_per_s < kUnmeasuredBandwidth) {
    bandwidth = p.transfer.bandwidth_bytes_per_s;
    link = "the pipeline transfers'";
  }
  if (bandwidth <= 0) {
    e.note(
        "expert compute: no link bandwidth was measured (the all-to-all's time did not follow its bytes, no pipeline "
        "transfers): the experts' gradients add nothing to the reduction at another E, whose measured time stays");
    return 0;
  }
  const double replicas = p.data_parallel;
  const double seconds = kGradientBytes * 2 * (replicas - 1) / replicas / bandwidth;
  e.note(
      fmt::format("expert compute: a parameter more in the reduction costs {:.3g} ns (fp32 over {} link, {:.3g} GB/s)",
                  seconds * 1e9, link, bandwidth * 1e-9));
  return seconds;
}

}  // namespace

void estimate_expert_compute(Estimation& e) {
  const std::vector<ExpertCallSample>& calls = e.collected.expert_calls;
  if (calls.empty()) return;
  Profile& p = e.result.profile;
  ExpertComputeProfile x;
  x.expert_parallel = p.all_to_all ? std::max(1, p.all_to_all->expert_parallel) : 1;
  x.experts = e.collected.experts_per_layer > 0           ? e.collected.experts_per_layer
              : p.all_to_all && p.all_to_all->experts > 0 ? p.all_to_all->experts
                                                          : x.expert_parallel;
  if (x.experts % x.expert_parallel != 0) {
    e.note(fmt::format("expert compute: the {} experts per layer do not divide among E = {}: not learnt", x.experts,
                       x.expert_parallel));
    return;
  }
  std::vector<const ExpertCallSample*> forward, backward, probed_forward, probed_backward;
  std::map<int, std::set<std::string>> stage_layers;
  for (const ExpertCallSample& c : calls) {
    (c.backward ? backward : forward).push_back(&c);
    if (c.stage >= 0 && !c.layer.empty()) stage_layers[c.stage].insert(c.layer);
  }
  for (const ExpertCallSample& c : e.collected.expert_call_probe)
    (c.backward ? probed_backward : probed_forward).push_back(&c);
  x.forward = fit_expert_calls(forward, probed_forward);
  x.backward = fit_expert_calls(backward, probed_backward);
  double rows = 0;
  for (const double r : e.collected.expert_rows_per_layer)
    rows += r / static_cast<double>(e.collected.expert_rows_per_layer.size());
  x.rows_per_layer = rows;
  for (const auto& layer : e.collected.expert_parameters_of_layer)
    x.expert_parameters_per_layer = std::max(x.expert_parameters_per_layer, layer.second);
  x.reduce_s_per_parameter = reduce_s_per_parameter(e);
  // A run without all-to-all (E = 1) still tells which stages' layers run experts.
  for (StageProfile& stage : p.stages)
    if (stage.moe_layers == 0)
      if (const auto it = stage_layers.find(stage.stage); it != stage_layers.end())
        stage.moe_layers = static_cast<int>(it->second.size());
  e.note(describe("forward", x.forward));
  e.note(describe("backward", x.backward));
  e.note(fmt::format(
      "expert compute: {:.0f} rows per MoE layer and micro-batch in {} calls at E = {}; expert gradients {} "
      "parameters per layer",
      x.rows_per_layer, x.experts / x.expert_parallel, x.expert_parallel, x.expert_parameters_per_layer));
  if (x.expert_parameters_per_layer == 0)
    e.note(
        "expert compute: the run description gives no expert parameters (an older pprun): no expert gradients added");
  p.expert_compute = x;
}

}  // namespace pipescope::sim::calibration
